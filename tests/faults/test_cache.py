"""The shard cache tidies up after a killed upload and speaks in sizes a reader can use (issue 44, finding 12):
`data build --out s3://...` killed mid-way left its staging folder in the cache for good; the next upload or
cache eviction now removes it (never a running upload's). A build too big for --cache-gb was "0.0 GB, more
than the cache's 1e-05 GB"."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ENV, TINY_SET

from albertlm.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture
def store(tmp_path, monkeypatch):
    """moto's S3 server (tests/s3_servers.py) with a bucket "corpus"; the environment a user's client reads."""
    pytest.importorskip("s3fs")
    import boto3
    import s3fs
    from s3_servers import KEY, SECRET, moto_server

    with contextlib.ExitStack() as stack:
        endpoint = stack.enter_context(moto_server())
        env = {"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_ENDPOINT_URL": endpoint, "ALBERTLM_CACHE": str(tmp_path / "cache")}  # fmt: skip
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        s3fs.S3FileSystem.clear_instance_cache()
        stack.callback(s3fs.S3FileSystem.clear_instance_cache)
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="corpus")
        yield env


def build_args(corpus: Path, tok_dir: Path, out: str) -> list[str]:
    return ["data", "build", "--input", str(corpus), "--tokenizer", str(tok_dir), "--out", out, "--max-seq-length",
            "32", "--seed", "1"]  # fmt: skip


def killed_upload(store: dict, corpus: Path, tok_dir: Path, tmp_path: Path) -> Path:
    """`data build --out s3://corpus/big` in a subprocess, SIGKILLed once its staging folder is in the cache."""
    big = tmp_path / "big.txt"
    big.write_text(corpus.read_text() * 20)  # a few seconds of tokenizing: time to kill it mid-build
    proc = subprocess.Popen([sys.executable, "-m", "albertlm", *build_args(big, tok_dir, "s3://corpus/big")],
                            env={**ENV, **store}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    cache = Path(store["ALBERTLM_CACHE"])
    deadline = time.time() + 120
    while not list(cache.glob("upload-*/.albertlm-upload.lock")):
        assert proc.poll() is None and time.time() < deadline, "the build ended before it could be killed"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    left = list(cache.glob("upload-*"))
    assert len(left) == 1
    return left[0]


def test_the_next_upload_removes_a_killed_uploads_folder(store, corpus, tok_dir, tmp_path):
    left = killed_upload(store, corpus, tok_dir, tmp_path)
    mine = Path(store["ALBERTLM_CACHE"]) / "upload-notes"  # a folder of that name but not ours: it stays
    mine.mkdir()
    assert main(build_args(corpus, tok_dir, "s3://corpus/en")) == 0
    assert not left.exists() and mine.is_dir()  # was left in the cache for good


def test_eviction_removes_a_killed_uploads_folder(store, corpus, tok_dir, tmp_path):
    from albertlm.data.remote import fetch

    assert main(build_args(corpus, tok_dir, "s3://corpus/en")) == 0
    left = killed_upload(store, corpus, tok_dir, tmp_path)
    fetch("s3://corpus/en", cache_gb=1)
    assert not left.exists()


def test_a_build_too_big_for_the_cache_is_said_in_units_that_show_it(store, corpus, tok_dir, tmp_path, capsys):
    assert main(build_args(corpus, tok_dir, "s3://corpus/en")) == 0
    capsys.readouterr()
    code = main(["pretrain", "--data", "s3://corpus/en", "--out", str(tmp_path / "run"), "--cache-gb", "0.00001",
                 "--max-steps", "1", "--no-progress", *TINY_SET])  # fmt: skip
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and "0.0 GB" not in line, line
    assert " kB, more than the cache's 10.0 kB (--cache-gb 1e-05)" in line and "raise --cache-gb to at least" in line
