"""torchrun agents started with other settings for one job (issue 44, finding 11): each host runs its own
command line, so two hosts can disagree (another --lr). Before, the job trained with two learning rates and
recorded one, or a gloo collective aborted mid-run with a half-made run folder. The settings' checksum is now
exchanged as the process group starts: one line on every rank naming the setting, nothing written."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from conftest import ENV, pretrain_args


def _agent(port: int, *args: str) -> subprocess.Popen:
    """One torchrun agent of a two-host job (one process each) through the store at ``port``."""
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1", "--rdzv-backend",
         "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "settings-job", "--rdzv-conf", "is_host=false",
         "--max-restarts", "0", "-m", "albertlm", *args],
        env={**ENV, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip


@pytest.mark.distributed
def test_agents_with_other_settings_stop_in_one_line_on_every_rank(shards, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = subprocess.Popen([sys.executable, "-m", "albertlm", "rendezvous", "--port", str(port)],
                             stdout=subprocess.PIPE, text=True, env=ENV)  # fmt: skip
    try:
        assert "rendezvous store on port" in store.stdout.readline()
        run = tmp_path / "run"
        common = pretrain_args(shards, run, steps=2)
        common = [*common[: common.index("--lr")], *common[common.index("--lr") + 2 :]]
        agents = [_agent(port, *common, "--global-batch-size", "4", "--micro-batch-size", "2", "--lr", lr)
                  for lr in ("5e-3", "1e-3")]  # fmt: skip
        outputs = [a.communicate(timeout=300)[0] for a in agents]
    finally:
        store.terminate()
        store.wait(timeout=30)
    for out in outputs:
        lines = [x for x in out.splitlines() if "albertlm pretrain: error:" in x]
        assert lines, out[-3000:]
        assert "started with other settings (--lr 0.005 on rank 0, 0.001 on rank 1" in lines[0] or \
            "started with other settings (--lr 0.001 on rank 0, 0.005 on rank 1" in lines[0], lines[0]  # fmt: skip
        assert "Connection closed by peer" not in out and "gloo" not in out.lower(), out[-3000:]
    assert all(a.returncode != 0 for a in agents)
    assert not run.exists()  # nothing written: no half-made run folder
    assert not os.path.exists(tmp_path / "run" / "run_config.json")
