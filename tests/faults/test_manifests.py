"""A build's manifest.json is input like any other (issue 44, finding 1): a folder copied from elsewhere or an
object on a shared store may hold any text. Its shard folder and file names must stay inside the build (or the
cache), and its counts, byte sizes and types must agree with the files, before anything is memory-mapped or
downloaded: one line naming manifest.json and the field otherwise, and nothing created outside. An object
deleted from the store is named by the error."""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY_SET, refused

from albertlm.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def tokens(m: dict) -> dict:
    return m["shards"][0]["files"]["tokens"]


def _set(d: dict, key: str, value) -> None:  # noqa: ANN001
    d[key] = value


# (what the edit does to the manifest, the words the one line must hold); every case failed before its fix
# (an mmap ValueError, a TypeError, a folder read outside the build) except where marked as a control
EDITS = {
    "shard_dir leads out": (lambda m: _set(m, "shard_dir", "../outside"), "shard_dir is '../outside'"),
    "shard_dir absolute": (lambda m: _set(m, "shard_dir", "/tmp"), "shard_dir is '/tmp'"),
    "file name leads out": (lambda m: _set(m["shards"][0]["files"], "../../evil", tokens(m)), "shards[0].files"),
    "count too large": (lambda m: _set(tokens(m), "count", tokens(m)["count"] * 4), "files.tokens.bytes"),
    "count negative": (lambda m: _set(tokens(m), "count", -1), "files.tokens.count is -1"),
    "count a bool": (lambda m: _set(tokens(m), "count", True), "files.tokens.count is True"),
    "bytes a string": (lambda m: _set(tokens(m), "bytes", str(tokens(m)["bytes"])), "files.tokens.bytes"),
    "a null file entry": (lambda m: _set(m["shards"][0]["files"], "tokens", None), "files.tokens is None"),
    "dtype float": (lambda m: _set(tokens(m), "dtype", "<f8"), "files.tokens.dtype is '<f8'"),
    "dtype object": (lambda m: _set(tokens(m), "dtype", "O"), "files.tokens.dtype is 'O'"),
    "sha256 null": (lambda m: _set(tokens(m), "sha256", None), "files.tokens.sha256 is None"),
    "shards not a list": (lambda m: _set(m, "shards", "all"), "shards is not a non-empty list"),
    "vocab size a string": (lambda m: _set(m["tokenizer"], "vocab_size", "400"), "tokenizer.vocab_size"),
    "mask id out of the vocabulary": (lambda m: _set(m["tokenizer"], "mask_id", 10**6), "tokenizer.mask_id"),
    "max_seq_length a string": (lambda m: _set(m["settings"], "max_seq_length", "32"), "--max-seq-length must be"),
    "mode unknown": (lambda m: _set(m, "mode", "streaming"), "mode is 'streaming'"),
    "word_start too short": (lambda m: m["word_start"].update(count=10, bytes=10), "word_start.count is 10"),
}


def edited_copy(shards: Path, root: Path, edit) -> Path:  # noqa: ANN001
    copy = root / "data"
    shutil.copytree(shards, copy)
    m = json.loads((copy / "manifest.json").read_text())
    shutil.copytree(copy / m["shard_dir"], root / "outside")  # files to find, were the names followed out
    edit(m)
    (copy / "manifest.json").write_text(json.dumps(m))
    return copy


@pytest.mark.parametrize("case", list(EDITS))
def test_an_edited_manifest_is_one_line_for_inspect_and_pretrain(shards, tmp_path, capsys, case):
    edit, needle = EDITS[case]
    data = edited_copy(shards, tmp_path, edit)
    refused(capsys, main(["data", "inspect", str(data)]), "manifest.json", needle)
    refused(capsys, main(["pretrain", "--data", str(data), "--out", str(tmp_path / "run"), "--max-steps", "1",
                          "--no-progress", *TINY_SET]), "manifest.json", needle)  # fmt: skip
    assert not (tmp_path / "run").exists()


def test_offsets_that_index_past_the_tokens_are_one_line(shards, tmp_path, capsys):
    """A sentence-offset file rewritten (its sha256 too, so only --verify-free reads see it) to point past the
    token array: refused at load, not an IndexError or a read of garbage mid-run."""
    data = edited_copy(shards, tmp_path, lambda m: None)
    m = json.loads((data / "manifest.json").read_text())
    sent = data / m["shard_dir"] / "00000.sent.bin"
    arr = np.fromfile(sent, dtype="<i8")
    arr[-1] += 1000
    arr.tofile(sent)
    m["shards"][0]["files"]["sent"]["sha256"] = hashlib.sha256(sent.read_bytes()).hexdigest()
    (data / "manifest.json").write_text(json.dumps(m))
    refused(capsys, main(["data", "inspect", str(data)]), "00000.sent.bin does not index 00000.tokens.bin")


