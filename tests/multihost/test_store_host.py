"""The rendezvous store on a machine outside the job (`albertlm rendezvous` on a third host, the hosts'
switch): then the first host is no different from the others. Every process of host 0 is SIGKILLed mid-run;
host 1 goes on alone from the last checkpoint, host 0 started again rejoins, and the run ends on both with
nothing saved lost. Marker `multihost`."""

from __future__ import annotations

import json
import sys
import time

import pytest
from hosts import elastic_job, pretrain_args, torchrun, wait_saved

pytestmark = pytest.mark.multihost


def _resumed(out, world_size: int) -> bool:
    rows = (out / "metrics.jsonl").read_text().splitlines() if (out / "metrics.jsonl").is_file() else []
    return any(json.loads(r).get("event") == "resumed" and json.loads(r)["world_size"] == world_size for r in rows)


def test_with_the_store_outside_the_job_the_first_host_may_die(switched_hosts, shards, tmp_path):
    (h0, h1), switch = switched_hosts
    port = 29518
    store_log = tmp_path / "store.log"
    switch.run([sys.executable, "-m", "albertlm", "rendezvous", "--port", str(port)], store_log)
    deadline = time.time() + 30
    while "rendezvous store on port" not in store_log.read_text() and time.time() < deadline:
        time.sleep(0.1)
    assert "rendezvous store on port" in store_log.read_text(), store_log.read_text()[-2000:]

    out = tmp_path / "run"
    common = pretrain_args(shards, out, steps=300, save_every=5, keep_last=0)
    logs = [tmp_path / f"host{i}.log" for i in range(2)]
    agent0, _ = elastic_job([h0, h1], port, common, logs, max_restarts=5, store=switch)
    deadline = time.time() + 150
    assert wait_saved(out, 10, agent0, deadline), logs[0].read_text()[-3000:]
    killed_at = time.time()
    assert h0.kill_all() >= 2  # host 0: its agent and its worker
    while not _resumed(out, 1) and time.time() < deadline:
        time.sleep(0.2)
    recovered = time.time() - killed_at
    assert _resumed(out, 1), logs[1].read_text()[-3000:]  # host 1 alone went on
    back = time.time()
    agent0 = h0.run(torchrun(h0, f"{switch.addr}:{port}", "1:2", *common, max_restarts=5), logs[0])  # the same
    while not _resumed(out, 2) and time.time() < deadline and agent0.poll() is None:
        time.sleep(0.2)
    rejoined = time.time() - back
    assert _resumed(out, 2), logs[0].read_text()[-3000:]
    try:
        agent0.wait(timeout=200)
    except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired; the fixture kills what is left
        pytest.fail("host 0's agent did not finish after rejoining")
    assert agent0.returncode == 0, logs[0].read_text()[-3000:]
    while h1.pids() and time.time() < deadline + 60:  # host 1's agent ends too, its worker done
        time.sleep(0.2)
    assert not h1.pids(), logs[1].read_text()[-3000:]
    rows = [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()]
    events = [r for r in rows if r.get("event") == "resumed"]
    assert events[0]["world_size"] == 1 and events[0]["step"] >= 10, events  # from the last checkpoint
    assert len(events) == 2, events  # alone, then both again: the returning host continued the run at once
    assert set(range(1, 301)) <= {r["step"] for r in rows if "loss" in r}
    from albertlm import AlbertForPreTraining

    AlbertForPreTraining.from_pretrained(out / "final")
    print(json.dumps({"seconds_to_go_on_alone": recovered, "seconds_to_rejoin": rejoined, "events": events}))
