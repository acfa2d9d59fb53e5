"""The README's Quick tour, run verbatim: every command of its script, in order, in an empty directory
that holds only tests/data (as a fresh clone does), must succeed, and write nothing outside tour/ (which
.gitignore covers). Slow (about 10 CPU minutes; the README's times are the CPU column with one thread):

    OMP_NUM_THREADS=1 python -m pytest -m slow tests/test_tour.py -n 0 -s   # -s prints each command's wall and CPU time
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def tour_commands(readme: Path = REPO / "README.md") -> list[str]:
    """The command lines of the first bash block under '## Quick tour' (comment-only lines dropped)."""
    text = readme.read_text(encoding="utf-8")
    section = text[text.index("## Quick tour"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_tour_is_a_script_of_commands():
    cmds = tour_commands()
    assert len(cmds) > 20 and all(re.match(r"(albertlm|torchrun|echo|head|tail) ", c) for c in cmds), cmds
    assert sum(c.startswith("albertlm serve ") for c in cmds) == 1


def _env(tmp: Path) -> dict[str, str]:
    """`albertlm` on PATH runs this checkout (the shell may have another install on PATH)."""
    bin_dir = tmp / ".bin"
    bin_dir.mkdir()
    shim = bin_dir / "albertlm"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m albertlm "$@"\n')
    shim.chmod(0o755)
    path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "PYTHONPATH": str(REPO)}


def _serve(cmd: str, cwd: Path, env: dict[str, str]) -> None:
    """Start the server, wait for /health, ask it once, stop it (the tour's `serve` runs until Ctrl-C)."""
    port = int(re.search(r"--port (\d+)", cmd).group(1))
    proc = subprocess.Popen(["bash", "-c", f"exec {cmd}"], cwd=cwd, env=env)
    try:
        deadline = time.time() + 300
        while True:
            assert proc.poll() is None, f"`{cmd}` exited with {proc.returncode}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    assert json.loads(r.read())
                    return
            except OSError:
                assert time.time() < deadline, f"`{cmd}`: no answer on port {port} within 300 s"
                time.sleep(2)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


@pytest.mark.slow
def test_quick_tour_runs_as_written(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "data").symlink_to(REPO / "tests" / "data")
    (tmp_path / "tests" / "fixtures").symlink_to(REPO / "tests" / "fixtures")
    env = _env(tmp_path)
    times = []
    for cmd in tour_commands():
        t0, c0 = time.time(), os.times()
        if cmd.startswith("albertlm serve "):
            _serve(cmd.split("#")[0], tmp_path, env)
        else:
            r = subprocess.run(["bash", "-c", f"set -o pipefail; {cmd}"], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=1800)
            assert r.returncode == 0, f"`{cmd}` exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        c1 = os.times()
        cpu = c1.children_user - c0.children_user + c1.children_system - c0.children_system
        times.append((time.time() - t0, cpu, cmd))
    assert {p.name for p in tmp_path.iterdir()} == {"tests", ".bin", "tour"}  # all the tour wrote is under tour/
    for seconds, cpu, cmd in times:
        print(f"{seconds:7.1f} s wall {cpu:7.1f} s CPU  {cmd[:110]}")
    print(f"{sum(t for t, _, _ in times) / 60:7.1f} min wall, {sum(c for _, c, _ in times) / 60:.1f} min CPU in all")
