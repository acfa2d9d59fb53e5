"""Shards in object storage, against a real S3-compatible server (moto's standalone server, started here on
127.0.0.1; the client is s3fs with credentials from the environment, as a user's would be): `data build --out
s3://...`, `pretrain --data s3://...` equal to the local build, the cache (reuse, verification, eviction, its
bound) and the failures, each one line."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from shared_data import docstring_corpus

from albertlm.cli import main
from albertlm.errors import DataError, UserError

TINY = ["--set=hidden_size=32", "--set=num_attention_heads=2", "--set=intermediate_size=64",
        "--set=embedding_size=16", "--set=num_hidden_layers=2"]  # fmt: skip
STEPS = ["--max-steps", "3", "--warmup-steps", "1", "--global-batch-size", "8", "--micro-batch-size", "4",
         "--save-every", "100", "--eval-every", "100", "--no-progress", "--lr", "5e-3", *TINY]  # fmt: skip


@pytest.fixture
def s3(monkeypatch, tmp_path):
    """A bucket on a moto server of this test's own on a free loopback port; fails (not skips) if it cannot start."""
    import boto3
    import s3fs
    from moto.server import ThreadedMotoServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "ALBERTLM_CACHE": str(tmp_path / "cache")}  # fmt: skip
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    s3fs.S3FileSystem.clear_instance_cache()  # a filesystem of an earlier test would keep its endpoint
    boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"]).create_bucket(Bucket="corpus")
    try:
        yield boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"])
    finally:
        server.stop()
        s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture(scope="module")
def corpus_and_tok(tmp_path_factory) -> tuple[Path, Path]:
    from albertlm.data.tokenizer_training import train_sentencepiece

    root = tmp_path_factory.mktemp("objstore")
    text = docstring_corpus(root / "corpus.txt", 120)
    train_sentencepiece([text], root / "tok", vocab_size=400)
    return text, root / "tok"


def _build(corpus: Path, tok: Path, out: str, seed: int = 1) -> None:
    assert main(["data", "build", "--input", str(corpus), "--tokenizer", str(tok), "--out", out, "--max-seq-length",
                 "64", "--seed", str(seed), "--workers", "1"]) == 0  # fmt: skip


def test_build_to_s3_then_pretrain_from_it_equals_the_local_build(s3, corpus_and_tok, tmp_path, one_thread):
    corpus, tok = corpus_and_tok
    _build(corpus, tok, str(tmp_path / "local"))
    _build(corpus, tok, "s3://corpus/en")
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="corpus", Prefix="en/")["Contents"]}
    assert "en/manifest.json" in keys and any(k.endswith("word_start.bin") for k in keys)
    assert main(["pretrain", "--data", str(tmp_path / "local"), "--out", str(tmp_path / "a"), *STEPS]) == 0
    assert main(["pretrain", "--data", "s3://corpus/en", "--out", str(tmp_path / "b"), *STEPS]) == 0
    a, b = (load_file(str(tmp_path / run / "final" / "model.safetensors")) for run in ("a", "b"))
    assert all(torch.equal(a[k], b[k]) for k in a)  # the same shards, read from the cache: the same run
    config = json.loads((tmp_path / "b" / "run_config.json").read_text())
    assert config["data"] == "s3://corpus/en"  # the URL is recorded as it is (a resume reads it again)
    cached = list((tmp_path / "cache" / "shards").iterdir())
    assert len(cached) == 1 and (cached[0] / "manifest.json").is_file()
    # --resume of a run on object storage finds its data again (from the cache: nothing downloaded twice)
    assert main(["pretrain", "--out", str(tmp_path / "b"), "--resume", "--max-steps", "4"]) == 0


def test_the_cache_reuses_verifies_and_evicts(s3, corpus_and_tok, tmp_path):
    from albertlm.data.remote import fetch

    corpus, tok = corpus_and_tok
    _build(corpus, tok, "s3://corpus/en")
    first = fetch("s3://corpus/en", cache_gb=1)
    size = sum(f.stat().st_size for f in first.rglob("*.bin"))
    stamp = {p: p.stat().st_mtime_ns for p in first.rglob("*.bin")}
    assert fetch("s3://corpus/en", cache_gb=1) == first
    assert {p: p.stat().st_mtime_ns for p in first.rglob("*.bin")} == stamp  # reused, not fetched again
    old_dir = json.loads((first / "manifest.json").read_text())["shard_dir"]
    _build(corpus, tok, "s3://corpus/en", seed=2)  # a new build replaces it: its manifest last, the old shards go
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="corpus", Prefix="en/")["Contents"]}
    assert not any(k.startswith(f"en/{old_dir}/") for k in keys)
    second = fetch("s3://corpus/en", cache_gb=size * 1.5 / 1e9)  # room for one build: the older one goes
    assert second != first and second.is_dir() and not first.exists()
    with pytest.raises(DataError, match="more than the cache's"):
        fetch("s3://corpus/en", cache_gb=size * 0.5 / 1e9)
    m = json.loads((second / "manifest.json").read_text())
    victim = f"en/{m['shard_dir']}/00000.tokens.bin"
    s3.put_object(Bucket="corpus", Key=victim, Body=b"\0" * m["shards"][0]["files"]["tokens"]["bytes"])
    with pytest.raises(DataError, match="does not match the sha256"):
        fetch("s3://corpus/en", cache_dir=tmp_path / "other-cache", cache_gb=1)


def test_failures_are_one_line(s3, corpus_and_tok, tmp_path, capsys):
    corpus, tok = corpus_and_tok
    assert main(["pretrain", "--data", "s3://corpus/nothing-here", "--out", str(tmp_path / "r"), *STEPS]) == 2
    err = capsys.readouterr().err
    assert "holds no manifest.json" in err and "Traceback" not in err
    assert main(["pretrain", "--data", "s3://no-such-bucket/en", "--out", str(tmp_path / "r2"), *STEPS]) == 2
    err = capsys.readouterr().err
    assert "no-such-bucket" in err and "Traceback" not in err
    rc = main(["data", "build", "--input", str(corpus), "--tokenizer", str(tok), "--out", "s3://no-such-bucket/en",
               "--max-seq-length", "64"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "bucket 'no-such-bucket' does not exist" in err and "Traceback" not in err
    assert "data build (" not in err  # refused before building, not after
    with pytest.raises(UserError, match="writes a local folder"):
        from albertlm.data import build_dataset
        from albertlm.tokenizer import load_tokenizer

        build_dataset([corpus], load_tokenizer(tok), "s3://corpus/x")
