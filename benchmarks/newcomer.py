"""A newcomer's first commands, timed: the README's two Set up commands run as written, from a fresh clone into
a fresh virtual environment with pip's cache off (PIP_NO_CACHE_DIR=1), then the figures written to
docs/results/newcomer.json and .md and the README's figures brought to them (tests/test_newcomer.py checks all
three agree, so no figure in the README is typed by hand).

    python benchmarks/newcomer.py --note NOTE            # 10-25 min on 2 cores: clones this checkout's HEAD
    python benchmarks/newcomer.py --readme-only          # the README's figures from the committed newcomer.json

The steps are the README's, read out of README.md by .ci/readme.py, in one venv as a newcomer runs them: the CPU
torch, the install, the embedded demo (command one), then the test install and the default test tier (command
two). After each install, the files it brought are downloaded again alone (`pip download --no-deps`, cache off):
that time is the network's share, the rest is pip resolving, unpacking and building. Sizes: the venv after each
command (`du`), and per extra what it adds to the default install (the files its packages' RECORDs list, summed
over the packages its requirements pull in that the default install lacks, measured in the finished venv, which
holds every extra). The machine is shared: its load average is sampled throughout and reported as it was (it
counts this run's own processes too: a busy 2-core step alone reads ~2).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import string
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results"
FIGURES_JSON = RESULTS / "newcomer.json"
FIGURES_MD = RESULTS / "newcomer.md"
COMMANDS = {"first": ("torch", "install", "demo"), "second": ("test-install", "test")}  # .ci/readme.py's steps
INSTALLS = ("torch", "install", "test-install")
NUMBER = r"[0-9][0-9,]*(?:\.[0-9]+)?"

# Each sentence the README states a figure in, with the figure's name in braces: `--readme-only` (and every run)
# rewrites the numbers in place; tests/test_newcomer.py checks each, filled in from newcomer.json, is in README.md.
README_FIGURES = (
    "the demo installs {install_first_s} s and runs {demo_s} s",
    "the test install {install_second_s} s, the tests {test_s} s: {passed} passed, {skipped} skipped",
    "{both_min} minutes for the two commands",
    "the network's share of the installs {download_s} s",
    "the venv ends at {venv_default_gb} GB ({torch_gb} GB of it torch), {venv_test_gb} GB with the test extras",
)


def extra_row(extra: str) -> str:
    """The README's table row start that carries an extra's size."""
    return f"| `{extra}` | {{extra_mb_{extra}}} MB |"


# ------------------------------------------------------------------------------------------------ the figures


def readme_values(fig: dict) -> dict[str, str]:
    """Every figure the README states, formatted as it states it."""
    s, first, second = fig["steps"], fig["commands"]["first_s"], fig["commands"]["second_s"]
    values = {
        "install_first_s": f"{s['torch']['s'] + s['install']['s']:.0f}",
        "demo_s": f"{s['demo']['s']:.0f}",
        "install_second_s": f"{s['test-install']['s']:.0f}",
        "test_s": f"{s['test']['s']:.0f}",
        "passed": str(s["test"]["counts"].get("passed", 0)),
        "skipped": str(s["test"]["counts"].get("skipped", 0)),
        "both_min": f"{(first + second) / 60:.1f}",
        "download_s": f"{sum(s[k]['download_s'] for k in INSTALLS):.0f}",
        "venv_default_gb": f"{fig['venv_mb']['default'] / 1024:.1f}",
        "torch_gb": f"{fig['torch_mb'] / 1024:.1f}",
        "venv_test_gb": f"{fig['venv_mb']['test'] / 1024:.1f}",
    }
    values.update({f"extra_mb_{e}": f"{mb:.0f}" for e, mb in fig["extra_mb"].items()})
    return values


def readme_phrases(fig: dict) -> list[str]:
    """The README's figure sentences, filled in."""
    values = readme_values(fig)
    return [t.format(**values) for t in (*README_FIGURES, *map(extra_row, fig["extra_mb"]))]


def figure_pattern(template: str) -> re.Pattern:
    """``template`` as a regex: a number group per figure, any run of white space (a wrapped line) per space."""
    parts = []
    for literal, name, _spec, _conv in string.Formatter().parse(template):
        parts.append(r"\s+".join(map(re.escape, literal.split(" "))))
        if name is not None:
            parts.append(f"({NUMBER})")
    return re.compile("".join(parts))


