"""Writing files and folders so that a reader never sees half of one: the one helper every module uses.

A file is written under a temp name beside it and renamed over it (``atomic_file``, ``write_text_atomic``).
A folder is published in three steps: its contents are written into a staging folder (``staging_dir``,
holding a marker file when leftovers of a killed writer must be told from a user's folder), then
``publish`` drops the old manifest, flushes the staged files and renames them into place, and writes the
new manifest last: a reader sees the old folder, no folder, or the new one, never a mixture.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
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


def local_path(value: str, flag: str = "the path") -> str:
    """``value`` as a local path: a ``file://`` URL (``file:///x``, ``file://localhost/x``, ``file:/x``) is the
    path it names, percent-escapes decoded, so it never becomes a folder literally called ``file:``; any other
    value is returned as it is. A file URL naming another host is refused in one line."""
    from urllib.parse import unquote, urlsplit

    from albertlm.errors import UserError

    if not isinstance(value, str) or not value[:5].lower() == "file:":
        return value
    url = urlsplit(value)
    if url.netloc not in ("", "localhost") or not url.path.startswith("/"):
        raise UserError(f"{flag} {value}: a file:// URL names a path on this machine (file:///abs/path); give the "
                        "local path, or mount the other host's folder")
    return unquote(url.path)


def no_such_folder(path: str | Path) -> str:
    """"no such folder PATH", with the nearest name beside it when there is one (a typo: runs/en/fnal)."""
    import difflib

    path = Path(path)
    hint = ""
    if path.parent.is_dir():
        names = [p.name for p in path.parent.iterdir() if p.is_dir()]
        close = difflib.get_close_matches(path.name, names, n=1, cutoff=0.6)
        hint = f" (did you mean {path.parent / close[0]}?)" if close else ""
    return f"no such folder {path}{hint}"


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


@contextlib.contextmanager
def atomic_file(path: str | Path) -> Iterator[Path]:
    """A unique temp name beside ``path`` to write to; renamed over ``path`` when the block ends, removed if
    it raises. A failure leaves ``path`` as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: str | Path, text: str, durable: bool = False) -> Path:
    """Write ``text`` to a unique temp name beside ``path`` and rename it over ``path``; with ``durable``
    the file and the rename are also flushed to disk. A failure leaves ``path`` as it was."""
    return write_bytes_atomic(path, text.encode("utf-8"), durable)


def write_bytes_atomic(path: str | Path, data: bytes, durable: bool = False) -> Path:
    """``write_text_atomic`` for bytes."""
    path = Path(path)
    with atomic_file(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
    if durable:
        fsync_dir(path.parent)
    return path


def sha256(path: str | Path) -> str:
    """The hex sha256 of a file's bytes (read in 1 MiB blocks): the checksum every manifest records."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fsync_file(path: str | Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def staging_dir(parent: str | Path, name: str, mark: str | None = None) -> Path:
    """A fresh, empty folder ``parent/name`` to write a folder's contents into before ``publish`` (one left
    there by a killed writer is removed first); with ``mark``, an empty file of that name is written into
    it at once, so that leftovers of ours can be told from a user's folder and removed safely."""
    path = Path(parent) / name
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    if mark is not None:
        (path / mark).write_text("")
    return path


def publish(staging: Path, final: Path, names: list[str] | None = None, manifest: Path | None = None,
            text: str = "") -> Path:  # fmt: skip
    """Move what ``staging`` holds into place, durably, in the order that keeps every reader safe:

    1. the old ``manifest`` (if any) is removed, so from here on a reader finds no finished folder;
    2. the staged files are flushed and renamed: the whole folder to ``final`` (which must not exist or be
       empty) or, with ``names``, those files into the folder ``final``;
    3. the new ``manifest`` (``text``) is written last, flushed with its rename.
    """
    if manifest is not None and manifest.exists():
        manifest.unlink()
        fsync_dir(manifest.parent)
    for p in staging.iterdir():
        if p.is_file():
            fsync_file(p)
    fsync_dir(staging)
    if names is None:
        os.replace(staging, final)
    else:
        for name in names:
            os.replace(staging / name, final / name)
    fsync_dir(final if names is not None else final.parent)
    if manifest is not None:
        write_text_atomic(manifest, text, durable=True)
    return final
