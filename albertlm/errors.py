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


SEED_BOUNDS = {"min": 0, "max": 2**32 - 1}  # what numpy and torch take as a seed: every seed setting's bounds


def out_of_bounds(value: float, low: float | None = None, high: float | None = None,
                  above: float | None = None, below: float | None = None) -> str | None:  # fmt: skip
    """Why ``value`` breaks the bounds a setting declares (``min`` / ``max`` / ``above`` / ``below`` in its
    dataclass field's metadata), or None: the one rule behind the CLI's bounded flags and ``check_bounds``."""
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


def check_bounds(settings: object) -> None:
    """Every number of a settings dataclass holds to the bounds its field declares, as the flags do at parse
    time: settings built in Python or read back from a run's record get the same one-line refusal."""
    import dataclasses

    for f in dataclasses.fields(settings):  # type: ignore[arg-type]
        value = getattr(settings, f.name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        why = out_of_bounds(value, *(f.metadata.get(k) for k in ("min", "max", "above", "below")))
        if why:
            raise UserError(f"{flag_name(f)} {why}, not {value}")


def flag_name(f: object) -> str:
    """The command-line flag of a settings field: ``metadata["flag"]``, else ``--`` and the field's name."""
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")  # type: ignore[attr-defined]


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
