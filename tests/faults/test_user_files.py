"""No output folder loses a user's file (issue 44, finding 4): every writer replaces or deletes only what an
earlier run of the same command wrote there, as that run recorded it. `finetune --search` keeps a user's
README.md; `export --out` refuses a config.json / model.onnx no export wrote and never deletes what an edited
deploy.json lists; `data build --out` refuses a manifest.json no build wrote and never deletes a folder an
edited manifest names, locally or on an object store."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pytest
from conftest import FINETUNE_FAST, TINY_SET, finetune_tiny_sst2, refused, tiny_sst2_data

from albertlm.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py
MINE = "my own notes, not a model card\n"


@pytest.fixture(scope="module")
def model(tok_dir, tmp_path_factory) -> Path:
    return finetune_tiny_sst2(tok_dir, tmp_path_factory.mktemp("user-files"))


# ------------------------------------------------------------------------------------------ finetune --search
def test_search_keeps_the_users_readme(tok_dir, tmp_path, capsys):
    pytest.importorskip("optuna")
    out = tmp_path / "search"
    out.mkdir()
    (out / "README.md").write_text(MINE)
    assert main(["finetune", "--task", "sst2", "--data", str(tiny_sst2_data(tmp_path / "sst")), "--model",
                 "albert-tiny", "--tokenizer", str(tok_dir), "--out", str(out), "--search", "2", "--search-seeds",
                 "1", "--search-batch-sizes", "8", "--search-evals", "1", *FINETUNE_FAST, *TINY_SET]) == 0  # fmt: skip
    assert (out / "README.md").read_text() == MINE  # was the best seed's card, copied over it
    assert (out / "model.safetensors").is_file() and (out / "seeds" / "seed_0" / "README.md").is_file()


# ------------------------------------------------------------------------------------------ export --out
@pytest.mark.parametrize("name", ["config.json", "model.onnx"])
def test_export_refuses_a_file_no_export_wrote(model, tmp_path, capsys, name):
    pytest.importorskip("onnxruntime")
    out = tmp_path / "export"
    out.mkdir()
    (out / name).write_text(MINE)
    refused(capsys, main(["export", "--model", str(model), "--out", str(out)]), name, "no earlier export wrote")
    assert (out / name).read_text() == MINE and sorted(p.name for p in out.iterdir()) == [name]


def test_export_replaces_its_own_files_but_not_one_edited_since(model, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    out = tmp_path / "export"
    assert main(["export", "--model", str(model), "--out", str(out), "--quantize", "int8"]) == 0
    assert main(["export", "--model", str(model), "--out", str(out)]) == 0  # its own: replaced; int8 dropped
    assert not (out / "model.int8.onnx").exists() and (out / "model.onnx").is_file()
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "note": "edited by hand"}))
    capsys.readouterr()
    refused(capsys, main(["export", "--model", str(model), "--out", str(out)]), "config.json", "changed since")
    assert json.loads((out / "config.json").read_text())["note"] == "edited by hand"


def test_an_edited_deploy_json_deletes_nothing_it_names(model, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    from albertlm.files import sha256

    out = tmp_path / "export"
    assert main(["export", "--model", str(model), "--out", str(out)]) == 0
    for name in ("notes.txt", "data.csv"):
        (out / name).write_text(MINE)
    deploy = json.loads((out / "deploy.json").read_text())
    deploy["files"]["notes"] = "notes.txt"  # named as a graph
    deploy["sha256"]["data.csv"] = sha256(out / "data.csv")  # listed with its very checksum
    (out / "deploy.json").write_text(json.dumps(deploy))
    assert main(["export", "--model", str(model), "--out", str(out)]) == 0
    assert (out / "notes.txt").read_text() == MINE and (out / "data.csv").read_text() == MINE


# ------------------------------------------------------------------------------------------ data build --out
def build(corpus: Path, tok_dir: Path, out: str, seed: int = 1) -> int:
    return main(["data", "build", "--input", str(corpus), "--tokenizer", str(tok_dir), "--out", out,
                 "--max-seq-length", "32", "--seed", str(seed)])  # fmt: skip


def test_data_build_refuses_a_manifest_no_build_wrote(corpus, tok_dir, tmp_path, capsys):
    out = tmp_path / "data"
    out.mkdir()
    (out / "manifest.json").write_text('{"my": "inventory"}')
    refused(capsys, build(corpus, tok_dir, str(out)), "manifest.json that no `albertlm data build` wrote")
    assert (out / "manifest.json").read_text() == '{"my": "inventory"}' and len(list(out.iterdir())) == 1


def test_data_build_keeps_a_folder_an_edited_manifest_names(corpus, tok_dir, tmp_path, capsys):
    out = tmp_path / "data"
    assert build(corpus, tok_dir, str(out)) == 0
    m = json.loads((out / "manifest.json").read_text())
    mine = out / "shards-photos"
    mine.mkdir()
    (mine / "cat.jpg").write_text(MINE)
    shutil.copytree(out / m["shard_dir"], tmp_path / "ours")
    (out / "manifest.json").write_text(json.dumps({**m, "shard_dir": "shards-photos"}))
    assert build(corpus, tok_dir, str(out), seed=2) == 0
    assert (mine / "cat.jpg").read_text() == MINE
    # the earlier build's own folder (it holds the mark) still went
    assert not (out / m["shard_dir"]).exists()


def test_an_upload_keeps_objects_an_edited_manifest_on_the_store_names(corpus, tok_dir, tmp_path, capsys,
                                                                       monkeypatch):  # fmt: skip
    pytest.importorskip("s3fs")
    import boto3
    import s3fs
    from s3_servers import KEY, SECRET, moto_server

    with contextlib.ExitStack() as stack:
        endpoint = stack.enter_context(moto_server())
        for k, v in {"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1",
                     "AWS_ENDPOINT_URL": endpoint, "ALBERTLM_CACHE": str(tmp_path / "cache")}.items():  # fmt: skip
            monkeypatch.setenv(k, v)
        s3fs.S3FileSystem.clear_instance_cache()
        stack.callback(s3fs.S3FileSystem.clear_instance_cache)
        s3 = boto3.client("s3", endpoint_url=endpoint)
        s3.create_bucket(Bucket="corpus")
        assert build(corpus, tok_dir, "s3://corpus/en") == 0
        m = json.loads(s3.get_object(Bucket="corpus", Key="en/manifest.json")["Body"].read())
        s3.put_object(Bucket="corpus", Key="en/shards-photos/cat.jpg", Body=MINE.encode())
        s3.put_object(Bucket="corpus", Key="en/manifest.json", Body=json.dumps({**m, "shard_dir": "shards-photos"}))
        assert build(corpus, tok_dir, "s3://corpus/en", seed=2) == 0
        assert s3.get_object(Bucket="corpus", Key="en/shards-photos/cat.jpg")["Body"].read() == MINE.encode()
        s3.put_object(Bucket="corpus", Key="notes/manifest.json", Body=b'{"my": "inventory"}')  # not a build's
        capsys.readouterr()
        refused(capsys, build(corpus, tok_dir, "s3://corpus/notes"), "manifest.json that no `albertlm data build`")
        assert s3.get_object(Bucket="corpus", Key="notes/manifest.json")["Body"].read() == b'{"my": "inventory"}'
