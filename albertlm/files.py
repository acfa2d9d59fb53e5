"""Writing files so that a reader never sees half of one: the one helper every module uses."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path, PureWindowsPath
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


def inside(folder: str | Path, name: object, where: str, error: type[Exception] | None = None) -> Path:
    """``folder / name`` for a file name that one of ``folder``'s own files gives (``where``: that file and
    field), refused in one line when it could lead out of ``folder``: an absolute path, a ``..`` part, or a
    subfolder that resolves outside. The named file itself may be a symlink: HF's cache layout keeps a
    snapshot's files as symlinks to blobs elsewhere, and the folder's owner made those links."""
    from albertlm.errors import UserError

    error = error or UserError
    folder = Path(folder)
    if not isinstance(name, str) or not name.strip():
        raise error(f"{where}: expected a file name, got {name!r}; re-save the model")
    win = PureWindowsPath(name)  # splits on / and \\ alike, and sees C: drives
    path = folder / name
    if Path(name).is_absolute() or win.drive or win.root or ".." in win.parts:
        raise error(f"{where}: names {name!r}, a path outside {folder}; a model folder's files may name only files "
                    "inside it (re-save the model, or copy the file into the folder)")
    if not path.parent.resolve().is_relative_to(folder.resolve()):
        raise error(f"{where}: names {name!r}, whose folder {path.parent} resolves outside {folder} (a symlinked "
                    "subfolder); copy the file into the folder")
    return path


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
    return write_bytes_atomic(path, text.encode("utf-8"), durable)


def write_bytes_atomic(path: str | Path, data: bytes, durable: bool = False) -> Path:
    """``write_text_atomic`` for bytes."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if durable:
        fsync_dir(path.parent)
    return path
