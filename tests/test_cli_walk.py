"""Every command, walked with the three mistakes a newcomer makes first: a required flag left out, a flag
misspelled, a value out of range (or not one of the choices). Each ends in exactly one line on stderr that names
the flag (and, for a typo, the flag meant), exit code 2, before any work; and every command's help has a
description, an example and no reStructuredText markup."""

from __future__ import annotations

import argparse

import pytest

from albertlm.cli import build_parser, main
from albertlm.commands import flags


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from _leaves(sub, (*path, name))


LEAVES = dict(_leaves(build_parser()))
COMMANDS = sorted(" ".join(p) for p in LEAVES)


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def _value(action: argparse.Action) -> str:
    """A value the flag takes (its parse is all that runs: the walk stops at the parse error)."""
    if action.choices:
        return str(next(iter(action.choices)))
    return "sst2" if action.type is flags.task else "1"


def _required(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if (a.required or not a.option_strings) and a.help != argparse.SUPPRESS]


def _argv(parser: argparse.ArgumentParser, leave_out: argparse.Action | None = None) -> list[str]:
    argv = []
    for a in _required(parser):
        if a is leave_out:
            continue
        argv += [a.option_strings[0], _value(a)] if a.option_strings else ["x"]
    return argv


def _bad_value(parser: argparse.ArgumentParser) -> tuple[str, str] | None:
    """A flag of the command and a value it refuses: out of its bounds, or not one of its choices."""
    for a in parser._actions:
        if not a.option_strings or not _takes_value(a) or a.help == argparse.SUPPRESS:
            continue
        if a.choices:
            return a.option_strings[0], "not-a-choice"
        if getattr(a.type, "__qualname__", "").startswith("bounded."):
            return a.option_strings[0], "-1"
    return None


def _misspelled(flag: str) -> str:
    """--max-steps -> --max-stesp: the last two letters swapped."""
    return flag[:-2] + flag[-1] + flag[-2]


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(code: int, out: str, err: str, *names: str) -> str:
    lines = err.splitlines()
    assert code == 2 and out == "" and len(lines) == 1, (code, out, err)
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


@pytest.mark.parametrize("command", [c for c in COMMANDS if _required(LEAVES[tuple(c.split())])])
def test_a_missing_flag_is_one_line_naming_it(command, capsys):
    parser = LEAVES[tuple(command.split())]
    for action in _required(parser):
        name = action.option_strings[0] if action.option_strings else action.dest
        line = _one_line(*_run([*command.split(), *_argv(parser, leave_out=action)], capsys), "missing", name)
        assert f"`albertlm {command} --help`" in line  # the usage, on request


@pytest.mark.parametrize("command", COMMANDS)
def test_a_misspelled_flag_gets_did_you_mean(command, capsys):
    parser = LEAVES[tuple(command.split())]
    flag = next((s for a in parser._actions for s in a.option_strings
                 if s.startswith("--") and s != "--help" and a.help != argparse.SUPPRESS), "--help")  # fmt: skip
    typo = _misspelled(flag)
    _one_line(*_run([*command.split(), *_argv(parser), typo, "1"], capsys), f"unknown flag {typo}",
              f"did you mean {flag}?")  # fmt: skip


@pytest.mark.parametrize("command", [c for c in COMMANDS if _bad_value(LEAVES[tuple(c.split())]) is not None])
def test_a_bad_value_is_one_line_naming_the_flag(command, capsys):
    parser = LEAVES[tuple(command.split())]
    flag, value = _bad_value(parser)
    _one_line(*_run([*command.split(), *_argv(parser), flag, value], capsys), flag)


def test_the_walk_covers_every_command():  # the commands left out above have no required / bounded flag
    assert sum(bool(_required(p)) for p in LEAVES.values()) >= len(COMMANDS) - 8
    assert len(COMMANDS) >= 20 and {"finetune", "data build", "analyze pairs", "tokenizer train"} <= set(COMMANDS)
    assert sum(_bad_value(p) is not None for p in LEAVES.values()) >= len(COMMANDS) - 5


