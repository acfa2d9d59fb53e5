"""Command-line flags derived from the library's own dataclasses, so a flag's name, type, default and help
can never drift from the setting it sets.

A field ``eval_batch_size: int = 64`` with ``metadata={"help": ...}`` becomes ``--eval-batch-size N``
(help "... (default: 64)"); a bool becomes ``--x / --no-x``; ``min`` / ``max`` / ``above`` / ``below`` in the
metadata bound a number, ``parse`` checks a string's form (``--device``), and ``flag`` names the flag when
it is not the field's name. Every derived flag parses to None when it is not given, so ``values`` returns
only what the user typed and the dataclass default (or a base object such as the demo's settings) applies
to the rest.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from typing import Any

from albertlm.errors import SEED_BOUNDS, flag_name, out_of_bounds
from albertlm.errors import scalar_type as _scalar


def bounded(kind: type, low: float | None = None, high: float | None = None, above: float | None = None,
            below: float | None = None) -> Any:  # fmt: skip
    """An argparse type: ``kind`` parsed, then held to [low, high] (and above ``above``), so an out-of-range
    value ends in argparse's one line (``argument --seed: ...``) instead of a traceback, or a silently odd
    run, from deep inside the command."""

    def parse(text: str) -> Any:
        value = kind(text)
        why = out_of_bounds(value, low, high, above, below)
        if why:
            raise argparse.ArgumentTypeError(f"{why}, not {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in "invalid int value: 'x'"
    return parse


def task(text: str) -> str:
    """An argparse type for --task: a registered task's name (or a generic kind), checked as it is parsed, so a
    typo is one line with the nearest name before any model or data is read; the name is kept as typed."""
    from albertlm.tasks import get_task

    try:
        get_task(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


seed = bounded(int, SEED_BOUNDS["min"], SEED_BOUNDS["max"])  # the type of every hand-declared --seed
count = bounded(int, 1)  # how many of something: at least one
limit = bounded(int, 0)  # "the first N" (0: all)


def flag_fields(cls: type, skip: tuple[str, ...] = ()) -> list[tuple[dataclasses.Field, Any]]:
    """(field, scalar type) for every field of ``cls`` that becomes a flag: scalars with a help text."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        kind = _scalar(hints[f.name])
        if f.name not in skip and kind is not None and "help" in f.metadata:
            out.append((f, kind))
    return out


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


class _OldName(argparse.Action):
    """A flag's old name, kept working but left out of the help (where it read like another flag): it sets the
    same setting and says the new name on stderr."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:  # fmt: skip
        new = next(a for a in parser._actions if a.dest == self.dest and a is not self).option_strings[0]
        print(f"warning: {option_string} is the old name of {new}; use {new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_flags(parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = (),
              aliases: dict[str, tuple[str, ...]] | None = None, defaults: Any = None) -> None:  # fmt: skip
    """One flag per field of ``cls``; ``aliases`` maps a field to old flag names (working, but not in the help);
    ``defaults`` (an instance) overrides the defaults shown in help, e.g. the demo's."""
    for f, kind in flag_fields(cls, skip):
        default = getattr(defaults, f.name) if defaults is not None else _default(f)
        help_text = f.metadata["help"]
        if default not in (None, "") and "default" not in help_text:
            help_text += f" (default: {default})"
        names = [flag_name(f)]
        kw: dict[str, Any] = {"dest": f.name, "default": None, "help": help_text}
        if f.metadata.get("required"):  # a setting with no default that makes sense (a path: --corpus)
            kw["required"] = True
        if "choices" in f.metadata:
            kw["choices"] = f.metadata["choices"]
        if kind is bool:
            parser.add_argument(*names, action=argparse.BooleanOptionalAction, **kw)
        else:
            bounds = {k: f.metadata.get(m) for k, m in (("low", "min"), ("high", "max"), ("above", "above"),
                                                         ("below", "below"))}  # fmt: skip
            parse = bounded(kind, **bounds) if any(v is not None for v in bounds.values()) else kind
            if "parse" in f.metadata:  # a checked form, e.g. --device's auto|cpu|cuda|cuda:N
                parse = _checked(f.metadata["parse"])
            parser.add_argument(*names, type=parse, metavar=f.metadata.get("metavar"), **kw)
            for old in (aliases or {}).get(f.name, ()):
                parser.add_argument(old, action=_OldName, dest=f.name, default=None, type=parse, help=argparse.SUPPRESS)


def _checked(check: Any) -> Any:
    """An argparse type from ``check(text) -> value`` that raises ValueError with the reason."""

    def parse(text: str) -> Any:
        try:
            return check(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = getattr(check, "__name__", "value")
    return parse


def values(args: argparse.Namespace, cls: type, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields of ``cls`` the user set on the command line."""
    return {f.name: getattr(args, f.name) for f, _ in flag_fields(cls, skip) if getattr(args, f.name, None) is not None}


def build(args: argparse.Namespace, cls: type, base: Any = None, skip: tuple[str, ...] = (), **fixed: Any) -> Any:
    """An instance of ``cls``: ``base`` (or the defaults) with the flags the user set, and ``fixed``."""
    given = {**values(args, cls, skip), **fixed}
    return dataclasses.replace(base, **given) if base is not None else cls(**given)
