"""Pretraining data on disk: memory-mapped shards, their parallel, atomic build, and the manifest.

Layout of a built directory (Megatron-style flat arrays, one shard per input file or file chunk)::

    manifest.json                     written last, atomically; readers accept nothing without it
    shards-<id>/word_start.bin        bool[vocab]: which token ids begin a word (spec s5)
    shards-<id>/00000.tokens.bin      dynamic: uint16/uint32 token ids of all sentences, back to back
    shards-<id>/00000.sent.bin        dynamic: int64 token offsets of sentences (S+1)
    shards-<id>/00000.doc.bin         dynamic: int64 sentence offsets of documents (D+1)
    shards-<id>/00000.wstart.bin      dynamic, Chinese whole-word masking only: uint8 per-token word starts
    shards-<id>/00000.input_ids.bin   static: masked sequences back to back, .offsets int64 (N+1),
                                      .type_split int32 (where token type 1 starts), .sop int8,
                                      .mask_pos int32 / .mask_ids token dtype / .mask_offsets int64

Dynamic mode stores token ids once and draws pairs and masks per epoch (no dupe_factor copies on disk);
static mode stores ``dupe_factor`` masked copies as the original did. Copy ``d`` of a static build equals
epoch ``d`` of a dynamic build of the same input and seed. Random-B segments come from any document of
the build (``DocumentPool``), so a static build masks in a second pass, once every shard is tokenized.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing as mp
import os
import shutil
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from albertlm.data.corpus import (
    INPUT_FORMATS,
    chunk_boundaries,
    detect_format,
    iter_documents,
    looks_binary,
    resolve_inputs,
)
from albertlm.data.instances import (
    DocumentEncoder,
    DocumentPool,
    InstanceConfig,
    SpecialIds,
    build_instance,
    import_jieba,
    plan_instances,
)
from albertlm.data.manifest import FORMAT, MANIFEST, MODES, VERSION, memmap, shard_files
from albertlm.data.tables import TABLE_FORMATS, TextColumns, iter_table_documents, table_bytes, table_format
from albertlm.errors import SEED_BOUNDS, UserError
from albertlm.files import local_path, publish, refuse_model_dir, staging_dir

_log = logging.getLogger(__name__)

# Written first into every build folder: a crashed build's leftovers (``.tmp-<id>``, or ``shards-<id>``
# renamed before its manifest) carry it, so the next build removes them and nothing it did not create.
BUILD_MARK = ".albertlm-build"
COMPATS = ("original", "transformers", "tokenizer")  # "tokenizer": the behaviour its albertlm_compat records


@dataclass(frozen=True)
class BuildSettings:
    """How ``build_dataset`` runs, beside the ``InstanceConfig`` of what it makes; its defaults are the
    function's, and the fields are the flags of ``albertlm data build``."""

    tokenizer_compat: str = field(default="original", metadata={"choices": COMPATS, "help": (
        "encode the text as google-research/albert did (original: ALBERT pretraining data), as transformers "
        "does, or as the tokenizer's albertlm_compat records")})  # fmt: skip
    mode: str = field(default="dynamic", metadata={"choices": MODES, "help": (
        "static: masked instances written once per dupe copy (the original); dynamic: token ids only, pairs and "
        "masks drawn fresh every epoch")})  # fmt: skip
    input_format: str = field(default="auto", metadata={"choices": INPUT_FORMATS, "help": (
        "auto: .jsonl/.json or lines starting with '{' are JSONL, else one sentence per line")})  # fmt: skip
    dupe_factor: int = field(default=1, metadata={"min": 1, "help": (
        "static mode: masked copies of the data (the original used 40)")})  # fmt: skip
    whole_word_zh: bool | None = field(default=None, metadata={"help": (
        "jieba whole-word masking for Chinese (default: on for wordpiece tokenizers)")})  # fmt: skip
    workers: int = field(default=1, metadata={"min": 1, "help": "worker processes (one unit per file chunk)"})
    chunk_mb: float = field(default=32.0, metadata={"above": 0, "help": "split input files into units of this size"})
    seed: int = field(default=12345, metadata={**SEED_BOUNDS, "help": "seed of every random choice"})

    @property
    def chunk_bytes(self) -> int:
        return max(1, int(self.chunk_mb * 2**20))

    @property
    def compat(self) -> str | None:
        """``build_dataset``'s ``compat``: None for the tokenizer's own behaviour."""
        return None if self.tokenizer_compat == "tokenizer" else self.tokenizer_compat