def test_a_typo_in_a_command_or_task_names_the_nearest(capsys):
    assert "did you mean finetune?" in _one_line(*_run(["fintune"], capsys))
    assert "did you mean layers?" in _one_line(*_run(["analyze", "layrs"], capsys))
    line = _one_line(*_run(["finetune", "--task", "sst", "--data", "d", "--model", "m", "--out", "o"], capsys))
    assert "did you mean sst2?" in line and "`albertlm tasks`" in line
    line = _one_line(*_run(["finetune", "--data", "d", "--model", "m", "--out", "o"], capsys), "missing --task")
    assert "`albertlm tasks`" in line


def test_a_group_alone_is_one_line(capsys):
    _one_line(*_run(["data"], capsys), "build", "inspect")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_has_a_description_and_an_example(command):
    text = LEAVES[tuple(command.split())].format_help()
    assert "examples:\n" in text and f"albertlm {command}" in text.split("examples:\n")[1], text
    description = text.split("\n\n")[1]
    assert len(description.split()) >= 4 and not description.startswith(("options:", "positional")), text
    assert "``" not in text and "%%" not in text


def test_predict_help_names_the_json_keys():
    text = " ".join(LEAVES[("predict",)].format_help().split())
    assert all(f'"{key}"' in text for key in ("text", "text_b", "tokens", "question", "context", "options"))


def test_an_old_flag_name_works_and_says_the_new_one(capsys):
    args = build_parser().parse_args(["serve", "--model", "m", "--max-batch-size", "4"])
    assert args.eval_batch_size == 4 and args.max_batch is None
    assert "--max-batch-size is the old name of --eval-batch-size" in capsys.readouterr().err
    assert "--max-batch-size" not in LEAVES[("serve",)].format_help()


def test_a_path_that_does_not_exist_is_never_called_a_preset(tmp_path, capsys):
    (tmp_path / "final").mkdir()
    typo = tmp_path / "fnal"
    line = _one_line(*_run(["finetune", "--task", "sst2", "--data", str(tmp_path / "no-data"), "--model", str(typo),
                            "--tokenizer", str(tmp_path), "--out", str(tmp_path / "o")], capsys))  # fmt: skip
    assert f"--model: no such folder {typo} (did you mean {tmp_path / 'final'}?)" in line and "albert-tiny" in line
    assert "no-data" not in line  # the model is checked before the data is read
    for command in (["evaluate", "--data", "d"], ["export", "--out", str(tmp_path / "x")], ["forward"]):
        assert f"no such folder {typo}" in _one_line(*_run([*command, "--model", str(typo)], capsys))


def test_a_text_folder_given_as_shards_names_the_command_that_builds_them(tmp_path, capsys):
    (tmp_path / "train.txt").write_text("a sentence.\n", encoding="utf-8")
    line = _one_line(*_run(["pretrain", "--data", str(tmp_path), "--out", str(tmp_path / "run")], capsys))
    assert f"`albertlm data build --input {tmp_path} --tokenizer TOKENIZER --out shards/NAME`" in line


def test_a_wordpiece_vocabulary_smaller_than_asked_says_so(tmp_path, capsys):
    from pathlib import Path

    text = Path(__file__).parent / "data" / "corpus" / "zh" / "peoples_daily_199801.txt"
    assert main(["tokenizer", "train", "--kind", "wordpiece", "--input", str(text), "--vocab-size", "3000", "--out",
                 str(tmp_path / "tok")]) == 0  # fmt: skip
    line = capsys.readouterr().out.strip().splitlines()[-1]
    got = int(line.split("vocab of ")[1].split()[0])
    assert got < 3000 and f"{3000 - got} fewer than --vocab-size 3000 asked" in line


def test_messages_read_as_english():
    from albertlm.errors import with_article

    assert with_article("AlbertForPreTraining") == "an AlbertForPreTraining"
    assert with_article("headless") == "a headless"