def update_readme(fig: dict, readme: Path) -> list[str]:
    """Rewrite the numbers of every figure sentence in ``readme`` (its line breaks kept); returns the templates it
    did not find exactly once."""
    text, missing = readme.read_text(encoding="utf-8"), []
    values = readme_values(fig)
    for template in (*README_FIGURES, *map(extra_row, fig["extra_mb"])):
        names = [name for _lit, name, _spec, _conv in string.Formatter().parse(template) if name is not None]
        found = list(figure_pattern(template).finditer(text))
        if len(found) != 1:
            missing.append(template)
            continue
        m = found[0]
        for i in reversed(range(len(names))):  # from the last figure, so the earlier spans stay put
            text = text[: m.start(i + 1)] + values[names[i]] + text[m.end(i + 1) :]
    from albertlm.files import write_text_atomic

    write_text_atomic(readme, text)
    return missing


def render_markdown(fig: dict) -> str:
    """docs/results/newcomer.md: the figures of newcomer.json as a page."""
    s, m, load = fig["steps"], fig["machine"], fig["load"]
    v = readme_values(fig)
    rows = "\n".join(
        f"| {name} | `{s[name]['command']}` | {s[name]['s']:.1f} | {s[name]['cpu_s']:.0f} | "
        + (f"{s[name]['download_s']:.1f} ({s[name]['packages']} packages)" if name in INSTALLS else "")
        + " |"
        for names in COMMANDS.values()
        for name in names
    )
    extras = "\n".join(f"| `{e}` | {mb:.0f} |" for e, mb in fig["extra_mb"].items())
    counts = ", ".join(f"{n} {k}" for k, n in s["test"]["counts"].items())
    demo = "\n".join("    " + line for line in s["demo"]["tail"])
    return f"""# A newcomer's two commands, measured

Written by `benchmarks/newcomer.py` (do not edit: run it again; `tests/test_newcomer.py` checks this page, \
`newcomer.json` and the README's figures agree). Earlier sessions' measurements are in this file's git history.

    python benchmarks/newcomer.py --note NOTE     # NOTE: who else used the machine (niced, nice -n 10, if others did)

- date: {fig['date']}, commit {fig['commit']} (a fresh `git clone` of it, a fresh venv, `PIP_NO_CACHE_DIR=1`)
- machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']:.0f} GiB, {m['os']}, Python {m['python']}; \
pip {m['pip']}; {m['indexes']}
- load average (1 min; it counts this run's own processes, ~2 when a step keeps both cores busy): \
{load['before']:.2f} before, {load['min']:.2f} to {load['max']:.2f} during (mean {load['mean']:.2f}, \
{load['samples']} samples), {load['after']:.2f} after. {fig['note']}

## The steps, as README.md's Set up gives them, in one venv

| step | command | wall s | CPU s | of which downloading alone, s |
|---|---|---:|---:|---:|
{rows}

- command one (torch, install, demo): **{fig['commands']['first_s']:.0f} s**; command two (test install, tests): \
**{fig['commands']['second_s']:.0f} s**; both: **{v['both_min']} minutes**
- installs: {v['install_first_s']} s for command one's packages, {v['install_second_s']} s for the test extras; \
downloading the same files alone took {v['download_s']} s of it (`pip download --no-deps` of each install's \
new packages, cache off, right after it)
- tests: `{s['test']['summary']}` ({counts})
- the demo's last lines:

{demo}

## Sizes

The venv after command one: **{fig['venv_mb']['default']:.0f} MB** (torch {fig['torch_mb']:.0f} MB of it); \
after command two: **{fig['venv_mb']['test']:.0f} MB** (`du` of the venv).

What each extra adds to the default install, in MB: the files listed in the RECORD of every package its \
requirements pull in that the default install lacks (extras share packages, so these do not add up to the test \
venv's size):

| extra | MB |
|---|---:|
{extras}
"""


# ------------------------------------------------------------------------------------------------ measuring


