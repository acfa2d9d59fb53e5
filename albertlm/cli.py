"""The one entry point: ``albertlm <command> ...``.

Each subcommand lives in ``albertlm/commands/<name>.py`` and exposes ``register(subparsers)``, which adds
its parser and sets ``func`` (called with the parsed args, returns an exit code). Imports are lazy in
the sense that only argparse wiring runs at start-up; heavy work happens inside ``func``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from albertlm.errors import USER_OS_ERRORS, AlbertlmError, UserError  # noqa: F401  (UserError: re-export)

# (module under albertlm.commands) in the order `albertlm --help` lists them
COMMANDS = [
    "params", "forward", "init",  # the model
    "tokenizer", "data",  # text -> shards
    "pretrain", "plot",  # training
    "finetune",  # finetune, evaluate, predict, tasks, convert-pku-ner
    "export", "serve", "convert",  # deployment; original TF checkpoints in
    "analyze", "ablate",  # the paper's claims
]




class _Console(logging.Handler):
    """The library logs; the CLI shows its INFO lines on stdout and warnings on stderr (the streams looked up
    at each message, so redirections made after start-up are honoured)."""

    def emit(self, record: logging.LogRecord) -> None:
        stream = sys.stderr if record.levelno >= logging.WARNING else sys.stdout
        prefix = "warning: " if record.levelno == logging.WARNING else ""
        print(prefix + self.format(record), file=stream, flush=True)


def _show_library_logs() -> None:
    logger = logging.getLogger("albertlm")
    if not any(isinstance(h, _Console) for h in logger.handlers):
        logger.addHandler(_Console())
    logger.setLevel(logging.INFO)


# What to do about an operating-system error on a path the user named.
_OS_FIXES = {
    FileExistsError: "a file is in the way where a folder is needed; choose another path",
    NotADirectoryError: "part of the path is a file, not a folder; choose another path",
    IsADirectoryError: "a folder is where a file is needed; name the file",
    PermissionError: "choose a path you can write (or read)",
}


def _os_error_line(e: OSError) -> str:
    if e.filename is None:
        return str(e)
    fix = next((f for cls, f in _OS_FIXES.items() if isinstance(e, cls)), "")
    return f"{e.filename}: {e.strerror or e}" + (f"; {fix}" if fix else "")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="albertlm", description="ALBERT (A Lite BERT) toolkit: model, data, training, export."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"albertlm.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _show_library_logs()
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except AlbertlmError as e:
        print(f"albertlm {args.command}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        if not isinstance(e, USER_OS_ERRORS) and e.filename is None:
            raise  # not about a path the user named: a bug, keep its traceback
        print(f"albertlm {args.command}: error: {_os_error_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"albertlm {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
