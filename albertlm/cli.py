"""The one entry point: ``albertlm <command> ...``.

Each subcommand lives in ``albertlm/commands/<name>.py`` and exposes ``register(subparsers)``, which adds
its parser and sets ``func`` (called with the parsed args, returns an exit code). Imports are lazy in
the sense that only argparse wiring runs at start-up; heavy work happens inside ``func``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from albertlm.commands.parser import Parser, describe
from albertlm.errors import USER_OS_ERRORS, AlbertlmError, UserError  # noqa: F401  (UserError: re-export)

# (module under albertlm.commands) in the order `albertlm --help` lists them
COMMANDS = [
    "params", "forward", "init",  # the model
    "tokenizer", "data",  # text -> shards
    "pretrain", "rendezvous", "plot",  # training
    "finetune", "distill", "evaluate", "predict", "tasks", "convert_pku_ner",  # tasks
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
    parser = Parser(prog="albertlm", description="ALBERT (A Lite BERT) toolkit: model, data, training, export.",
                    epilog="examples:\n  albertlm pretrain              # the embedded demo, a few minutes\n"
                           "  albertlm finetune --help       # any command's flags and an example")  # fmt: skip
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"albertlm.commands.{name}")
        before = set(sub.choices)
        module.register(sub)
        for added in set(sub.choices) - before:
            describe(sub, added, module.__doc__ or "")
    _name_subcommands(parser)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("albertlm")
    except PackageNotFoundError:
        return "(not installed: run `pip install -e .`)"


def _name_subcommands(parser: argparse.ArgumentParser) -> None:
    """A command group called alone (`albertlm analyze`) lists its subcommands instead of a bare usage error."""
    parser.set_defaults(**{Parser.LEAF: parser})  # the innermost command parsed: whose flags a typo is matched to
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for group in action.choices.values():
            nested = [a for a in group._actions if isinstance(a, argparse._SubParsersAction)]
            if nested:
                nested[0].required = False  # the leaf's own `func` replaces this default when one is named
                group.set_defaults(func=lambda args, g=group, a=nested[0]: _choose(g, a))
            _name_subcommands(group)


def _choose(group: argparse.ArgumentParser, action: argparse._SubParsersAction) -> int:
    print(f"{group.prog}: error: name one of: {', '.join(action.choices)} "
          f"(e.g. `{group.prog} {next(iter(action.choices))} --help`)", file=sys.stderr)
    return 2


# Arguments that name a file or folder: a file:// URL there is the local path it names (files.local_path).
PATH_ARGS = ("data", "valid_data", "out", "input", "model", "tokenizer", "init_from", "cache_dir", "checkpoint",
             "config", "corpus", "calibration", "eval_file", "train_file", "heldout", "vocab", "output", "dir", "run")


def _file_urls(args: argparse.Namespace) -> None:
    from albertlm.files import local_path

    for name in PATH_ARGS:
        value = getattr(args, name, None)
        flag = name if name in ("dir", "run") else "--" + name.replace("_", "-")
        if isinstance(value, str):
            setattr(args, name, local_path(value, flag))
        elif isinstance(value, list):
            setattr(args, name, [local_path(v, flag) if isinstance(v, str) else v for v in value])


def main(argv: list[str] | None = None) -> int:
    from albertlm import card

    parser = build_parser()
    args = parser.parse_args(argv)
    card.invocation = list(argv if argv is not None else sys.argv[1:])  # model cards name the exact command
    _show_library_logs()
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        _file_urls(args)
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, so that a closed pipe (`albertlm params | head`) is caught below
        return code
    except BrokenPipeError:
        # The reader went away: stop quietly as `cat` does; Python's exit-time flush must not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a command killed by a closed pipe
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
