"""Writing files so that a reader never sees half of one: the one helper every module uses."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any


def read_json(path: str | Path, error: type[Exception] | None = None) -> Any:
    """The JSON in ``path``, or ``error`` (UserError by default) in one line naming the file, and the line
    when the text is not JSON, or saying it is not text at all."""
    from albertlm.errors import UserError

    error = error or UserError
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise error(f"{path}: line {e.lineno}: not valid JSON ({e.msg})") from None
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text, so not the JSON file expected here") from None


def require_new_dir(path: str | Path, flag: str = "--out") -> Path:
    """``path`` unless it exists with something in it (a file, or a folder that is not empty): commands that
    write a whole directory in one go never write into one that holds anything already."""
    from albertlm.errors import UserError

    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UserError(f"{flag} {path} exists and is not empty; pass a new {flag} directory (nothing is overwritten)")
    return path


def refuse_model_dir(path: str | Path, why: str) -> None:
    """Stop (one line, ``why`` the fix) before a command writes into a folder holding a model (config.json):
    a model's folder holds what belongs to its weights, nothing else."""
    from albertlm.errors import UserError

    if (Path(path) / "config.json").exists():
        raise UserError(f"--out {path} holds a model (config.json); {why}")


def fsync_dir(path: str | Path) -> None:
    """Make a rename inside ``path`` survive a power cut (the directory entry itself is flushed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text_atomic(path: str | Path, text: str, durable: bool = False) -> Path:
    """Write ``text`` to a unique temp name beside ``path`` and rename it over ``path``; with ``durable``
    the file and the rename are also flushed to disk. A failure leaves ``path`` as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if durable:
        fsync_dir(path.parent)
    return path
