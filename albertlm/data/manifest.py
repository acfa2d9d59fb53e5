"""A build's manifest.json, read as the untrusted input it is: a folder copied from elsewhere, or an object on
a shared store, may hold any text. ``shard_files`` checks its form before anything is memory-mapped or
downloaded (the shard folder a plain name inside the build, each file one the build's mode writes, its dtype,
count and byte size consistent); ``load_manifest`` then checks the files against it (sizes, sha256 with
``verify``, and that the offset arrays index the arrays they point into). The layout it describes is in
``albertlm.data.shards``, which writes it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from albertlm.data.instances import InstanceConfig
from albertlm.errors import SEED_BOUNDS, DataError, UserError
from albertlm.files import sha256

FORMAT = "albertlm-pretraining-data"
VERSION = 1
MANIFEST = "manifest.json"
MODES = ("static", "dynamic")


class DataFormatError(DataError):
    """A data directory that is missing, incomplete or corrupt (e.g. left by an interrupted build)."""


# What each kind of shard file holds: its dtype (None: the build's token dtype) and which files a mode has.
FILE_DTYPES = {"tokens": None, "sent": "<i8", "doc": "<i8", "wstart": "|u1", "input_ids": None, "offsets": "<i8",
               "type_split": "<i4", "sop": "|i1", "mask_pos": "<i4", "mask_ids": None, "mask_offsets": "<i8"}
MODE_FILES = {"dynamic": ({"tokens", "sent", "doc"}, {"wstart"}),
              "static": ({"input_ids", "offsets", "type_split", "sop", "mask_pos", "mask_ids", "mask_offsets"}, set())}
_SHARD_DIR = re.compile(r"shards-[A-Za-z0-9_-]{1,64}")  # what builds name it: a plain name inside the build
_SHA256 = re.compile(r"[0-9a-f]{64}")


def shard_files(m: object, where: str) -> list[tuple[str, dict]]:
    """(path inside the build, entry) of every file the manifest ``m`` lists, once its form is checked: a
    manifest is input like any other (a folder copied from elsewhere, an object on a shared store), so its
    shard folder must be a plain name inside the build, each file one the mode writes, its dtype the one
    that file holds and its byte size its count times the item size; ``where`` (the manifest's path or URL)
    starts the one-line DataFormatError otherwise. Reads nothing: callers check these against the files
    before any memory map or download."""

    def bad(field: str, why: str) -> DataFormatError:
        return DataFormatError(f"{where}: {field} {why}; the manifest was edited or damaged: build the data again")

    if not isinstance(m, dict) or m.get("format") != FORMAT or m.get("version") != VERSION or \
            m.get("complete") is not True:
        raise DataFormatError(f"{where} is not a complete {FORMAT} v{VERSION} manifest")
    sdir = m.get("shard_dir")
    if not isinstance(sdir, str) or not _SHARD_DIR.fullmatch(sdir):
        raise bad("shard_dir", f"is {sdir!r}, not the name of a shard folder inside the build (shards-<id>)")
    mode = m.get("mode")
    if mode not in MODE_FILES:
        raise bad("mode", f"is {mode!r}, not one of {', '.join(MODES)}")
    tdt = m.get("token_dtype")
    if tdt not in ("<u2", "<u4"):
        raise bad("token_dtype", f"is {tdt!r}, not <u2 or <u4")
    tok = m.get("tokenizer")
    if not isinstance(tok, dict):
        raise bad("tokenizer", "is not a table")
    vocab = tok.get("vocab_size")
    if not _count(vocab) or vocab > (65536 if tdt == "<u2" else 2**32):
        raise bad("tokenizer.vocab_size", f"is {vocab!r}, not a vocabulary size its token_dtype {tdt} can hold")
    for k in ("pad_id", "unk_id", "cls_id", "sep_id", "mask_id"):
        if not _count(tok.get(k), 0) or tok[k] >= vocab:
            raise bad(f"tokenizer.{k}", f"is {tok.get(k)!r}, not an id below vocab_size {vocab}")
    _check_settings(m.get("settings"), bad)
    required, optional = MODE_FILES[mode]
    entries = [("word_start", m.get("word_start"), "|u1")]
    shards = m.get("shards")
    if not isinstance(shards, list) or not shards:
        raise bad("shards", "is not a non-empty list")
    for i, s in enumerate(shards):
        files = s.get("files") if isinstance(s, dict) else None
        if not isinstance(files, dict) or not required <= set(files) <= required | optional:
            names = sorted(files) if isinstance(files, dict) else files
            raise bad(f"shards[{i}].files", f"is {names!r}, not the files of a {mode} build "
                      f"({', '.join(sorted(required))})")
        entries += [(f"{i:05d}.{k}", f, FILE_DTYPES[k] or tdt) for k, f in sorted(files.items())]
    for name, f, dtype in entries:
        field_ = f"shards[{int(name[:5])}].files.{name[6:]}" if name[0].isdigit() else name
        if not isinstance(f, dict):
            raise bad(field_, f"is {f!r}, not a file entry")
        if f.get("dtype") != dtype:
            raise bad(f"{field_}.dtype", f"is {f.get('dtype')!r}; this file holds {dtype}")
        if not _count(f.get("count"), 0):
            raise bad(f"{field_}.count", f"is {f.get('count')!r}, not a count")
        if f.get("bytes") != f["count"] * np.dtype(dtype).itemsize or not _count(f.get("bytes"), 0):
            raise bad(f"{field_}.bytes", f"is {f.get('bytes')!r}, not count {f['count']} x {np.dtype(dtype).itemsize} "
                      "bytes")
        if not isinstance(f.get("sha256"), str) or not _SHA256.fullmatch(f["sha256"]):
            raise bad(f"{field_}.sha256", f"is {f.get('sha256')!r}, not a sha256")
    if entries[0][1]["count"] != vocab:
        raise bad("word_start.count", f"is {entries[0][1]['count']}, not vocab_size {vocab}")
    return [(f"{sdir}/{name}.bin", f) for name, f, _ in entries]


def _count(value: object, low: int = 1) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _check_settings(settings: object, bad) -> None:  # noqa: ANN001
    """The build's settings as the flags that made them would be (the reader draws instances by them)."""
    if not isinstance(settings, dict):
        raise bad("settings", "is not a table")
    try:
        missing = [k for k in (*InstanceConfig.__dataclass_fields__, "seed") if k not in settings]
        if missing:
            raise UserError(f"lacks {', '.join(missing)}")
        InstanceConfig(**{k: settings[k] for k in InstanceConfig.__dataclass_fields__}).validate()
        seed = settings["seed"]
        if not _count(seed, SEED_BOUNDS["min"]) or seed > SEED_BOUNDS["max"]:
            raise UserError(f"--seed is {seed!r}, not a seed")
    except UserError as e:
        raise bad("settings", f"are not a build's ({e})") from None


def _check_contents(sdir: Path, m: dict, mpath: Path) -> None:
    """The offsets that index the token arrays start at 0, never decrease and end at those arrays' counts, so
    no instance reads past a memory map (checked on the files, a few small arrays read)."""
    pairs = {"dynamic": [("sent", "tokens", 0), ("doc", "sent", -1)],
             "static": [("offsets", "input_ids", 0), ("mask_offsets", "mask_pos", 0)]}[m["mode"]]
    for i, s in enumerate(m["shards"]):
        f = s["files"]
        for index, data, less in pairs:
            arr = memmap(sdir / f"{i:05d}.{index}.bin", f[index])
            end = f[data]["count"] + less
            if not len(arr) or arr[0] != 0 or arr[-1] != end or not _non_decreasing(arr):
                raise DataFormatError(f"{sdir / f'{i:05d}.{index}.bin'} does not index {f'{i:05d}.{data}.bin'} "
                                      f"({f[data]['count']} entries); the build is damaged: build the data again")
        if m["mode"] == "static":
            n = f["offsets"]["count"]
            if (f["sop"]["count"], f["type_split"]["count"], f["mask_offsets"]["count"], f["mask_ids"]["count"]) != \
                    (n - 1, n - 1, n, f["mask_pos"]["count"]):
                raise DataFormatError(f"{mpath}: shards[{i}]'s instance counts disagree; build the data again")
        elif "wstart" in f and f["wstart"]["count"] != f["tokens"]["count"]:
            raise DataFormatError(f"{mpath}: shards[{i}].files.wstart.count is not tokens.count; build the data again")


def _non_decreasing(arr: np.ndarray, block: int = 1 << 24) -> bool:
    """``arr`` never decreases, read in blocks (an offsets file of a large build is gigabytes)."""
    for i in range(0, max(len(arr) - 1, 0), block):
        if np.any(np.diff(arr[i : i + block + 1]) < 0):
            return False
    return True


def load_manifest(path: str | Path, verify: bool = False) -> dict:
    """The manifest of a finished build, its form checked (``shard_files``) and every shard file's size
    against it (and sha256 with ``verify``), before anything is memory-mapped."""
    root = Path(path)
    mpath = root / MANIFEST
    if not mpath.is_file():
        if not root.exists():
            from albertlm.files import no_such_folder

            raise DataFormatError(f"{no_such_folder(root)}; give the --out folder of an `albertlm data build`")
        texts = root.is_dir() and any(p.suffix in (".txt", ".jsonl", ".parquet") for p in root.iterdir())
        source = root if texts else "TEXT"  # a folder of text: the build that makes shards of it
        raise DataFormatError(f"no {MANIFEST} in {root}: not a finished albertlm data build; make one with "
                              f"`albertlm data build --input {source} --tokenizer TOKENIZER --out shards/NAME`"
                              + (" (a tokenizer: `albertlm tokenizer train`)" if texts else ""))
    try:
        m = json.loads(mpath.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise DataFormatError(f"unreadable manifest {mpath}: {e}") from e
    for name, f in shard_files(m, str(mpath)):
        p = root / name
        if not p.is_file() or p.stat().st_size != f["bytes"]:
            raise DataFormatError(f"shard file {p} is missing or has the wrong size (interrupted build?)")
        if verify and sha256(p) != f["sha256"]:
            raise DataFormatError(f"checksum mismatch in {p}: the file is damaged; build the data again")
    _check_contents(root / m["shard_dir"], m, mpath)
    return m


def memmap(path: Path, f: dict) -> np.ndarray:
    if f["count"] == 0:
        return np.zeros(0, dtype=np.dtype(f["dtype"]))
    return np.memmap(path, dtype=np.dtype(f["dtype"]), mode="r", shape=(f["count"],))