def test_an_intact_copy_still_reads(shards, tmp_path, capsys):
    """The control: a copy of the build, untouched, inspects as before."""
    data = edited_copy(shards, tmp_path, lambda m: None)
    assert main(["data", "inspect", str(data), "--num", "1"]) == 0
    assert "instances at epoch 0" in capsys.readouterr().out


# ------------------------------------------------------------------------------------ on an object store
@pytest.fixture(scope="module")
def store(shards, tmp_path_factory):
    """moto's S3 server (tests/s3_servers.py) holding the fault suite's build at s3://corpus/en; yields a boto3
    client. The environment is set for this module only."""
    pytest.importorskip("s3fs")
    import boto3
    import s3fs
    from s3_servers import KEY, SECRET, moto_server

    with contextlib.ExitStack() as stack:
        endpoint = stack.enter_context(moto_server())
        mp = stack.enter_context(pytest.MonkeyPatch.context())
        for k, v in {"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1",
                     "AWS_ENDPOINT_URL": endpoint}.items():  # fmt: skip
            mp.setenv(k, v)
        s3fs.S3FileSystem.clear_instance_cache()
        stack.callback(s3fs.S3FileSystem.clear_instance_cache)
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket="corpus")
        for p in shards.rglob("*"):
            if p.is_file():
                client.put_object(Bucket="corpus", Key=f"en/{p.relative_to(shards)}", Body=p.read_bytes())
        yield client


def put_manifest(store, prefix: str, m: dict) -> None:  # noqa: ANN001
    """A build at s3://corpus/PREFIX: the shard objects of en/ copied, with ``m`` as its manifest."""
    for o in store.list_objects_v2(Bucket="corpus", Prefix="en/")["Contents"]:
        if not o["Key"].endswith("manifest.json"):
            store.copy_object(Bucket="corpus", Key=prefix + o["Key"][2:], CopySource={"Bucket": "corpus",
                                                                                     "Key": o["Key"]})  # fmt: skip
    store.put_object(Bucket="corpus", Key=f"{prefix}/manifest.json", Body=json.dumps(m).encode())


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


REMOTE = {
    "shard_dir leads out of the cache": (lambda m: _set(m, "shard_dir", "../../../escape"), "shard_dir"),
    "bytes a string": (lambda m: _set(tokens(m), "bytes", str(tokens(m)["bytes"])), "files.tokens.bytes"),
    "a null file entry": (lambda m: _set(m["shards"][0]["files"], "tokens", None), "files.tokens is None"),
    "count too large": (lambda m: _set(tokens(m), "count", tokens(m)["count"] * 4), "files.tokens.bytes"),
    "file name leads out": (lambda m: _set(m["shards"][0]["files"], "../../../../evil", tokens(m)),
                            "shards[0].files"),
}


@pytest.mark.parametrize("case", list(REMOTE))
def test_an_edited_manifest_on_the_store_is_one_line_before_any_download(store, shards, tmp_path, capsys,
                                                                         monkeypatch, case):  # fmt: skip
    edit, needle = REMOTE[case]
    m = json.loads((shards / "manifest.json").read_text())
    edit(m)
    prefix = "case-" + case.replace(" ", "-")
    put_manifest(store, prefix, m)
    monkeypatch.setenv("ALBERTLM_CACHE", str(tmp_path / "deep" / "er" / "cache"))
    before = tree(tmp_path)
    code = main(["pretrain", "--data", f"s3://corpus/{prefix}", "--out", str(tmp_path / "run"), "--max-steps", "1",
                 "--no-progress", *TINY_SET])  # fmt: skip
    refused(capsys, code, f"s3://corpus/{prefix}/manifest.json", needle)
    made = {p for p in tree(tmp_path) - before if not p.startswith("deep/er/cache")}
    assert not made, made  # nothing outside the cache (no escape/, no run folder)
    assert not any(p.name.endswith(".bin") for p in tmp_path.rglob("*")), "a shard was downloaded"


def test_a_deleted_object_is_named(store, shards, tmp_path, capsys, monkeypatch):
    m = json.loads((shards / "manifest.json").read_text())
    put_manifest(store, "gone", m)
    victim = f"gone/{m['shard_dir']}/00000.sent.bin"
    store.delete_object(Bucket="corpus", Key=victim)
    monkeypatch.setenv("ALBERTLM_CACHE", str(tmp_path / "cache"))
    code = main(["pretrain", "--data", "s3://corpus/gone", "--out", str(tmp_path / "run"), "--max-steps", "1",
                 "--no-progress", *TINY_SET])  # fmt: skip
    refused(capsys, code, f"s3://corpus/{victim} is missing from the store")
