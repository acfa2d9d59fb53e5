"""What a newcomer meets first: every --help renders, groups name their subcommands, --version, a closed
pipe ends quietly, and saved weights get the same file mode as everything else."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from albertlm.cli import build_parser, main

REPO = Path(__file__).resolve().parents[1]


def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_every_help_renders():
    progs = []
    for p in _parsers(build_parser()):
        assert p.format_help()  # a stray % in a help string raises here (it did for `analyze`)
        progs.append(p.prog)
    assert "albertlm analyze intrinsic" in progs and len(progs) > 20


@pytest.mark.parametrize("group,names", [("analyze", ["layers", "intrinsic"]), ("data", ["build", "inspect"]),
                                         ("tokenizer", ["train", "encode"])])
def test_group_alone_names_its_subcommands(group, names, capsys):
    assert main([group]) == 2
    err = capsys.readouterr().err
    assert f"albertlm {group}: error: name one of: {', '.join(names)}" in err


def test_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"albertlm {version('albertlm')}"


def test_closed_pipe_is_quiet():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = f"{sys.executable} -m albertlm params | true; echo ${{PIPESTATUS[0]}}"
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, timeout=120)
    assert "Traceback" not in r.stderr and "BrokenPipeError" not in r.stderr, r.stderr
    assert r.stdout.strip() in ("0", "141")  # 0 when `true` read nothing before the whole table was written


def test_saved_weights_honour_the_umask(tmp_path):
    from albertlm import AlbertConfig, AlbertModel

    old = os.umask(0o022)
    try:
        AlbertModel(AlbertConfig.from_preset("albert-tiny").replace(vocab_size=100)).save_pretrained(tmp_path)
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes == {"config.json": 0o644, "model.safetensors": 0o644}
