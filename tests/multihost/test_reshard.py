"""Checkpoints that reshard: a run saved by 2 processes resumes on 1, that one's checkpoint on 2 again, and the
weights are the uninterrupted run's (same global batch, so the same samples at every step and the same updates).
Under --fsdp each rank writes its own shards through torch.distributed.checkpoint; without it the full state
(DDP replicas) is written once. Marker `multihost` (CI runs `pytest -m multihost`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hosts import REPO, TINY
from safetensors.torch import load_file

pytestmark = pytest.mark.multihost

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def _pretrain(out: Path, procs: int, port: int, *args: str) -> None:
    launch = [sys.executable, "-m", "albertlm"]
    if procs > 1:
        launch = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(procs), "--master-port",
                  str(port), "-m", "albertlm"]  # fmt: skip
    r = subprocess.run([*launch, "pretrain", "--out", str(out), *args], env=ENV, capture_output=True, text=True,
                       cwd=REPO, timeout=240)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]


def _cut(run: Path, copy: Path, keep_upto: int) -> Path:
    """A copy of ``run`` as it stood when its checkpoint ``keep_upto`` was the newest (a run stopped there)."""
    shutil.copytree(run, copy)
    shutil.rmtree(copy / "final")
    for ckpt in (copy / "checkpoints").glob("step_*"):
        if int(ckpt.name.split("_")[1]) > keep_upto:
            shutil.rmtree(ckpt)
    return copy


@pytest.mark.parametrize(("layout", "port"), [("ddp", 29541), ("fsdp", 29543)])
def test_resume_on_2_then_1_then_2_processes_gives_the_uninterrupted_weights(shards, tmp_path, layout, port):
    flags = ["--data", str(shards), "--max-steps", "6", "--warmup-steps", "1", "--global-batch-size", "8",
             "--micro-batch-size", "2", "--save-every", "2", "--keep-last", "0", "--eval-every", "1000",
             "--no-progress", "--lr", "5e-3", *TINY, *(["--fsdp"] if layout == "fsdp" else [])]  # fmt: skip
    _pretrain(tmp_path / "ref", 1, port, *flags)
    _pretrain(tmp_path / "two", 2, port, *flags)
    saved = {p.name for p in (tmp_path / "two" / "checkpoints" / "step_00000002").iterdir()}
    if layout == "fsdp":  # each rank wrote its own shards, no full copy
        assert {".metadata", "__0_0.distcp", "__1_0.distcp", "schedule.pt"} <= saved
        assert "model.safetensors" not in saved
    else:
        assert {"model.safetensors", "optimizer.pt"} <= saved
    one = _cut(tmp_path / "two", tmp_path / "two-one", keep_upto=2)
    _pretrain(one, 1, port, "--resume", "--no-progress")  # 2 -> 1 from step 2
    again = _cut(one, tmp_path / "two-one-two", keep_upto=4)
    _pretrain(again, 2, port + 1, "--resume", "--no-progress")  # 1 -> 2 from step 4
    rows = [json.loads(r) for r in (again / "metrics.jsonl").read_text().splitlines()]
    events = [(r["step"], r["world_size_before"], r["world_size"]) for r in rows if r.get("event") == "resumed"]
    assert events == [(2, 2, 1), (4, 1, 2)], events
    ref = load_file(str(tmp_path / "ref" / "final" / "model.safetensors"))
    for run in ("two", "two-one", "two-one-two"):
        got = load_file(str(tmp_path / run / "final" / "model.safetensors"))
        assert got.keys() == ref.keys()
        for k in ref:
            torch.testing.assert_close(got[k], ref[k], atol=1e-5, rtol=1e-4, msg=f"{run}: {k}")