_DEFAULT = BuildSettings()


# ----------------------------------------------------------------------------------------------- writing


class _BinWriter:
    """Appends arrays of one dtype to a temp file, hashing as it goes; fsync on close."""

    def __init__(self, path: Path, dtype: np.dtype) -> None:
        self.path, self.dtype = path, np.dtype(dtype)
        self.f = open(path, "wb")
        self.sha = hashlib.sha256()
        self.count = 0

    def write(self, arr) -> None:
        b = np.ascontiguousarray(arr, dtype=self.dtype).tobytes()
        self.f.write(b)
        self.sha.update(b)
        self.count += len(b) // self.dtype.itemsize

    def close(self) -> dict:
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        return {
            "dtype": self.dtype.str,
            "count": self.count,
            "bytes": self.count * self.dtype.itemsize,
            "sha256": self.sha.hexdigest(),
        }


def tokenizer_info(tok) -> dict:
    return {
        "kind": tok.kind,
        "vocab_size": int(tok.vocab_size),
        "pad_id": int(tok.pad_id),
        "unk_id": int(tok.unk_id),
        "cls_id": int(tok.cls_id),
        "sep_id": int(tok.sep_id),
        "mask_id": int(tok.mask_id),
        "compat": tok.compat,
        "path": str(getattr(tok, "file", "") or ""),
        "fingerprint": vocab_fingerprint(tok),
    }


def vocab_fingerprint(tok) -> str:
    """sha256 of the pieces in id order: two tokenizers agree on what every id means iff these match."""
    pieces = tok.convert_ids_to_tokens(list(range(int(tok.vocab_size))))
    return hashlib.sha256("\n".join(pieces).encode("utf-8")).hexdigest()


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 65536 else np.uint32)


@dataclass(frozen=True)
class _Unit:
    index: int
    path: str
    fmt: str
    start: int
    end: int


# Set in the parent before the pool forks (or in-process): workers share the tokenizer and settings.
_JOB: dict = {}


def _build_unit(unit: _Unit) -> tuple[int, dict, dict]:
    """One shard's token arrays from one unit of work: stream its documents, encode in batches, write."""
    job = _JOB
    tdt = job["token_dtype"]
    stats: Counter = Counter()
    prefix = Path(job["tmp_dir"]) / f"{unit.index:05d}"
    encoder = DocumentEncoder(job["tokenizer"], job["whole_word_zh"])
    # dynamic files double as the static build's scratch space (removed after masking)
    w = {
        "tokens": _BinWriter(Path(f"{prefix}.tokens.bin"), tdt),
        "sent": _BinWriter(Path(f"{prefix}.sent.bin"), np.int64),
        "doc": _BinWriter(Path(f"{prefix}.doc.bin"), np.int64),
    }
    if job["whole_word_zh"]:
        w["wstart"] = _BinWriter(Path(f"{prefix}.wstart.bin"), np.uint8)
    n_tok, n_sent = 0, 0
    w["sent"].write([0])
    w["doc"].write([0])
    batch: list[list[str]] = []

    def flush() -> None:
        nonlocal n_tok, n_sent
        for sids, sflags in encoder.encode(batch):
            if not sids:
                stats["empty_documents"] += 1
                continue
            lens = np.fromiter((len(s) for s in sids), np.int64, len(sids))
            w["tokens"].write(np.concatenate(sids))
            w["sent"].write(n_tok + np.cumsum(lens))
            if sflags is not None:
                w["wstart"].write(np.concatenate(sflags))
            n_tok += int(lens.sum())
            n_sent += len(sids)
            w["doc"].write([n_sent])
            stats["documents"] += 1
            stats["sentences"] += len(sids)
            stats["single_sentence_documents"] += len(sids) == 1
        stats["tokens"] = n_tok
        batch.clear()

    if unit.fmt in TABLE_FORMATS:
        docs = iter_table_documents(Path(unit.path), unit.fmt, job["columns"], stats)
    else:
        docs = iter_documents(Path(unit.path), unit.fmt, unit.start, unit.end, stats)
    for doc in docs:
        batch.append(doc)
        if len(batch) >= 256:
            flush()
    flush()
    files = {k: v.close() for k, v in w.items()}
    stats["units"] = 1
    return unit.index, files, dict(stats)


