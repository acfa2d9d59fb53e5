"""The CLI's argparse: errors of one line that name the flag and the fix, and help that shows a description,
the defaults and an example for every command.

argparse answers a bad flag with the whole usage (50 lines for ``finetune``) above the one line that matters,
and a misspelled flag with the top-level usage and no hint. Here a parse error is one line: a missing flag
with what it is, a value out of range with the range, a misspelled flag with "did you mean" from the
command's own flags, an unknown command or choice with the nearest name, each pointing to ``--help`` (the
usage on request). A command's help is its module docstring: the first paragraph is the description and
the command lines in it (``albertlm <command> ...``) its examples, so the help and the docstring cannot drift.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import textwrap
from typing import Any, NoReturn


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and examples as written; every flag's default shown unless its help already says it (the
    settings-derived flags do), or there is none to show (None, a switch's False, an empty list)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (not action.option_strings or "default" in text or default is argparse.SUPPRESS
                or default is None or default is False or default == [] or default == ""):  # fmt: skip
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """argparse with the errors and help described in the module docstring."""

    LEAF = "_albertlm_parser"  # the namespace key naming the innermost (sub)command parsed

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self._given: list[str] = []

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._given = list(sys.argv[1:] if args is None else args)  # what this (sub)command was handed
        return super().parse_known_args(args, namespace)

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:  # the flags no parser took: matched against the command they were given to, not the top level
            getattr(parsed, self.LEAF, self).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(explain(self, message).splitlines())}\n")


def _long_flags(parser: argparse.ArgumentParser, hidden: bool = True) -> list[str]:
    """The parser's --flags (``hidden``: also the old names left out of the help)."""
    return [s for s, a in parser._option_string_actions.items()
            if s.startswith("--") and (hidden or a.help is not argparse.SUPPRESS)]  # fmt: skip


def _unknown_flags(parser: argparse.ArgumentParser) -> list[str]:
    """The flags among the arguments handed to ``parser`` that it does not know (nor abbreviates)."""
    known = _long_flags(parser)
    unknown = []
    for arg in parser._given:
        if arg == "--":
            break
        if not arg.startswith("--"):
            continue
        name = arg.split("=", 1)[0]
        if not any(k == name or k.startswith(name) for k in known):
            unknown.append(name)
    return unknown


def _did_you_mean(word: str, names: list[str]) -> str:
    close = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def _action_named(parser: argparse.ArgumentParser, name: str) -> argparse.Action | None:
    for action in parser._actions:
        if name in action.option_strings or name in (action.dest, action.metavar):
            return action
    return None


def explain(parser: argparse.ArgumentParser, message: str) -> str:
    """argparse's error ``message`` as one line that names the flag and the fix."""
    usage = f"usage and examples: `{parser.prog} --help`"
    unknown = _unknown_flags(parser)
    if unknown:  # a misspelled flag comes first: it is often why a required one reads as missing
        flag = unknown[0]
        return f"unknown flag {flag}{_did_you_mean(flag, _long_flags(parser, hidden=False))} ({usage})"
    missing = re.match(r"the following arguments are required: (.*)", message)
    if missing:
        parts = []
        for name in missing.group(1).split(", "):
            action = _action_named(parser, name)
            what = (action.help or "").replace("%%", "%") if action else ""
            parts.append(f"{name} ({what})" if what else name)
        return f"missing {' and '.join(parts)}; {usage}"
    choice = re.match(r"argument (\S+): invalid choice: '(.*)' \(choose from (.*)\)", message, re.S)
    if choice:
        flag, given, options = choice.groups()
        names = [o.strip().strip("'") for o in options.split(",")]
        if isinstance(_action_named(parser, flag), argparse._SubParsersAction):
            return f"unknown command {given!r}{_did_you_mean(given, names)} (`{parser.prog} --help` lists them)"
        return f"{flag} {given!r} is not one of {', '.join(names)}{_did_you_mean(given, names)}"
    value = re.match(r"argument ([^:]+): (.*)", message, re.S)
    if value:
        return f"{value.group(1).split('/')[0]}: {value.group(2)} ({usage})"
    if message.startswith("unrecognized arguments"):
        return f"{message}: {parser.prog} takes no such argument ({usage})"
    return f"{message} ({usage})"


# --- help: a command's description and examples from its module docstring ------------------------------------
_COMMAND_LINE = re.compile(r"^\s*(albertlm |torchrun |cat |echo |head |tail |python )")


def _examples(doc: str) -> list[str]:
    """The command lines of a module docstring, continuation lines (ending in a backslash) joined to theirs."""
    out: list[str] = []
    going_on = False
    for line in doc.splitlines():
        if going_on:
            out[-1] += "\n" + line.strip()
        elif _COMMAND_LINE.match(line):
            out.append(line.strip())
        else:
            continue
        going_on = line.rstrip().endswith("\\")
    return out


def describe(sub: argparse._SubParsersAction, name: str, doc: str) -> None:
    """Give the subcommand ``name`` of ``sub`` (and its own subcommands) a description and its examples, from
    ``doc``, the module docstring of the command: the first paragraph (the subcommands of a group: their
    one-line help) and the docstring's command lines that run this (sub)command."""
    parser = sub.choices[name]
    help_text = next((a.help for a in sub._choices_actions if a.dest == name), "") or ""
    if not parser.description:
        if parser.prog.count(" ") == 1:  # a command: its module's first paragraph
            text = re.sub(r"^``albertlm [\w -]+``: ", "", doc.strip().split("\n\n")[0])
        else:  # a group's subcommand: its one-line help (written for argparse, which reads %% as %)
            text = help_text.replace("%%", "%")
        text = " ".join(text.replace("``", "`").split())
        parser.description = textwrap.fill(text[:1].upper() + text[1:], 100)
    if not parser.epilog:
        mine = [e for e in _examples(doc) if re.search(re.escape(parser.prog) + r"(?![\w-])", e)]
        if mine:
            parser.epilog = "examples:\n" + "\n".join("  " + e.replace("\n", "\n    ") for e in mine)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices:
                describe(action, child, doc)
