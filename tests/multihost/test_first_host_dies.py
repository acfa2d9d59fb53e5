"""The first host dies (every process of it, SIGKILL): it serves the c10d rendezvous, so the job cannot re-form
without it. What the README promises for it: the host left does not hang but ends, and the same command started
again on both hosts (the same job id) goes on from the newest checkpoint to the end, nothing saved lost. Marker
`multihost`."""

from __future__ import annotations

import json
import time

import pytest
from hosts import elastic_job, pretrain_args, saved, wait_saved

pytestmark = pytest.mark.multihost


def test_the_rendezvous_host_dies_and_the_job_is_started_again(two_hosts, shards, tmp_path):
    out = tmp_path / "run"
    steps = 60
    common = pretrain_args(shards, out, steps, save_every=5, keep_last=0)
    logs = [tmp_path / f"host{i}.log" for i in range(2)]
    h0, h1 = two_hosts
    agent0, _ = elastic_job(two_hosts, 29514, common, logs, max_restarts=3)

    assert wait_saved(out, 10, agent0, time.time() + 150), logs[0].read_text()[-3000:]
    killed_at = time.time()
    assert h0.kill_all() >= 2  # its agent (the rendezvous store) and its worker
    while h1.pids() and time.time() < killed_at + 120:  # host 1's agent must give up, not wait forever
        time.sleep(0.2)
    assert not h1.pids(), "host 1 still runs two minutes after the rendezvous host died: " + logs[1].read_text()[-3000:]
    ended_after = time.time() - killed_at
    rows = [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()]
    done_before = max(r["step"] for r in rows if "loss" in r)
    assert done_before < steps  # the kill did stop the job
    newest = max(s for s in range(5, steps, 5) if saved(out, s))

    # the same command on both hosts (the same --rdzv-id: its workers continue the job's run by themselves)
    agent0, _ = elastic_job(two_hosts, 29515, common, logs, max_restarts=3)
    try:
        agent0.wait(timeout=200)
    except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired; the fixture kills what is left
        pytest.fail("the restarted job did not finish: " + logs[0].read_text()[-3000:])
    assert agent0.returncode == 0, logs[0].read_text()[-3000:]
    rows = [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()]
    events = [r for r in rows if r.get("event") == "resumed"]
    assert events and events[0]["step"] == newest, events  # from the newest checkpoint: nothing saved lost
    assert set(range(1, steps + 1)) <= {r["step"] for r in rows if "loss" in r}
    from albertlm import AlbertForPreTraining

    AlbertForPreTraining.from_pretrained(out / "final")
    print(json.dumps({"seconds_until_host_1_ended": ended_after, "steps_done_before": done_before,
                      "resumed": events}))  # fmt: skip