def _open_scratch(tmp: str, files: list[dict]) -> list[dict[str, np.ndarray]]:
    return [
        {k: memmap(Path(tmp) / f"{i:05d}.{k}.bin", f) for k, f in fl.items()} for i, fl in enumerate(files)
    ]


def _write_static(shard: int) -> tuple[int, dict, dict]:
    """Mask ``dupe_factor`` copies of one shard's instances; copy d uses the epoch-d seeds. Runs once all
    shards are tokenized: random-B segments may come from any of them (read through memory maps)."""
    job = _JOB
    cfg: InstanceConfig = job["cfg"]
    tdt = job["token_dtype"]
    stats: Counter = Counter()
    prefix = Path(job["tmp_dir"]) / f"{shard:05d}"
    arrays = _open_scratch(job["tmp_dir"], job["scratch"])
    pool = DocumentPool([(a["sent"], a["doc"]) for a in arrays])
    flat, sent, doc, wst = (arrays[shard].get(k) for k in ("tokens", "sent", "doc", "wstart"))
    ids, vws = job["special"], job["word_start"]
    names = {
        "input_ids": tdt,
        "offsets": np.int64,
        "type_split": np.int32,
        "sop": np.int8,
        "mask_pos": np.int32,
        "mask_ids": tdt,
        "mask_offsets": np.int64,
    }
    w = {k: _BinWriter(Path(f"{prefix}.{k}.bin"), dt) for k, dt in names.items()}
    n_ids, n_masks = 0, 0
    w["offsets"].write([0])
    w["mask_offsets"].write([0])
    seed = job["seed"]
    for epoch in range(job["dupe_factor"]):
        plan = plan_instances(sent, doc, cfg, np.random.default_rng([seed, shard, epoch]), stats, pool, shard)
        for j, row in enumerate(plan):
            other = arrays[int(row[5])]
            item = build_instance(flat, row, wst, vws, cfg, ids, np.random.default_rng([seed, shard, epoch, j]),
                                  flat_b=other["tokens"], word_start_of_b=other.get("wstart"))
            x = item["input_ids"]
            w["input_ids"].write(x)
            n_ids += len(x)
            w["offsets"].write([n_ids])
            w["type_split"].write([int(row[1] - row[0]) + 2])
            w["sop"].write([item.get("sentence_order_label", 0)])
            w["mask_pos"].write(item["masked_positions"])
            w["mask_ids"].write(item["masked_labels"])
            n_masks += len(item["masked_positions"])
            w["mask_offsets"].write([n_masks])
            stats["sop_label_1"] += int(item.get("sentence_order_label", 0))
        stats["instances"] += len(plan)
    stats["instance_tokens"] += n_ids
    stats["masked_tokens"] += n_masks
    return shard, {k: v.close() for k, v in w.items()}, dict(stats)


