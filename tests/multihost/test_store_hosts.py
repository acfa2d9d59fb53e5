"""Two hosts pretraining from object storage, no data disk shared: a SeaweedFS S3 server runs on host 0 (in its
namespace, reachable only over the hosts' link), the build is uploaded to it, and each host's workers fetch it
into their own cache. The weights equal one process's from the local build. Marker `multihost`."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from hosts import REPO, TINY, torchrun
from s3_servers import KEY, SECRET, seaweedfs
from safetensors.torch import load_file

pytestmark = pytest.mark.multihost


def test_two_hosts_read_their_shards_from_object_storage(two_hosts, shards, tmp_path):
    h0, h1 = two_hosts
    steps = ["--max-steps", "4", "--warmup-steps", "1", "--global-batch-size", "8", "--micro-batch-size", "4",
             "--save-every", "2", "--eval-every", "1000", "--no-progress", "--lr", "5e-3", *TINY]  # fmt: skip
    one = subprocess.run([sys.executable, "-m", "albertlm", "pretrain", "--data", str(shards), *steps, "--out",
                          str(tmp_path / "one")], env={"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO),
                          "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, cwd=REPO)  # fmt: skip
    assert one.returncode == 0, one.stderr[-2000:]
    with seaweedfs(tmp_path / "store", ip=h0.addr, netns=h0.ns, bucket="corpus") as endpoint:
        s3 = {"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1",
              "AWS_ENDPOINT_URL": endpoint}  # fmt: skip
        upload = ("import sys; from pathlib import Path; from albertlm.data.remote import upload; "
                  "upload(Path(sys.argv[1]), sys.argv[2])")  # (what `data build --out s3://` does last)
        up = h0.run([sys.executable, "-c", upload, str(shards), "s3://corpus/en"], tmp_path / "upload.log", env=s3)
        assert up.wait(timeout=120) == 0, (tmp_path / "upload.log").read_text()[-2000:]
        rdzv = f"{h0.addr}:29516"
        logs = [tmp_path / f"host{i}.log" for i in range(2)]
        procs = [h.run(torchrun(h, rdzv, "2", "pretrain", "--data", "s3://corpus/en", *steps, "--out",
                                str(tmp_path / "two")), log, env={**s3, "ALBERTLM_CACHE": str(tmp_path / f"cache{i}")})
                 for i, (h, log) in enumerate(zip(two_hosts, logs, strict=True))]  # fmt: skip
        for p in procs:
            p.wait(timeout=240)
    assert [p.returncode for p in procs] == [0, 0], "\n".join(log.read_text()[-2000:] for log in logs)
    for i in range(2):  # each host fetched the build itself, into its own cache
        cached = list((tmp_path / f"cache{i}" / "shards").glob("*/manifest.json"))
        assert len(cached) == 1, f"host {i}'s cache: {cached}"
    a = load_file(str(tmp_path / "one" / "final" / "model.safetensors"))
    b = load_file(str(tmp_path / "two" / "final" / "model.safetensors"))
    for k in a:
        torch.testing.assert_close(b[k], a[k], atol=1e-5, rtol=1e-4, msg=k)
