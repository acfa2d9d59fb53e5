"""Checkpoints that reshard: a run on 2 processes, killed, resumed on 1, killed, resumed on 2, ends where the
uninterrupted 2-process run ends (DDP's full state; under FSDP2 torch.distributed.checkpoint shards, each rank
writing its own and every world size reading the slices it needs); a checkpoint of other --fsdp or
global-batch settings is refused in one line. Marker `multihost` (CI runs `pytest -m multihost`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hosts import REPO, TINY
from safetensors.torch import load_file

pytestmark = pytest.mark.multihost
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def _launch(procs: int, *args: str) -> subprocess.Popen:
    # --standalone: a free port of torchrun's choosing (fixed ones collide with other runs on the machine)
    cmd = [sys.executable, "-m", "albertlm", *args] if procs == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(procs),
        "-m", "albertlm", *args]  # fmt: skip
    return subprocess.Popen(cmd, env=ENV, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # fmt: skip


def _latest(root: Path) -> int:
    done = [int(p.name.split("_")[1]) for p in root.glob("step_*") if (p / "checksums.json").is_file()]
    return max(done, default=0)


def _kill_after(proc: subprocess.Popen, root: Path, steps: int) -> int:
    """SIGKILL the run (its agent and workers) once it has saved ``steps`` steps past its newest checkpoint at
    launch; returns the newest checkpoint's step at the kill."""
    target = _latest(root) + steps
    deadline = time.time() + 120
    while _latest(root) < target and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, "the run finished before it could be killed: " + proc.stdout.read()[-2000:]
    tree, todo = [], [proc.pid]  # the agent and its workers (torchrun starts them in sessions of their own)
    while todo:
        pid = todo.pop()
        tree.append(pid)
        children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
        todo += [int(c) for c in children]
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()
    time.sleep(0.5)  # (the workers' exit)
    return _latest(root)


@pytest.mark.parametrize("fsdp", [False, True])
def test_resume_2_then_1_then_2_processes(shards, tmp_path, fsdp):
    common = ["pretrain", "--data", str(shards), "--max-steps", "40", "--warmup-steps", "2", "--global-batch-size",
              "16", "--micro-batch-size", "2", "--save-every", "2", "--keep-last", "0", "--eval-every", "1000",
              "--no-progress", "--lr", "2e-3", *TINY, *(["--fsdp"] if fsdp else [])]  # fmt: skip
    ref = _launch(2, *common, "--out", str(tmp_path / "ref"))
    assert ref.wait(timeout=300) == 0, ref.stdout.read()[-3000:]
    out = tmp_path / "run"
    first = _launch(2, *common, "--out", str(out))
    killed = [_kill_after(first, out / "checkpoints", 4)]
    one = _launch(1, "pretrain", "--out", str(out), "--resume", "--no-progress")
    killed.append(_kill_after(one, out / "checkpoints", 4))
    assert killed[0] < killed[1] < 40, killed
    last = _launch(2, "pretrain", "--out", str(out), "--resume", "--no-progress")
    log = last.communicate(timeout=300)[0]
    assert last.returncode == 0, log[-3000:]
    assert "resumed by 2" in log
    rows = [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()]
    events = [(r["step"], r["world_size_before"], r["world_size"]) for r in rows if r.get("event") == "resumed"]
    assert [e[1:] for e in events] == [(2, 1), (1, 2)] and [e[0] for e in events] == killed, events
    saved = {p.name for p in (out / "checkpoints" / f"step_{killed[0]:08d}").iterdir()}
    if fsdp:  # each of the 2 ranks wrote its own shards, and no full copy was gathered
        assert {".metadata", "__0_0.distcp", "__1_0.distcp", "schedule.pt"} <= saved
        assert "model.safetensors" not in saved
    else:
        assert {"model.safetensors", "optimizer.pt"} <= saved
    a, b = (load_file(str(d / "final" / "model.safetensors")) for d in (tmp_path / "ref", out))
    for k in a:
        torch.testing.assert_close(b[k], a[k], atol=1e-4, rtol=1e-3, msg=k)


def test_a_checkpoint_of_other_fsdp_or_batch_is_refused(shards, tmp_path):
    common = ["pretrain", "--data", str(shards), "--max-steps", "2", "--global-batch-size", "8",
              "--micro-batch-size", "4", "--save-every", "1", "--eval-every", "1000", "--no-progress",
              *TINY]  # fmt: skip
    out = tmp_path / "run"
    assert subprocess.run([sys.executable, "-m", "albertlm", *common, "--out", str(out)], env=ENV, cwd=REPO,
                          capture_output=True).returncode == 0  # fmt: skip
    config = out / "run_config.json"
    saved = json.loads(config.read_text())
    config.write_text(json.dumps({**saved, "fsdp": True, "max_steps": 4}))
    r = subprocess.run([sys.executable, "-m", "albertlm", "pretrain", "--out", str(out), "--resume"], env=ENV,
                       cwd=REPO, capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 2 and "resume with the same two" in r.stderr and "Traceback" not in r.stderr
