"""Checkpoints that reshard: a run on 2 processes, killed, resumed on 1, killed, resumed on 2, ends where the
uninterrupted 2-process run ends (DDP, and FSDP2 whose optimizer state is saved by parameter name at every
world size); a checkpoint of other --fsdp or global-batch settings is refused in one line."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hosts import REPO
from safetensors.torch import load_file
from test_hosts import TINY, shards  # noqa: F401  (the module's shards fixture)

pytestmark = pytest.mark.multihost
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def _launch(procs: int, port: int, *args: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "albertlm", *args] if procs == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(procs), "--master-port", str(port),
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
def test_resume_2_then_1_then_2_processes(shards, tmp_path, fsdp):  # noqa: F811
    common = ["pretrain", "--data", str(shards), "--max-steps", "40", "--warmup-steps", "2", "--global-batch-size",
              "16", "--micro-batch-size", "2", "--save-every", "2", "--keep-last", "0", "--eval-every", "1000",
              "--no-progress", "--lr", "2e-3", *TINY, *(["--fsdp"] if fsdp else [])]  # fmt: skip
    port = 29620 + 10 * fsdp
    ref = _launch(2, port, *common, "--out", str(tmp_path / "ref"))
    assert ref.wait(timeout=300) == 0, ref.stdout.read()[-3000:]
    out = tmp_path / "run"
    first = _launch(2, port + 1, *common, "--out", str(out))
    killed = [_kill_after(first, out / "checkpoints", 4)]
    one = _launch(1, 0, "pretrain", "--out", str(out), "--resume", "--no-progress")
    killed.append(_kill_after(one, out / "checkpoints", 4))
    assert killed[0] < killed[1] < 40, killed
    last = _launch(2, port + 2, "pretrain", "--out", str(out), "--resume", "--no-progress")
    log = last.communicate(timeout=300)[0]
    assert last.returncode == 0, log[-3000:]
    assert "resumed by 2" in log
    a, b = (load_file(str(d / "final" / "model.safetensors")) for d in (tmp_path / "ref", out))
    for k in a:
        torch.testing.assert_close(b[k], a[k], atol=1e-4, rtol=1e-3, msg=k)


def test_a_checkpoint_of_other_fsdp_or_batch_is_refused(shards, tmp_path):  # noqa: F811
    common = ["pretrain", "--data", str(shards), "--max-steps", "2", "--global-batch-size", "8",
              "--micro-batch-size", "4", "--save-every", "1", "--eval-every", "1000", "--no-progress",
              *TINY]  # fmt: skip
    out = tmp_path / "run"
    assert subprocess.run([sys.executable, "-m", "albertlm", *common, "--out", str(out)], env=ENV, cwd=REPO,
                          capture_output=True).returncode == 0  # fmt: skip
    config = out / "run_config.json"
    import json

    saved = json.loads(config.read_text())
    config.write_text(json.dumps({**saved, "fsdp": True, "max_steps": 4}))
    r = subprocess.run([sys.executable, "-m", "albertlm", "pretrain", "--out", str(out), "--resume"], env=ENV,
                       cwd=REPO, capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 2 and "resume with the same two" in r.stderr and "Traceback" not in r.stderr
