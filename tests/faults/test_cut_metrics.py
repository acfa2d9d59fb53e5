"""A metrics.jsonl whose last line a kill cut short does not stop ``--resume`` (issue 44, finding 7): the cut
line is dropped and said so, pretrain and finetune alike; a line damaged anywhere else is one line naming it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FINETUNE_FAST, TINY_SET, albertlm, pretrain_args, tiny_sst2_data

from albertlm.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

CUT = '{"step": 3, "loss": 6.1'  # a row a kill stopped mid-write: no closing brace, no newline


@pytest.fixture(scope="module")
def run2(shards, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cut") / "run"
    r = albertlm(*pretrain_args(shards, out, steps=2))
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def steps(path: Path) -> list[int]:
    return [json.loads(x)["step"] for x in path.read_text().splitlines() if "event" not in json.loads(x)]


def test_pretrain_resume_drops_a_cut_last_line(run2, tmp_path, capsys, caplog):
    run = tmp_path / "run"
    shutil.copytree(run2, run)
    with open(run / "metrics.jsonl", "a") as f:
        f.write(CUT)
    capsys.readouterr()
    assert main(["pretrain", "--out", str(run), "--resume", "--max-steps", "3"]) == 0  # was a JSONDecodeError
    assert "dropped its last line (line" in caplog.text and "metrics.jsonl" in caplog.text
    assert steps(run / "metrics.jsonl") == [1, 2, 3]


def test_a_damaged_line_before_the_last_is_one_line(run2, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(run2, run)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join([lines[0][:-3], *lines[1:]]) + "\n")
    capsys.readouterr()
    assert main(["pretrain", "--out", str(run), "--resume", "--max-steps", "3"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "metrics.jsonl:1: not a metric row" in line and ": error: " in line


def test_finetune_resume_drops_a_cut_last_line(tok_dir, tmp_path, capsys, caplog):
    out = tmp_path / "ft"
    args = ["finetune", "--task", "sst2", "--data", str(tiny_sst2_data(tmp_path / "sst")), "--model", "albert-tiny",
            "--tokenizer", str(tok_dir), "--out", str(out), *FINETUNE_FAST, "--save-every", "1",
            "--eval-every", "1", *TINY_SET]  # fmt: skip
    args[args.index("--max-steps") + 1] = "2"
    assert main(args) == 0
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 2, "split": "ev')
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0  # was a JSONDecodeError
    assert "dropped its last line" in caplog.text
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in rows) == 2
