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


@pytest.mark.parametrize("content, kind", [(b"", "sentencepiece"), (b"\n\n   \n\t\n", "wordpiece")])
def test_building_or_training_on_no_text_stops_and_leaves_nothing(tok_dir, tmp_path, capsys, content, kind):
    """An empty (or blank) input used to give a 0-token build that pretraining failed on later, and a failed
    SentencePiece training left its --out folder behind."""
    text = tmp_path / "empty.txt"
    text.write_bytes(content)
    out = tmp_path / "shards"
    assert main(["data", "build", "--input", str(text), "--tokenizer", str(tok_dir), "--out", str(out)]) == 2
    one_line(capsys, "no text to build from", str(text))
    assert not out.exists()
    out = tmp_path / "tok"
    assert main(["tokenizer", "train", "--kind", kind, "--input", str(text), "--vocab-size", "200",
                 "--out", str(out)]) == 2  # fmt: skip
    one_line(capsys, "no text in", str(text))
    assert not out.exists()


def test_a_vocab_size_of_zero_is_refused_not_read_as_the_default(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("one sentence here\n", encoding="utf-8")
    assert main(["tokenizer", "train", "--input", str(text), "--vocab-size", "0", "--out", str(tmp_path / "t")]) == 2
    one_line(capsys, "--vocab-size 0 is too small")


def test_serve_on_a_port_in_use_or_out_of_range(tmp_path, capsys):
    """The port is taken before the model loads, so a busy one fails at once, in one line (was a traceback
    from uvicorn after the model had loaded and "serving on ..." had been printed)."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        assert main(["serve", "--model", str(tmp_path / "never-loaded"), "--port", str(port)]) == 2
    one_line(capsys, f"--port {port}", "Address already in use", "--port 0")
    with pytest.raises(SystemExit) as stop:
        main(["serve", "--model", str(tmp_path), "--port", "70000"])
    assert stop.value.code == 2
    assert "--port: must be from 0 to 65535, not 70000" in capsys.readouterr().err


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_model_directory_is_never_written_over_by_another_command(model, tok_dir, tmp_path, capsys):
    """finetune, init, export, evaluate --out and tokenizer train used to write into a folder holding a fine-tuned
    model (init replaced its weights with random ones; finetune mixed two runs; export replaced its config.json
    and tokenizer with another model's; evaluate replaced its metrics.json)."""
    used = tmp_path / "used"
    shutil.copytree(model, used)
    (used / "notes.txt").write_text("mine")
    before = _snapshot(used)
    sst2 = str(sst(tmp_path / "sst"))
    finetune = ["finetune", "--task", "sst2", "--data", sst2, "--model", "albert-tiny", "--tokenizer", str(tok_dir),
                "--out", str(used), *FAST, *TINY_FLAGS]  # fmt: skip
    assert main(finetune) == 2
    one_line(capsys, f"--out {used} already holds a model", "model.safetensors", "--overwrite")
    assert main(["finetune", "--task", "sst2", "--data", sst2, "--model", str(used), "--out", str(used), *FAST,
                 "--overwrite"]) == 2  # fmt: skip
    one_line(capsys, "is the --model directory")
    assert main(["init", "--preset", "albert-tiny", "--out", str(used)]) == 2
    one_line(capsys, "exists and is not empty")
    assert main(["evaluate", "--model", str(used), "--data", sst2, "--out", str(used)]) == 2
    one_line(capsys, "holds a model", "metrics.json")
    assert main(["tokenizer", "train", "--input", str(tmp_path / "sst" / "train.tsv"), "--vocab-size", "60",
                 "--out", str(used)]) == 2  # fmt: skip
    one_line(capsys, "holds a model (config.json)")
    assert main(["export", "--model", str(model), "--out", str(used)]) == 2
    one_line(capsys, "holds a torch model")
    assert main(["data", "build", "--input", str(tmp_path / "sst" / "train.tsv"), "--tokenizer", str(tok_dir),
                 "--out", str(used)]) == 2  # fmt: skip
    one_line(capsys, "holds a model (config.json)")
    assert _snapshot(used) == before
    # --overwrite replaces the earlier run's model and metrics, and leaves the user's file alone
    assert main([*finetune, "--overwrite", "--seed", "1"]) == 0  # another seed: other weights
    assert (used / "notes.txt").read_text() == "mine"
    assert (used / "model.safetensors").read_bytes() != before["model.safetensors"]


def test_a_binary_file_given_as_a_model_is_one_line(tmp_path, capsys):
    """AlbertConfig.load reads a config.json given as a file too; a binary file was a UnicodeDecodeError
    traceback (`--init-from`, `analyze --model`)."""
    from albertlm.config import AlbertConfig
    from albertlm.errors import ConfigError

    blob = tmp_path / "weights.bin"
    blob.write_bytes(bytes(range(128, 256)) * 4)
    with pytest.raises(ConfigError, match="weights.bin: not UTF-8 text, so not the JSON file expected here"):
        AlbertConfig.load(blob)
    ckpt = Path(__file__).resolve().parents[1] / "fixtures" / "tf" / "google" / "model.ckpt"
    assert main(["convert", "--from", "tf", "--checkpoint", str(ckpt), "--config", str(blob),
                 "--out", str(tmp_path / "o")]) == 2  # fmt: skip
    one_line(capsys, "weights.bin: not UTF-8 text")
