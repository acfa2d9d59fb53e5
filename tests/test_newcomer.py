"""The README's set-up figures are the measured ones: every figure sentence equals docs/results/newcomer.json as
benchmarks/newcomer.py wrote it, newcomer.md is that JSON's page, every extra has its size, and the steps a
newcomer pastes (which .ci/run and newcomer.py read out of the README) install with the lock."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / ".ci"))

import newcomer  # noqa: E402
from readme import setup_steps  # noqa: E402

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

README = REPO / "README.md"


def figures() -> dict:
    return json.loads(newcomer.FIGURES_JSON.read_text(encoding="utf-8"))


def test_the_readme_states_the_measured_figures():
    text = " ".join(README.read_text(encoding="utf-8").split())  # a sentence may wrap
    missing = [p for p in newcomer.readme_phrases(figures()) if p not in text]
    assert not missing, f"README.md lacks {missing}: run `python benchmarks/newcomer.py --readme-only`"


def test_newcomer_md_is_the_json_page():
    assert newcomer.FIGURES_MD.read_text(encoding="utf-8") == newcomer.render_markdown(figures())


def test_every_extra_has_its_measured_size():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert sorted(figures()["extra_mb"]) == sorted(extras), "an extra changed: run benchmarks/newcomer.py again"


def test_readme_only_brings_stale_figures_back(tmp_path):
    fig, text = figures(), README.read_text(encoding="utf-8")
    stale = json.loads(re.sub(r"(?<=: )(\d+)\.(\d)", lambda m: str(int(m[1]) + 7) + ".5", json.dumps(fig)))
    copy = tmp_path / "README.md"
    copy.write_text(text, encoding="utf-8")
    assert newcomer.update_readme(stale, copy) == [] and copy.read_text(encoding="utf-8") != text
    assert newcomer.update_readme(fig, copy) == []
    assert copy.read_text(encoding="utf-8") == text


def test_the_setup_steps_install_with_the_lock_and_ci_runs_them():
    steps = setup_steps()
    assert list(steps) == ["torch", "install", "demo", "test-install", "test"]
    assert steps["install"].endswith(" -c requirements/lock.txt")
    assert steps["test-install"].endswith(" -c requirements/lock.txt")
    assert steps["torch"].startswith('pip install "torch==') and "-c " not in steps["torch"]
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    for step in ("torch", "test-install", "test"):
        assert f".ci/readme.py {step})" in ci
