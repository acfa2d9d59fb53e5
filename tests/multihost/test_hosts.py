"""Pretraining across hosts of our own (network namespaces, tests/multihost/conftest.py): two hosts give the
weights of one host on the same global batch, and a host killed mid-run (every process of it, SIGKILL) leaves
a job that re-forms on the host left, goes on from its last checkpoint, and takes the host back when it
returns. Marker `multihost` (CI runs `pytest -m multihost`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hosts import REPO, TINY, elastic_job, pretrain_args, torchrun, wait_saved
from safetensors.torch import load_file

pytestmark = pytest.mark.multihost

def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "final" / "model.safetensors"))


def _wait(procs: list[subprocess.Popen], timeout: float) -> None:
    deadline = time.time() + timeout
    for p in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            pytest.fail("a torchrun agent did not finish in time")


def test_two_hosts_equal_one_host(two_hosts, shards, tmp_path):
    common = ["pretrain", "--data", str(shards), "--max-steps", "4", "--warmup-steps", "1", "--global-batch-size", "8",
              "--micro-batch-size", "4", "--save-every", "2", "--eval-every", "1000", "--no-progress", "--lr", "5e-3",
              *TINY]  # fmt: skip
    one = subprocess.run([sys.executable, "-m", "albertlm", *common, "--out", str(tmp_path / "one")],
                         env={"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, cwd=REPO)  # fmt: skip
    assert one.returncode == 0, one.stderr[-2000:]
    endpoint = f"{two_hosts[0].addr}:29511"
    logs = [tmp_path / f"host{i}.log" for i in range(2)]
    procs = [h.run(torchrun(h, endpoint, "2", *common, "--out", str(tmp_path / "two")), log)
             for h, log in zip(two_hosts, logs, strict=True)]  # fmt: skip
    _wait(procs, 240)
    assert [p.returncode for p in procs] == [0, 0], "\n".join(log.read_text()[-2000:] for log in logs)
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    for k in a:
        torch.testing.assert_close(b[k], a[k], atol=1e-5, rtol=1e-4, msg=k)
    state = json.loads((tmp_path / "two" / "checkpoints" / "step_00000004" / "state.json").read_text())
    assert state["world_size"] == 2


def test_a_killed_host_leaves_the_job_going_and_rejoins(two_hosts, shards, tmp_path):
    """SIGKILL every process of host 1 mid-run: host 0's agent re-forms the job alone (--nnodes 1:2) and it
    goes on from the last checkpoint; host 1 started again rejoins and the run ends on both, its metrics
    showing both restarts, nothing saved lost, the final model loadable."""
    out = tmp_path / "run"
    common = pretrain_args(shards, out, steps=400, save_every=5, keep_last=0)
    logs = [tmp_path / f"host{i}.log" for i in range(2)]
    h1 = two_hosts[1]
    agent0, host1_command = elastic_job(two_hosts, 29512, common, logs, max_restarts=5)

    deadline = time.time() + 150
    assert wait_saved(out, 10, agent0, deadline), logs[0].read_text()[-3000:]
    killed_at = time.time()
    assert h1.kill_all() >= 2  # its agent and its worker
    while not any(json.loads(r).get("event") == "resumed" and json.loads(r)["world_size"] == 1
                  for r in (out / "metrics.jsonl").read_text().splitlines()) and time.time() < deadline:  # fmt: skip
        time.sleep(0.2)
    recovered = time.time() - killed_at
    assert wait_saved(out, 25, agent0, deadline), logs[0].read_text()[-3000:]  # host 0 alone went on
    back = time.time()
    h1.run(host1_command, logs[1])  # the host comes back
    while not any(json.loads(r).get("event") == "resumed" and json.loads(r)["world_size"] == 2
                  for r in (out / "metrics.jsonl").read_text().splitlines()) and agent0.poll() is None:  # fmt: skip
        time.sleep(0.2)
    rejoined = time.time() - back
    _wait([agent0], 200)
    assert agent0.returncode == 0, logs[0].read_text()[-3000:]
    rows = [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()]
    events = [r for r in rows if r.get("event") == "resumed"]
    assert [e["world_size"] for e in events] == [1, 2], events  # alone, then both: no extra re-form on the return
    assert events[0]["step"] >= 10  # from the last checkpoint before the kill: nothing saved was lost
    steps = sorted({r["step"] for r in rows if "loss" in r})
    assert steps[-1] == 400 and set(range(1, 401)) <= set(steps)
    from albertlm import AlbertForPreTraining

    AlbertForPreTraining.from_pretrained(out / "final")
    report = {"seconds_to_resume_alone": recovered, "seconds_to_rejoin": rejoined, "events": events,
              "steps_redone": [e["step"] for e in events]}  # fmt: skip
    (tmp_path / "recovery.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report))