def _run(fn, tasks: list, workers: int, done) -> None:
    """``fn`` over ``tasks`` in a fork pool (workers inherit ``_JOB``) or in-process; ``done`` gets results."""
    if workers > 1 and len(tasks) > 1:
        with mp.get_context("fork").Pool(min(workers, len(tasks))) as pool:
            for result in pool.imap_unordered(fn, tasks):
                done(result)
    else:
        for t in tasks:
            done(fn(t))


# ------------------------------------------------------------------------------------------------ build


def build_dataset(
    inputs: list[str | Path],
    tokenizer,
    out_dir: str | Path,
    *,
    compat: str | None = _DEFAULT.compat,
    mode: str = _DEFAULT.mode,
    cfg: InstanceConfig | None = None,
    dupe_factor: int = _DEFAULT.dupe_factor,
    whole_word_zh: bool | None = _DEFAULT.whole_word_zh,
    workers: int = _DEFAULT.workers,
    seed: int = _DEFAULT.seed,
    input_format: str = _DEFAULT.input_format,
    chunk_bytes: int = _DEFAULT.chunk_bytes,
    exclude: tuple[str, ...] = (),
    progress: bool = False,
    columns: TextColumns | None = None,
) -> dict:
    """Build shards from text files into ``out_dir``; returns the manifest (also written there last).

    ``whole_word_zh=None`` turns jieba whole-word masking on for character-level (wordpiece) tokenizers.
    ``compat`` is the tokenizer behaviour the text is encoded with: "original" (what ALBERT pretraining
    data is), "transformers", or None for the one the tokenizer records. Parquet / Arrow files and saved
    ``datasets`` folders among the inputs are read by ``columns`` (see albertlm.data.tables).
    """
    from albertlm.data.remote import is_remote

    out_dir = local_path(str(out_dir), "--out")  # a file:// URL is the folder it names
    if is_remote(out_dir):
        raise UserError(f"build_dataset writes a local folder, not {out_dir}: build inside "
                        "`with albertlm.data.remote.staged_upload(url) as folder:` (what `data build --out` does)")
    if compat is not None and compat != tokenizer.compat:
        tokenizer = tokenizer.with_compat(compat)
    cfg = cfg or InstanceConfig()
    cfg.validate()
    if mode not in MODES:
        raise UserError(f"--mode must be static or dynamic, got {mode!r}")
    if dupe_factor < 1:
        raise UserError(f"--dupe-factor must be >= 1, got {dupe_factor}")
    refuse_model_dir(out_dir, "shards get a folder of their own: choose another --out")
    _refuse_foreign_manifest(Path(out_dir))
    t0 = time.time()
    files = resolve_inputs(inputs, exclude)
    skipped: Counter = Counter()
    units = _plan(files, input_format, chunk_bytes, skipped)
    if not units:
        raise UserError(_no_text(files, skipped))
    if whole_word_zh is None:
        whole_word_zh = tokenizer.kind == "wordpiece"
    if whole_word_zh:
        import_jieba()  # missing, it fails here, before anything is written (the workers import it again)
    info = tokenizer_info(tokenizer)
    tdt = token_dtype(info["vocab_size"])
    out = Path(out_dir)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    build_id = uuid.uuid4().hex[:12]
    tmp = staging_dir(out, f".tmp-{build_id}", mark=BUILD_MARK)  # an empty mark: builds are byte-for-byte pure
    word_start = np.asarray(tokenizer.word_start_mask(), dtype=bool)
    ws_meta = _BinWriter(tmp / "word_start.bin", np.uint8)
    ws_meta.write(word_start)
    ws_meta = ws_meta.close()
    _JOB.clear()
    _JOB.update(
        cfg=cfg,
        mode=mode,
        tmp_dir=str(tmp),
        tokenizer=tokenizer,
        whole_word_zh=whole_word_zh,
        token_dtype=tdt,
        dupe_factor=dupe_factor,
        seed=seed,
        word_start=word_start,
        columns=columns or TextColumns(),
        special=SpecialIds(info["cls_id"], info["sep_id"], info["mask_id"], info["vocab_size"]),
    )
    try:
        results = _tokenize(units, workers, progress)
        if mode == "static":
            _mask(units, results, workers, progress, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        _JOB.clear()
    shards, stats = _shard_records(units, results, skipped)
    if not stats["tokens"]:  # only blank lines or markup: nothing to train on, so nothing is published
        shutil.rmtree(tmp, ignore_errors=True)
        if created:
            out.rmdir()
        raise UserError(_no_text(files, skipped))
    settings = {**cfg.to_dict(), "dupe_factor": dupe_factor, "whole_word_zh": whole_word_zh, "seed": seed,
                "input_format": input_format, "chunk_bytes": chunk_bytes}  # fmt: skip
    manifest = _manifest(mode, build_id, tdt, info, ws_meta, settings, files, stats, shards, time.time() - t0)
    _publish(out, tmp, manifest)
    return manifest


def _plan(files: list[Path], input_format: str, chunk_bytes: int, skipped: Counter) -> list[_Unit]:
    """The units of work: each input file cut at line boundaries into chunks of about ``chunk_bytes``;
    empty and binary files are counted in ``skipped`` (and named in a warning) instead."""
    units: list[_Unit] = []
    for p in files:
        if table := table_format(p):  # one unit: a document may span record batches
            units.append(_Unit(len(units), str(p), table, 0, table_bytes(p)))
            continue
        if p.stat().st_size == 0:
            skipped["empty_files"] += 1
            _log.warning("skipping empty file %s", p)
            continue
        if looks_binary(p):
            skipped["binary_files"] += 1
            _log.warning("skipping binary file %s", p)
            continue
        fmt = detect_format(p) if input_format == "auto" else input_format
        for s, e in chunk_boundaries(p, fmt, chunk_bytes):
            units.append(_Unit(len(units), str(p), fmt, s, e))
    return units


def _tokenize(units: list[_Unit], workers: int, progress: bool) -> dict[int, tuple[dict, dict]]:
    """Every unit tokenized into the staging folder (``_JOB`` holds the settings): {unit: (files, counts)}."""
    from tqdm import tqdm

    results: dict[int, tuple[dict, dict]] = {}
    total = sum(u.end - u.start for u in units)
    bar = tqdm(total=total, unit="B", unit_scale=True, desc="data build", disable=not progress)

    def tokenized(result: tuple[int, dict, dict]) -> None:
        idx, fl, st = result
        results[idx] = (fl, st)
        bar.update(units[idx].end - units[idx].start)

    # fork: workers inherit the tokenizer and settings; each unit is one task, in any order
    _run(_build_unit, units, workers, tokenized)
    bar.close()
    return results


def _mask(units: list[_Unit], results: dict[int, tuple[dict, dict]], workers: int, progress: bool,
          tmp: Path) -> None:  # fmt: skip
    """Static mode: each unit's token arrays -> its masked instances (``results`` updated in place); the
    token arrays were scratch space and go."""
    from tqdm import tqdm

    _JOB["scratch"] = [results[u.index][0] for u in units]
    bar = tqdm(total=len(units), unit="shard", desc="masking", disable=not progress)

    def masked(result: tuple[int, dict, dict]) -> None:
        idx, fl, st = result
        counts = Counter(results[idx][1])
        counts.update(st)
        results[idx] = (fl, dict(counts))
        bar.update(1)

    _run(_write_static, [u.index for u in units], workers, masked)
    bar.close()
    for i, fl in enumerate(_JOB["scratch"]):
        for k in fl:
            os.unlink(tmp / f"{i:05d}.{k}.bin")


def _shard_records(units: list[_Unit], results: dict[int, tuple[dict, dict]],
                   skipped: Counter) -> tuple[list[dict], Counter]:  # fmt: skip
    """The manifest's shard entries, in unit order, and the build's counts (what was skipped included)."""
    stats = Counter(skipped)
    shards = []
    for u in units:
        fl, st = results[u.index]
        stats.update(st)
        shards.append({"source": u.path, "start": u.start, "end": u.end, "format": u.fmt, "files": fl, "counts": st})
    stats["tokens"] = sum(s["counts"].get("tokens", 0) for s in shards)
    stats["bytes_written"] = sum(f["bytes"] for s in shards for f in s["files"].values())
    return shards, stats


def _manifest(mode: str, build_id: str, tdt: np.dtype, info: dict, ws_meta: dict, settings: dict,
              files: list[Path], stats: Counter, shards: list[dict], seconds: float) -> dict:  # fmt: skip
    return {
        "format": FORMAT,
        "version": VERSION,
        "complete": True,
        "mode": mode,
        "build_id": build_id,
        "shard_dir": f"shards-{build_id}",
        "token_dtype": tdt.str,
        "tokenizer": info,
        "word_start": ws_meta,
        "settings": settings,
        "inputs": [str(p) for p in files],
        "counts": dict(sorted(stats.items())),
        "shards": shards,
        "seconds": round(seconds, 3),
    }


def _publish(out: Path, tmp: Path, manifest: dict) -> None:
    """Swap the staged build in: the old manifest goes first, so a crash from here on leaves no readable
    half-state; the shards are renamed into place, the manifest written last; earlier builds go after."""
    old = [p for p in _previous_builds(out) if p != tmp]
    publish(tmp, out / manifest["shard_dir"], manifest=out / MANIFEST,
            text=json.dumps(manifest, indent=1, sort_keys=True))  # fmt: skip
    for p in old:
        _remove_build(p)


def _no_text(files: list[Path], skipped: Counter) -> str:
    why = ", ".join(f"{n} {k.replace('_files', '')}" for k, n in sorted(skipped.items()) if n)
    named = str(files[0]) + (f" and {len(files) - 1} more" if len(files) > 1 else "")
    return (f"no text to build from in {named}{f' ({why})' if why else ''}; give UTF-8 text, one sentence per "
            f"line, a blank line between documents")


def _remove_build(path: Path) -> None:
    """Delete a folder an earlier build made, its mark last: killed part-way, it is still known as ours."""
    for p in path.iterdir():
        if p.name != BUILD_MARK:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    (path / BUILD_MARK).unlink(missing_ok=True)
    shutil.rmtree(path, ignore_errors=True)


def _previous_builds(out: Path) -> list[Path]:
    """Folders earlier builds made in ``out``: any ``shards-*`` or ``.tmp-*`` folder holding ``BUILD_MARK``,
    and the shard folder the manifest names if it holds exactly the files that manifest lists, at their
    sizes (a build from before the mark existed). A folder of the user's is never among them, whatever an
    edited manifest names."""
    found = [p for pat in ("shards-*", ".tmp-*") for p in out.glob(pat) if (p / BUILD_MARK).is_file()]
    try:
        m = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
        listed = {name: f["bytes"] for name, f in shard_files(m, str(out / MANIFEST))}
    except (OSError, ValueError):
        return found
    named = out / m["shard_dir"]
    if named.is_dir() and not named.is_symlink() and named not in found:
        held = {f"{named.name}/{p.name}": p for p in named.iterdir()}
        if held.keys() == listed.keys() and all(p.is_file() and p.stat().st_size == listed[k] for k, p in held.items()):
            found.append(named)
    return found


def _refuse_foreign_manifest(out: Path) -> None:
    """A manifest.json in ``out`` that no build wrote is the user's: one line before anything is built."""
    path = out / MANIFEST
    if not path.exists():
        return
    try:
        ours = json.loads(path.read_text(encoding="utf-8")).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        ours = False
    if not ours:
        raise UserError(f"--out {out} holds a {MANIFEST} that no `albertlm data build` wrote; a build replaces only "
                        "its own: choose another --out (nothing was written)")
