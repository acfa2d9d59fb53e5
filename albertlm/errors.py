"""The errors a user can fix: one hierarchy, so the CLI (and the server) know exactly what to report.

Every class here means "the input is wrong, not the code": the CLI prints the message as one line and
exits 2; anything else is a bug and keeps its traceback. Messages name the file, line or flag at fault
and say how to fix it. The ``ValueError`` / ``RuntimeError`` bases keep ``except ValueError`` callers
working.

    AlbertlmError
    ├── UserError            a bad flag, setting or argument
    │   └── ConfigError      an invalid model configuration (config.json, --set)
    ├── DataError            a malformed input file (names file:line)
    ├── CheckpointError      weights that do not fit the model, or a damaged checkpoint
    │   ├── CheckpointCorrupt    a checkpoint whose files fail their checksums
    │   ├── NonFiniteOutput      a model that computes NaN or infinity (broken weights or config)
    │   └── ConversionError      an original TF checkpoint / config / vocabulary that cannot be converted
    ├── TrainingError        a run that cannot go on (diverged, inconsistent resume)
    ├── MissingDependency    an optional extra is not installed (says which)
    └── RequestError         a bad HTTP request to the server (status + code)
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any


class AlbertlmError(Exception):
    """Base class: a problem with the user's input, reported as one clear line."""


class UserError(AlbertlmError, ValueError):
    """A bad command-line flag, setting or argument."""


class ConfigError(UserError):
    """An invalid model configuration."""


class DataError(AlbertlmError, ValueError):
    """A malformed input file; the message names the file and line."""


class CheckpointError(AlbertlmError, ValueError):
    """A checkpoint that does not fit the model: names the offending keys or shapes."""


class CheckpointCorrupt(CheckpointError):
    """A checkpoint whose files are missing or fail their checksums."""


class NonFiniteOutput(CheckpointError):
    """The model computed NaN or infinity: its weights or config are broken, and no answer is given."""


class ConversionError(CheckpointError):
    """A checkpoint / config / vocabulary that cannot be converted: one line naming the variable or file."""


class TrainingError(AlbertlmError, RuntimeError):
    """The run cannot go on (bad settings, too many non-finite losses)."""


class MissingDependency(AlbertlmError, ImportError):
    """An optional dependency is missing; the message gives the install command."""


def import_extra(module: str, need: str, extra: str, alternative: str = "") -> types.ModuleType:
    """``module``, imported, or one line naming what needs it and the extra of pyproject.toml that installs it
    (``alternative``: what to do instead, e.g. a flag that does without)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        also = f", or {alternative}" if alternative else ""
        raise MissingDependency(f"{need} needs {module.split('.')[0]}: pip install 'albertlm[{extra}]'{also}") from None


SEED_BOUNDS = {"min": 0, "max": 2**32 - 1}  # what numpy and torch take as a seed: every seed setting's bounds


def out_of_bounds(value: float, low: float | None = None, high: float | None = None,
                  above: float | None = None, below: float | None = None) -> str | None:  # fmt: skip
    """Why ``value`` breaks the bounds a setting declares (``min`` / ``max`` / ``above`` / ``below`` in its
    dataclass field's metadata), or None: the one rule behind the CLI's bounded flags and ``check_settings``."""
    if value != value:  # NaN passes every comparison
        return "must be a number"
    if above is not None and not value > above:
        return f"must be above {above}" + (f" and below {below}" if below is not None else "")
    if below is not None and not value < below:
        return (f"must be above {above} and" if above is not None else "must be") + f" below {below}"
    if (low is not None and value < low) or (high is not None and value > high):
        if low is not None and high is not None:
            return f"must be from {low} to {high}"
        return f"must be at least {low}" if low is not None else f"must be at most {high}"
    return None


def scalar_type(hint: Any) -> Any:
    """A settings field's type hint -> the one scalar type its flag parses (``int | None`` -> int), or None
    when the field is no flag's (a dict, a nested settings object)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 and args[0] in (int, float, str, bool) else None
    return hint if hint in (int, float, str, bool) else None


def value_problem(f: Any, kind: type, value: Any) -> str | None:
    """Why ``value`` is not one the flag of field ``f`` (scalar type ``kind``) would parse to, or None: its
    type, its ``choices``, its form (``parse``) and its bounds, the checks the flag makes on the command line."""
    if isinstance(value, bool) != (kind is bool) or not isinstance(value, (int, float) if kind is float else kind):
        return f"must be {_KIND_NAMES[kind]}, not {type(value).__name__} {value!r}"
    if "choices" in f.metadata and value not in f.metadata["choices"]:
        return f"must be one of {', '.join(map(str, f.metadata['choices']))}, not {value!r}"
    if "parse" in f.metadata:
        try:
            f.metadata["parse"](value)
        except ValueError as e:
            return str(e)
    if kind in (int, float):
        why = out_of_bounds(value, *(f.metadata.get(k) for k in ("min", "max", "above", "below")))
        return f"{why}, not {value}" if why else None
    return None


_KIND_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def check_settings(settings: object) -> None:
    """Every flag field of a settings dataclass (and of the settings objects nested in it) holds a value its
    flag would parse to, checked by ``value_problem`` as the flag is at parse time: settings built in Python
    (the API's keywords), read back from a run's record or a model's config.json get the same one-line
    refusal, naming the flag. None is the default of an optional field."""
    hints = typing.get_type_hints(type(settings))
    for f in dataclasses.fields(settings):  # type: ignore[arg-type]
        value = getattr(settings, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_settings(value)
            continue
        kind = scalar_type(hints[f.name])
        if kind is None or "help" not in f.metadata or value is None:
            continue
        why = value_problem(f, kind, value)
        if why:
            raise UserError(f"{flag_name(f)} {why}")


def flag_name(f: object) -> str:
    """The command-line flag of a settings field: ``metadata["flag"]``, else ``--`` and the field's name."""
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")  # type: ignore[attr-defined]


def with_article(word: str) -> str:
    """``word`` after "a" or "an", as it is read aloud: "an AlbertForPreTraining", "a headless"."""
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


class RequestError(AlbertlmError):
    """A bad request to the inference server: answered with ``status`` and a JSON error body."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


# Operating-system errors about paths the user named (missing, a file where a folder should be, no
# permission) are user errors too; the CLI reports them the same way.
USER_OS_ERRORS = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError)

__all__ = [
    "USER_OS_ERRORS",
    "AlbertlmError",
    "CheckpointCorrupt",
    "CheckpointError",
    "ConfigError",
    "DataError",
    "MissingDependency",
    "NonFiniteOutput",
    "RequestError",
    "TrainingError",
    "UserError",
]
