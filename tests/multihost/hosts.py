"""Hosts of our own for the multi-host tests: network namespaces joined by a veth pair (iproute2; root), each
running its own torchrun agent, all traffic on that private link (the namespaces have nothing else but lo).
Hosts that cannot be made fail the test: this tier must not pass by skipping."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TINY = ["--set=hidden_size=32", "--set=num_attention_heads=2", "--set=intermediate_size=64", "--set=embedding_size=16",
        "--set=num_hidden_layers=2", "--set=hidden_dropout_prob=0", "--set=attention_probs_dropout_prob=0",
        "--set=classifier_dropout_prob=0"]  # no dropout: hosts draw other masks than one process would  # fmt: skip


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode:
        pytest.fail(f"`ip {' '.join(args)}` failed ({r.stderr.strip()}): the multihost tier needs root and iproute2 "
                    "network namespaces", pytrace=False)


@dataclass
class Host:
    ns: str
    dev: str
    addr: str

    def run(self, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
        """``cmd`` inside this host, its own process group, output to ``log`` (``env``: variables of its own)."""
        env = {**os.environ, **(env or {}), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO),
               "GLOO_SOCKET_IFNAME": self.dev,
               "TORCHELASTIC_ERROR_FILE": str(log.with_suffix(".error.json")),
               # the workers' own store, not the rendezvous one: with it shared, a host that rejoins waits forever
               # for MASTER_ADDR (the README says so beside the multi-host commands)
               "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}  # fmt: skip
        out = open(log, "ab")
        return subprocess.Popen(["ip", "netns", "exec", self.ns, *cmd], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=REPO)  # fmt: skip

    def pids(self) -> list[int]:
        r = subprocess.run(["ip", "netns", "pids", self.ns], capture_output=True, text=True)
        return [int(p) for p in r.stdout.split()]

    def kill_all(self) -> int:
        """SIGKILL every process of this host (its agent and workers): a host that dies."""
        pids = self.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(pids)


@contextlib.contextmanager
def two_hosts():
    """Two hosts 10.<a>.<b>.1 and .2 on their own veth link (names random per test: xdist-safe)."""
    tag = secrets.token_hex(3)
    a, b = int(tag[:2], 16) % 200 + 20, int(tag[2:4], 16)
    hosts = [Host(f"alb-{tag}-{i}", f"v{tag}{i}", f"10.{a}.{b}.{i + 1}") for i in range(2)]
    try:
        _ip("link", "add", hosts[0].dev, "type", "veth", "peer", "name", hosts[1].dev)
        for h in hosts:
            _ip("netns", "add", h.ns)
            _ip("link", "set", h.dev, "netns", h.ns)
            _ip("-n", h.ns, "addr", "add", f"{h.addr}/24", "dev", h.dev)
            _ip("-n", h.ns, "link", "set", h.dev, "up")
            _ip("-n", h.ns, "link", "set", "lo", "up")
        yield hosts
    finally:
        for h in hosts:
            h.kill_all()
        time.sleep(0.2)
        for h in hosts:
            subprocess.run(["ip", "netns", "del", h.ns], capture_output=True)
        subprocess.run(["ip", "link", "del", hosts[0].dev], capture_output=True)  # (gone with its namespace)


@contextlib.contextmanager
def switched_hosts(n: int = 2):
    """``n`` hosts 10.<a>.<b>.1, .2, ... and a third kind of host, 10.<a>.<b>.254, that is their switch (a
    bridge every host's link is attached to) and the machine outside the job that serves the rendezvous store.
    Yields (hosts, that host)."""
    tag = secrets.token_hex(3)
    a, b = int(tag[:2], 16) % 200 + 20, int(tag[2:4], 16)
    hosts = [Host(f"alb-{tag}-{i}", f"v{tag}{i}", f"10.{a}.{b}.{i + 1}") for i in range(n)]
    switch = Host(f"alb-{tag}-sw", "br0", f"10.{a}.{b}.254")
    made = []
    try:
        _ip("netns", "add", switch.ns)
        made.append(switch)
        _ip("-n", switch.ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch.ns, "addr", "add", f"{switch.addr}/24", "dev", "br0")
        for name in ("br0", "lo"):
            _ip("-n", switch.ns, "link", "set", name, "up")
        for h in hosts:
            _ip("netns", "add", h.ns)
            made.append(h)
            port = f"s{h.dev[1:]}"
            _ip("link", "add", h.dev, "type", "veth", "peer", "name", port)
            _ip("link", "set", h.dev, "netns", h.ns)
            _ip("link", "set", port, "netns", switch.ns)
            _ip("-n", switch.ns, "link", "set", port, "master", "br0", "up")
            _ip("-n", h.ns, "addr", "add", f"{h.addr}/24", "dev", h.dev)
            _ip("-n", h.ns, "link", "set", h.dev, "up")
            _ip("-n", h.ns, "link", "set", "lo", "up")
        yield hosts, switch
    finally:
        for h in made:
            h.kill_all()
        time.sleep(0.2)
        for h in made:
            subprocess.run(["ip", "netns", "del", h.ns], capture_output=True)  # (their links go with them)


def torchrun(host: Host, endpoint: str, nnodes: str, *args: str, max_restarts: int = 0) -> list[str]:
    """A torchrun agent on ``host``: c10d rendezvous at ``endpoint`` (the first host's address), one worker."""
    # is_host: the first host's agent serves the rendezvous store (torchrun tells that from the hostname on real
    # hosts; here every namespace has the machine's)
    conf = ("join_timeout=60,last_call_timeout=1,close_timeout=5,keep_alive_interval=1,keep_alive_max_attempt=3,"
            f"is_host={'true' if endpoint.split(':')[0] == host.addr else 'false'}")
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", nnodes, "--nproc-per-node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "albertlm-test", "--rdzv-conf", conf,
            "--local-addr", host.addr, "--max-restarts", str(max_restarts), "--monitor-interval", "0.5",
            "-m", "albertlm", *args]  # fmt: skip



def elastic_job(hosts: list[Host], port: int, args: list[str], logs: list[Path], max_restarts: int,
                store: Host | None = None) -> tuple[subprocess.Popen, list[str]]:  # fmt: skip
    """The same elastic command (``--nnodes 1:2``) on both hosts, host 0's agent first (it serves the
    rendezvous store, unless ``store``, a host outside the job, does); returns host 0's agent and host 1's
    command (to start it again after a kill)."""
    endpoint = f"{(store or hosts[0]).addr}:{port}"
    agent0 = hosts[0].run(torchrun(hosts[0], endpoint, "1:2", *args, max_restarts=max_restarts), logs[0])
    time.sleep(1.0)
    again = torchrun(hosts[1], endpoint, "1:2", *args, max_restarts=max_restarts)
    hosts[1].run(again, logs[1])
    return agent0, again


def pretrain_args(shards: Path, out: Path, steps: int, save_every: int, keep_last: int) -> list[str]:
    """The fault tests' run: the tiny model at global batch 8 (2 micro-batches), a step logged each."""
    return ["pretrain", "--data", str(shards), "--out", str(out), "--max-steps", str(steps), "--warmup-steps", "2",
            "--global-batch-size", "8", "--micro-batch-size", "4", "--save-every", str(save_every),
            "--keep-last", str(keep_last), "--eval-every", "1000", "--log-every", "1", "--no-progress",
            "--lr", "5e-3", *TINY]  # fmt: skip


def saved(out: Path, step: int) -> bool:
    """Step ``step``'s checkpoint in ``out`` is complete (its checksums, written last, are there)."""
    return (out / "checkpoints" / f"step_{step:08d}" / "checksums.json").is_file()


def wait_saved(out: Path, step: int, agent: subprocess.Popen, deadline: float) -> bool:
    """Wait for step ``step``'s checkpoint while ``agent`` runs, until ``deadline`` (time.time())."""
    while not saved(out, step) and time.time() < deadline and agent.poll() is None:
        time.sleep(0.1)
    return saved(out, step)

