"""Bad input ends in one clear line, never a traceback (issue 14, finding 7): a training file with no label
column, an --out that is a file or read-only, a missing or corrupt .onnx, config.json fields of the wrong
type, invalid UTF-8 on stdin. In-process through ``cli.main``: an exception it does not turn into exit 2
fails the test, exactly as a traceback would."""

from __future__ import annotations

import errno
import importlib.util
import io
import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import TINY

from albertlm.cli import main

TINY_FLAGS = [f"--set={k}={v}" for k, v in TINY.items()]
FAST = ["--quiet", "--max-steps", "2", "--batch-size", "8", "--lr", "1e-3", "--max-seq-length", "32"]


def sst(root: Path, label: bool = True) -> Path:
    root.mkdir()
    rows = "".join(f"a {'good' if i % 2 else 'bad'} film number {i}" + (f"\t{i % 2}" if label else "") + "\n"
                   for i in range(24))
    for name in ("train.tsv", "dev.tsv"):
        (root / name).write_text(("sentence\tlabel\n" if label else "sentence\n") + rows, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def model(tok_dir, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bad-input")
    out = root / "ft"
    assert main(["finetune", "--task", "sst2", "--data", str(sst(root / "sst")), "--model", "albert-tiny",
                 "--tokenizer", str(tok_dir), "--out", str(out), *FAST, *TINY_FLAGS]) == 0
    return out


def one_line(capsys, *needles: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "no error message"
    line = err[-1]
    assert ": error: " in line and "Traceback" not in "\n".join(err), err
    for n in needles:
        assert n in line, (n, line)
    return line


def test_finetune_on_a_file_without_a_label_column(tok_dir, tmp_path, capsys):
    data = sst(tmp_path / "nolabel", label=False)
    args = ["finetune", "--task", "sst2", "--data", str(data), "--model", "albert-tiny", "--tokenizer", str(tok_dir),
            "--out", str(tmp_path / "o"), *FAST, *TINY_FLAGS]
    assert main(args) == 2
    one_line(capsys, "train.tsv:2", "no label", "label column")
    good = sst(tmp_path / "good")
    assert main([*args[:4], str(good), *args[5:], "--eval-file", str(data / "dev.tsv")]) == 2
    one_line(capsys, "dev.tsv:2", "no label", "--eval-file")


def test_out_that_is_a_file_or_unwritable(model, tok_dir, tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for out, needle in ((blocker, "a file is in the way"), (blocker / "sub", "not a folder")):
        assert main(["export", "--model", str(model), "--out", str(out)]) == 2
        one_line(capsys, str(out), needle)
        assert main(["tokenizer", "train", "--input", str(tok_dir / "spiece.model"), "--out", str(out)]) in (2,)
        capsys.readouterr()
    assert blocker.read_text() == "x"
    # a read-only file system (root ignores permission bits, so the error is injected where folders are made)
    real_mkdir = Path.mkdir

    def read_only(self, *a, **k):
        if str(self).startswith(str(tmp_path / "ro")):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_mkdir(self, *a, **k)

    monkeypatch.setattr(Path, "mkdir", read_only)
    assert main(["export", "--model", str(model), "--out", str(tmp_path / "ro" / "x")]) == 2
    one_line(capsys, str(tmp_path / "ro"), "Read-only file system")


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime not installed")
def test_missing_or_corrupt_onnx(model, tmp_path, capsys):
    export = tmp_path / "onnx"
    assert main(["export", "--model", str(model), "--format", "onnx", "--out", str(export)]) == 0
    inp = tmp_path / "in.txt"
    inp.write_text("a good film\n")
    capsys.readouterr()
    for damage in ("truncate", "garbage", "delete"):
        bad = tmp_path / damage
        shutil.copytree(export, bad)
        f = bad / "model.onnx"
        if damage == "truncate":
            f.write_bytes(f.read_bytes()[:2000])
        elif damage == "garbage":
            f.write_bytes(b"\x00garbage" * 100)
        else:
            f.unlink()
        assert main(["predict", "--model", str(bad), "--engine", "onnx", "--input", str(inp)]) == 2
        one_line(capsys, "model.onnx")


@pytest.mark.parametrize("field, value, needle", [
    ("hidden_size", "big", "hidden_size must be an integer"),
    ("num_hidden_layers", 2.5, "num_hidden_layers must be an integer"),
    ("layer_norm_eps", "tiny", "layer_norm_eps must be a number"),
    ("hidden_act", 3, "hidden_act must be a string"),
    ("id2label", ["a", "b"], "id2label must be an object"),
    ("id2label", {"x": "a"}, "id2label keys"),
    (None, [1, 2], "config.json"),
])
def test_config_json_fields_of_the_wrong_type(model, tmp_path, capsys, field, value, needle):
    bad = tmp_path / "m"
    shutil.copytree(model, bad)
    cfg = json.loads((bad / "config.json").read_text())
    if field is None:
        cfg = value
    else:
        cfg[field] = value
    (bad / "config.json").write_text(json.dumps(cfg))
    inp = tmp_path / "in.txt"
    inp.write_text("a good film\n")
    assert main(["predict", "--model", str(bad), "--input", str(inp)]) == 2
    one_line(capsys, "config.json", needle)


@pytest.mark.parametrize("command", ["tokenizer", "predict"])
def test_invalid_utf8_on_stdin(model, tok_dir, capsys, monkeypatch, command):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"fine\ngood \xff\xfe film\n"), encoding="utf-8"))
    args = (["tokenizer", "encode", "--tokenizer", str(tok_dir)] if command == "tokenizer"
            else ["predict", "--model", str(model)])
    assert main(args) == 2
    one_line(capsys, "stdin", "not UTF-8")