class LoadSampler(threading.Thread):
    """The 1-minute load average every ``every`` seconds while a run lasts."""

    def __init__(self, every: float = 15.0) -> None:
        super().__init__(daemon=True)
        self.every, self.samples, self.stop = every, [], threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self.stop.wait(self.every)


def children_cpu() -> float:
    r = os.times()
    return r.children_user + r.children_system


def run_step(name: str, cmd: str, cwd: Path, env: dict, log: Path) -> dict:
    """Run one step in bash, its output to ``log``; wall and CPU seconds."""
    print(f"newcomer: {name}: {cmd}", flush=True)
    t0, c0 = time.monotonic(), children_cpu()
    with open(log, "w", encoding="utf-8") as f:
        r = subprocess.run(["bash", "-c", f"set -o pipefail; {cmd}"], cwd=cwd, env=env, stdout=f,
                           stderr=subprocess.STDOUT)  # fmt: skip
    wall, cpu = time.monotonic() - t0, children_cpu() - c0
    print(f"newcomer: {name}: {wall:.1f} s wall, {cpu:.0f} s CPU, exit {r.returncode} (log {log})", flush=True)
    if r.returncode != 0:
        raise SystemExit(f"newcomer: `{cmd}` failed (exit {r.returncode}); see {log}")
    return {"command": cmd, "s": round(wall, 1), "cpu_s": round(cpu, 1)}


def freeze(python: Path) -> set[str]:
    """name==version of every package in the venv but the editable albertlm."""
    out = subprocess.run([str(python), "-m", "pip", "freeze", "--all", "--exclude-editable"], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return {line.strip() for line in out.splitlines() if "==" in line and not line.startswith("-e ")}


def time_download(python: Path, pins: set[str], env: dict) -> float:
    """Seconds to download ``pins`` alone (no dependencies resolved, cache off) into a throwaway folder."""
    if not pins:
        return 0.0
    with tempfile.TemporaryDirectory() as d:
        t0 = time.monotonic()
        r = subprocess.run([str(python), "-m", "pip", "download", "--no-deps", "-q", "-d", d, *sorted(pins)], env=env,
                           capture_output=True, text=True)  # fmt: skip
        if r.returncode != 0:
            raise SystemExit(f"newcomer: pip download of {len(pins)} packages failed: {r.stderr.strip()[-2000:]}")
        return round(time.monotonic() - t0, 1)


def du_mb(path: Path) -> float:
    return int(subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True)
               .stdout.split()[0]) / 2**20  # fmt: skip


# Run inside the finished venv: MB each extra of albertlm adds to its default install (see the module docstring).
EXTRA_SIZES = r"""
import json, os
from importlib import metadata
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as canon

dists = {canon(d.metadata["Name"]): d for d in metadata.distributions()}

def closure(name, extras):
    seen, todo = set(), [(canon(name), frozenset(extras))]
    while todo:
        key = todo.pop()
        if key in seen or key[0] not in dists:
            continue
        seen.add(key)
        for r in map(Requirement, dists[key[0]].requires or []):
            if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in (key[1] or {""})):
                todo.append((canon(r.name), frozenset(r.extras)))
    return {n for n, _ in seen}

def mb(names):
    total = 0
    for n in names & dists.keys():
        for f in dists[n].files or []:
            p = f.locate()
            if os.path.isfile(p):
                total += os.path.getsize(p)
    return total / 2**20

base = closure("albertlm", ())
extras = dists["albertlm"].metadata.get_all("Provides-Extra") or []
print(json.dumps({"torch": mb({"torch"}), "extras": {e: mb(closure("albertlm", [e]) - base) for e in extras}}))
"""


