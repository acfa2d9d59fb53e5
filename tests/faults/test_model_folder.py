"""A model folder is a boundary (issue 35, finding 1): every file name its own files give (the safetensors
index's weight_map, deploy.json's graph files) stays inside it, a malformed index is one line, and HF's cache
layout (a snapshot of symlinks to blobs elsewhere) still loads."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from conftest import finetune_tiny_sst2
from safetensors.torch import load_file, save_file

from albertlm.cli import main


@pytest.fixture(scope="module")
def model(tok_dir, tmp_path_factory) -> Path:
    return finetune_tiny_sst2(tok_dir, tmp_path_factory.mktemp("model-folder"))


def sharded(model: Path, dest: Path) -> Path:
    """A copy of ``model`` with its weights in two shards and a model.safetensors.index.json."""
    shutil.copytree(model, dest)
    sd = load_file(str(dest / "model.safetensors"))
    (dest / "model.safetensors").unlink()
    keys = sorted(sd)
    halves = {"model-00001-of-00002.safetensors": keys[: len(keys) // 2],
              "model-00002-of-00002.safetensors": keys[len(keys) // 2 :]}
    weight_map = {}
    for name, part in halves.items():
        save_file({k: sd[k] for k in part}, str(dest / name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, name))
    (dest / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return dest


def predict(capsys, model: Path, tmp_path: Path, *extra: str) -> tuple[int, str, str]:
    inp = tmp_path / "in.txt"
    inp.write_text("a good film\n")
    capsys.readouterr()
    code = main(["predict", "--model", str(model), "--input", str(inp), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def refused(code: int, err: str, *needles: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and lines and ": error: " in lines[-1] and "Traceback" not in err, (code, err)
    for n in needles:
        assert n in lines[-1], (n, lines[-1])
    return lines[-1]


def test_a_sharded_folder_loads(model, tmp_path, capsys):
    code, out, err = predict(capsys, sharded(model, tmp_path / "s"), tmp_path)
    assert code == 0, err
    assert json.loads(out.splitlines()[0])["label"]


@pytest.mark.parametrize("target", ["../other/model.safetensors", "/etc/passwd", "sub/../../other/model.safetensors",
                                    "..\\other\\model.safetensors"])
def test_an_index_naming_a_file_outside_the_folder_is_refused(model, tmp_path, capsys, target):
    folder = sharded(model, tmp_path / "s")
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(model / "model.safetensors", other / "model.safetensors")  # loadable: only the check stops it
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = target
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    refused(*predict(capsys, folder, tmp_path)[::2], "model.safetensors.index.json", repr(target), "outside")


def test_a_symlinked_subfolder_leading_out_is_refused(model, tmp_path, capsys):
    folder = sharded(model, tmp_path / "s")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    for name in set(index["weight_map"].values()):
        shutil.move(folder / name, outside / name)
    (folder / "sub").symlink_to(outside, target_is_directory=True)
    index["weight_map"] = {k: f"sub/{v}" for k, v in index["weight_map"].items()}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    refused(*predict(capsys, folder, tmp_path)[::2], "resolves outside")


@pytest.mark.parametrize("text, needle", [
    ("[1, 2]", "weight_map"),
    ('{"weight_map": {"a.weight": 3}}', "not a shard file name"),
    ('{"weight_map": ', "not valid JSON"),
    ('{"metadata": {}}', "weight_map"),
    ('{"weight_map": []}', "weight_map"),
    ('{"weight_map": {"a.weight": ""}}', "expected a file name"),
])
def test_a_malformed_index_is_one_line(model, tmp_path, capsys, text, needle):
    folder = sharded(model, tmp_path / "s")
    (folder / "model.safetensors.index.json").write_text(text)
    refused(*predict(capsys, folder, tmp_path)[::2], "model.safetensors.index.json", needle)


def test_hf_cache_layout_of_symlinks_to_blobs_loads(model, tmp_path, capsys):
    """models--x/snapshots/<rev>/<file> -> ../../blobs/<hash>, as huggingface_hub lays out its cache."""
    plain = sharded(model, tmp_path / "plain")
    repo = tmp_path / "models--user--tiny"
    blobs, snap = repo / "blobs", repo / "snapshots" / "0123abc"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    for i, f in enumerate(sorted(plain.iterdir())):
        blob = blobs / f"{i:04x}deadbeef"
        shutil.copy(f, blob)
        (snap / f.name).symlink_to(Path("..") / ".." / "blobs" / blob.name)
    assert all((snap / f.name).is_symlink() for f in plain.iterdir())
    code, out, err = predict(capsys, snap, tmp_path)
    assert code == 0, err
    assert out == predict(capsys, plain, tmp_path)[1]


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime not installed")
def test_an_export_manifest_naming_a_graph_outside_is_refused(model, tmp_path, capsys):
    export = tmp_path / "onnx"
    assert main(["export", "--model", str(model), "--format", "onnx", "--out", str(export)]) == 0
    code, _, err = predict(capsys, export, tmp_path, "--engine", "onnx")
    assert code == 0, err
    (tmp_path / "other").mkdir()
    shutil.move(export / "model.onnx", tmp_path / "other" / "model.onnx")
    manifest = json.loads((export / "deploy.json").read_text())
    manifest["files"]["fp32"] = "../other/model.onnx"
    manifest["sha256"] = {("../other/model.onnx" if k == "model.onnx" else k): v
                          for k, v in manifest.get("sha256", {}).items()}
    (export / "deploy.json").write_text(json.dumps(manifest))
    refused(*predict(capsys, export, tmp_path, "--engine", "onnx")[::2], "deploy.json", "outside")
