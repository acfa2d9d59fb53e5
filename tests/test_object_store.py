"""Shards in object storage, against two real S3-compatible servers started here on 127.0.0.1 (moto's, and
SeaweedFS, which also checks the credentials; the client is s3fs with credentials from the environment, as a
user's would be): `data build --out s3://...`, `pretrain --data s3://...` equal to the local build, the cache
(reuse, verification, eviction, its bound) and the failures, each one line."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
import torch
from s3_servers import KEY, SECRET, moto_server, seaweedfs
from safetensors.torch import load_file
from shared_data import docstring_corpus

from albertlm.cli import main
from albertlm.errors import DataError, UserError

TINY = ["--set=hidden_size=32", "--set=num_attention_heads=2", "--set=intermediate_size=64",
        "--set=embedding_size=16", "--set=num_hidden_layers=2"]  # fmt: skip
STEPS = ["--max-steps", "3", "--warmup-steps", "1", "--global-batch-size", "8", "--micro-batch-size", "4",
         "--save-every", "100", "--eval-every", "100", "--no-progress", "--lr", "5e-3", *TINY]  # fmt: skip


@contextlib.contextmanager
def _bucket(server: str, monkeypatch, tmp_path: Path):
    """A bucket "corpus" on a server of this test's own (s3_servers.py) on free loopback ports, the client's
    credentials and endpoint in the environment as a user's would be; yields a boto3 client of it."""
    import boto3
    import s3fs

    with contextlib.ExitStack() as stack:
        endpoint = stack.enter_context(moto_server() if server == "moto" else seaweedfs(tmp_path / "seaweedfs"))
        env = {"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_ENDPOINT_URL": endpoint, "ALBERTLM_CACHE": str(tmp_path / "cache")}  # fmt: skip
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        s3fs.S3FileSystem.clear_instance_cache()  # a filesystem of an earlier test would keep its endpoint
        stack.callback(s3fs.S3FileSystem.clear_instance_cache)
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket="corpus")
        yield client


@pytest.fixture(params=["moto", "seaweedfs"])
def s3(request, monkeypatch, tmp_path):
    with _bucket(request.param, monkeypatch, tmp_path) as client:
        yield client


@pytest.fixture
def seaweed_s3(monkeypatch, tmp_path):
    """SeaweedFS alone: the server of the two that checks credentials."""
    with _bucket("seaweedfs", monkeypatch, tmp_path) as client:
        yield client


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


def test_any_fsspec_url_not_only_s3(corpus_and_tok, tmp_path, monkeypatch, one_thread):
    """The same path through another fsspec filesystem (memory://, one without buckets): nothing is S3's own."""
    import fsspec

    corpus, tok = corpus_and_tok
    monkeypatch.setenv("ALBERTLM_CACHE", str(tmp_path / "cache"))
    _build(corpus, tok, "memory://albertlm-test/en")
    try:
        assert fsspec.filesystem("memory").isfile("/albertlm-test/en/manifest.json")
        assert main(["pretrain", "--data", "memory://albertlm-test/en", "--out", str(tmp_path / "m"), *STEPS]) == 0
        assert (tmp_path / "m" / "final" / "model.safetensors").is_file()
    finally:
        fsspec.filesystem("memory").rm("/albertlm-test", recursive=True)


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
    assert rc == 2 and "s3://no-such-bucket/en: the bucket 'no-such-bucket' does not exist" in err
    assert "Traceback" not in err and "data build (" not in err  # refused before building, not after
    with pytest.raises(UserError, match="writes a local folder"):
        from albertlm.data import build_dataset
        from albertlm.tokenizer import load_tokenizer

        build_dataset([corpus], load_tokenizer(tok), "s3://corpus/x")


def test_wrong_credentials_are_one_line(seaweed_s3, corpus_and_tok, tmp_path, monkeypatch, capsys):
    """A store that checks credentials refuses a wrong secret: one line naming the URL and what to check, for
    the build before it builds and for the run before it starts."""
    corpus, tok = corpus_and_tok
    _build(corpus, tok, "s3://corpus/en")
    import s3fs

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    s3fs.S3FileSystem.clear_instance_cache()
    assert main(["pretrain", "--data", "s3://corpus/en", "--out", str(tmp_path / "r"), *STEPS]) == 2
    err = capsys.readouterr().err
    assert "s3://corpus/en: cannot read manifest.json" in err and "check the credentials" in err
    assert "Traceback" not in err and not (tmp_path / "r" / "final").exists()
    assert main(["data", "build", "--input", str(corpus), "--tokenizer", str(tok), "--out", "s3://corpus/zh",
                 "--max-seq-length", "64"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "s3://corpus/zh: cannot reach the object store" in err and "data build (" not in err

