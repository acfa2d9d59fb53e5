"""`pretrain --resume` goes on with the data the run started with (issue 44, finding 3): a data folder rebuilt
since (other text, another instance count) continued silently before, its saved position indexing other
instances. The run records its data's identity; a change is one line naming the flag that continues anyway."""

from __future__ import annotations

import json

import pytest
from conftest import pretrain_args

from albertlm.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def build(text, tok_dir, out, seed: int = 1) -> None:  # noqa: ANN001
    assert main(["data", "build", "--input", str(text), "--tokenizer", str(tok_dir), "--out", str(out),
                 "--max-seq-length", "32", "--seed", str(seed)]) == 0  # fmt: skip


def test_resume_refuses_rebuilt_data_unless_told(corpus, tok_dir, tmp_path, capsys):
    data, run = tmp_path / "data", tmp_path / "run"
    build(corpus, tok_dir, data)
    assert main(pretrain_args(data, run, steps=2)) == 0
    recorded = json.loads((run / "run_config.json").read_text())["data_identity"]
    assert set(recorded) == {"data", "valid_data"} and recorded["valid_data"] is None

    build(corpus, tok_dir, data)  # rebuilt from the same text and settings: the same data (a control)
    assert main(["pretrain", "--out", str(run), "--resume", "--max-steps", "3"]) == 0

    half = tmp_path / "half.txt"
    text = corpus.read_text()
    half.write_text(text[: text.index("\n\n", len(text) // 2) + 2])  # fewer documents, fewer instances
    build(half, tok_dir, data)
    capsys.readouterr()
    before = {p.name: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()}
    code = main(["pretrain", "--out", str(run), "--resume", "--max-steps", "4"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "Traceback" not in "\n".join(err), err[-5:]
    assert f"--resume: --data {data} changed since the run started" in err[-1] and "--allow-data-change" in err[-1]
    assert {p.name: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()} == before  # nothing written

    build(corpus, tok_dir, data, seed=2)  # the same text, another seed: other pairs and masks
    assert main(["pretrain", "--out", str(run), "--resume", "--max-steps", "4"]) == 2
    assert "changed since the run started" in capsys.readouterr().err

    assert main(["pretrain", "--out", str(run), "--resume", "--max-steps", "4", "--allow-data-change"]) == 0
    assert "--allow-data-change: --data" in capsys.readouterr().out
    # the run now records the data it went on with: a plain --resume continues on it
    assert main(["pretrain", "--out", str(run), "--resume", "--max-steps", "5"]) == 0
