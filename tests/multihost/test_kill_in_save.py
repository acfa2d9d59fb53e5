"""A host killed while a checkpoint is being saved (every process of it, SIGKILL, while the save's
``.step_N.tmp`` folder exists): the job re-forms on the host left from the newest complete checkpoint, the
half-written one is never taken for one, and the run ends with every checkpoint verifying. Marker `multihost`."""

from __future__ import annotations

import json
import os
import time

import pytest
from hosts import elastic_job, pretrain_args

from albertlm.training import checkpoint

pytestmark = pytest.mark.multihost


def test_a_host_killed_during_a_checkpoint_save(two_hosts, shards, tmp_path):
    out = tmp_path / "run"
    steps = 40
    common = pretrain_args(shards, out, steps, save_every=1, keep_last=3)
    logs = [tmp_path / f"host{i}.log" for i in range(2)]
    h1 = two_hosts[1]
    agent0, _ = elastic_job(two_hosts, 29513, common, logs, max_restarts=3)
    root = out / "checkpoints"
    caught, deadline = None, time.time() + 150
    while caught is None and time.time() < deadline and agent0.poll() is None:
        names = [e.name for e in os.scandir(root)] if root.is_dir() else []
        saving = [n for n in names if checkpoint.TMP_NAME.fullmatch(n)]
        if saving and any(n >= "step_00000005" for n in names if checkpoint.CHECKPOINT_NAME.fullmatch(n)):
            h1.kill_all()  # mid-save: the folder is still a temp one
            caught = int(saving[0][len(".step_"):-len(".tmp")])
    assert caught is not None, "no save was caught in progress: " + logs[0].read_text()[-2000:]
    try:
        agent0.wait(timeout=200)
    except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired; the fixture kills what is left
        pytest.fail("host 0's agent did not finish after the kill")
    assert agent0.returncode == 0, logs[0].read_text()[-3000:]
    rows = [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()]
    events = [r for r in rows if r.get("event") == "resumed"]
    assert events and events[0]["world_size_before"] == 2 and events[0]["world_size"] == 1, events
    assert events[0]["step"] in (caught - 1, caught)  # the newest complete save: the one before, or this one if done
    assert sorted({r["step"] for r in rows if "loss" in r}) == list(range(1, steps + 1))
    assert not [p for p in root.iterdir() if checkpoint.TMP_NAME.fullmatch(p.name)]  # the partial save is gone
    for path in checkpoint.list_checkpoints(root):
        checkpoint.verify(path)
    from albertlm import AlbertForPreTraining

    AlbertForPreTraining.from_pretrained(out / "final")