def machine(python: Path) -> dict:
    from timing import machine as cpu_name

    pip = subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True, text=True).stdout.split()[1]
    indexes = subprocess.run([str(python), "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    where = "pip's indexes: PyPI" + ("; plus this machine's local index and wheel folders" if "file://" in indexes
                                     or "find-links" in indexes else "")  # fmt: skip
    mem = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal")) / 2**20
    return {"cpu": cpu_name(), "cores": os.cpu_count(), "memory_gib": mem, "os": platform.platform(terse=True),
            "python": platform.python_version(), "pip": pip, "indexes": where}  # fmt: skip


def measure(work: Path, note: str, python_for_venv: str) -> dict:
    sys.path.insert(0, str(REPO / ".ci"))
    sys.path.insert(0, str(REPO / "benchmarks"))
    from readme import setup_steps

    if work.exists():
        raise SystemExit(f"newcomer: --work {work} exists; give a new folder (it is left for inspection after)")
    work.mkdir(parents=True)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()  # fmt: skip
    clone, venv = work / "repo", work / "venv"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", commit], check=True)
    steps_cmd = setup_steps(clone / "README.md")
    sampler = LoadSampler()
    before = os.getloadavg()[0]
    sampler.start()
    subprocess.run([python_for_venv, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_CONSTRAINT")}
    env.update(PIP_NO_CACHE_DIR="1", PIP_PROGRESS_BAR="off", VIRTUAL_ENV=str(venv),
               PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")  # fmt: skip
    steps, totals, sizes = {}, {}, {}
    for command, names in COMMANDS.items():
        for name in names:
            had = freeze(python) if name in INSTALLS else set()
            steps[name] = run_step(name, steps_cmd[name], clone, env, work / f"{name}.log")
            if name in INSTALLS:
                new = freeze(python) - had
                steps[name]["packages"] = len(new)
                steps[name]["download_s"] = time_download(python, new, env)
        totals[f"{command}_s"] = round(sum(steps[n]["s"] for n in names), 1)
        sizes["default" if command == "first" else "test"] = round(du_mb(venv), 1)
    sampler.stop.set()
    log = (work / "test.log").read_text(encoding="utf-8").strip().splitlines()
    summary = next(line.strip("= ") for line in reversed(log) if re.search(r"\d+ (passed|failed)", line))
    steps["test"]["summary"] = summary
    steps["test"]["counts"] = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?|"
                                                                 r"xfailed|xpassed)", summary)}  # fmt: skip
    steps["demo"]["tail"] = (work / "demo.log").read_text(encoding="utf-8").strip().splitlines()[-3:]
    measured = json.loads(subprocess.run([str(python), "-c", EXTRA_SIZES], capture_output=True, text=True,
                                         check=True).stdout)  # fmt: skip
    samples = sampler.samples or [before]
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit, "machine": machine(python),
        "load": {"before": before, "min": min(samples), "max": max(samples), "mean": sum(samples) / len(samples),
                 "samples": len(samples), "after": os.getloadavg()[0]},
        "note": note, "steps": steps, "commands": totals, "venv_mb": sizes, "torch_mb": round(measured["torch"], 1),
        "extra_mb": {e: round(mb, 1) for e, mb in sorted(measured["extras"].items())},
    }  # fmt: skip


def write(fig: dict) -> None:
    from albertlm.files import write_text_atomic

    write_text_atomic(FIGURES_JSON, json.dumps(fig, indent=1, ensure_ascii=False) + "\n")
    write_text_atomic(FIGURES_MD, render_markdown(fig))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, help="a new folder for the clone, the venv and each step's log "
                   "(default: a new one under the system's temp folder)")  # fmt: skip
    p.add_argument("--note", default="", help="a sentence on the conditions (e.g. who else used the machine)")
    p.add_argument("--python", default="python3", help="the Python the venv is made with (default: python3)")
    p.add_argument("--readme-only", action="store_true", help="only rewrite the README's figures from newcomer.json")
    args = p.parse_args()
    sys.path.insert(0, str(REPO))
    if args.readme_only:
        fig = json.loads(FIGURES_JSON.read_text(encoding="utf-8"))
    else:
        python = shutil.which(args.python) or args.python
        fig = measure(args.work or Path(tempfile.mkdtemp(prefix="newcomer-")) / "run", args.note, python)
    write(fig)
    missing = update_readme(fig, REPO / "README.md")
    if missing:
        print("newcomer: README.md lacks these figure sentences (write each once where it belongs): "
              + "; ".join(missing), file=sys.stderr)  # fmt: skip
    print(f"wrote {FIGURES_JSON}, {FIGURES_MD} and README.md's figures; next: python -m pytest tests/test_newcomer.py"
          f" -n 0, then commit the three")  # fmt: skip
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
