"""Corpora in tables: Parquet files, Arrow files and folders saved by ``datasets.Dataset.save_to_disk``.

``data build``, ``tokenizer train`` (and fine-tuning's own-data path, for Parquet) read them through pyarrow
and datasets, one record batch at a time, so memory stays bounded by a batch, not the corpus. A row's
``--text-column`` is

  - without ``--doc-column``: one document, its text split into sentences (as a JSON line's ``text``);
  - with ``--doc-column``: one sentence per line of its text, consecutive rows with the same id one
    document, exactly as the classic one-sentence-per-line text file with a blank line between documents
    (the same text either way gives the same shards and the same tokenizer, byte for byte).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from albertlm.errors import DataError, UserError

TABLE_SUFFIXES = {".parquet": "parquet", ".arrow": "arrow"}
TABLE_FORMATS = ("parquet", "arrow", "datasets")
BATCH_ROWS = 1024
_NO_ROW = object()


@dataclass(frozen=True)
class TextColumns:
    """Which columns of a table corpus hold the text and, where documents span rows, the document id."""

    text_column: str = field(default="text", metadata={
        "help": "Parquet / Arrow / datasets input: the column holding the text"})
    doc_column: str | None = field(default=None, metadata={
        "help": "Parquet / Arrow / datasets input: a document-id column; rows are then sentences and consecutive "
                "rows with one id a document (default: each row is a document)"})  # fmt: skip


def table_format(path: Path) -> str | None:
    """parquet / arrow by the file name; ``datasets`` for a folder ``save_to_disk`` wrote; None for text."""
    if path.is_dir():
        return "datasets" if (path / "state.json").is_file() and (path / "dataset_info.json").is_file() else None
    return TABLE_SUFFIXES.get(path.suffix.lower())


SPLIT_NAMES = {"train": ("train",), "dev": ("validation", "dev", "valid"), "test": ("test",)}
_SHARD = re.compile(r"^(?P<split>.+)-(?P<i>\d{5})-of-(?P<n>\d{5})\.parquet$")


def find_split(folder: Path, split: str) -> Path | None:
    """Where a folder laid out by ``datasets`` or the Hub keeps ``split`` (train, dev, test), or None:
    a ``DatasetDict.save_to_disk`` folder's split folder (dev: validation, dev or valid); a ``Dataset`` folder
    is the training data itself; a Hub-layout folder's Parquet files named by split (``data/train-00000-of-00002.
    parquet``, ``train.parquet``, ``train/*.parquet``, in ``data/`` or at the top), the first shard standing for
    its series (``parquet_series``)."""
    names = SPLIT_NAMES[split]
    if (folder / "dataset_dict.json").is_file():
        return next((folder / n for n in names if table_format(folder / n) == "datasets"), None)
    if table_format(folder) == "datasets":
        return folder if split == "train" else None
    for base in (folder / "data", folder):
        for n in names:
            if base.is_dir():
                found = sorted(base.glob(f"{n}-*.parquet")) or sorted(base.glob(f"{n}.parquet")) or sorted(
                    (base / n).glob("*.parquet"))  # fmt: skip
                if found:
                    return found[0]
    return None


def parquet_series(path: Path) -> list[Path]:
    """The files a Parquet path stands for: a shard named like ``train-00000-of-00003.parquet`` its whole series
    (all present, or one line naming the missing one), any other file itself."""
    m = _SHARD.match(path.name)
    if not m:
        return [path]
    n = int(m["n"])
    files = [path.with_name(f"{m['split']}-{i:05d}-of-{n:05d}.parquet") for i in range(n)]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise DataError(f"{path.parent}: the {m['split']} split has {n} shards but {missing[0]} is not there; "
                        "download the whole split")  # fmt: skip
    return files


def class_names(path: Path) -> dict[str, list[str]]:
    """The label names ``datasets`` keeps beside the data, by column: ``ClassLabel`` columns and lists of them (a
    tagging set's ``ner_tags``), from a saved folder's dataset_info.json or a Parquet file's schema metadata."""
    try:
        if path.is_dir():
            info = path / "dataset_info.json"
            features = json.loads(info.read_text(encoding="utf-8")).get("features") if info.is_file() else None
        else:
            import pyarrow.parquet as pq

            raw = (pq.read_schema(path).metadata or {}).get(b"huggingface")
            features = (json.loads(raw).get("info") or {}).get("features") if raw else None
    except (OSError, ValueError, AttributeError):
        return {}
    out = {}
    for column, f in (features or {}).items():
        inner = f.get("feature") if isinstance(f, dict) and "feature" in f else f
        if isinstance(inner, dict) and inner.get("_type") == "ClassLabel" and inner.get("names"):
            out[column] = [str(n) for n in inner["names"]]
    return out


@contextlib.contextmanager
def _reading(path: Path, fmt: str) -> Iterator[None]:
    """A Parquet / Arrow / ``datasets`` read whose failures end in one line naming ``path``: a missing reader
    names the extra, a damaged file says so; other errors pass through."""
    try:
        yield
    except ImportError as e:
        raise UserError(f"{path}: reading {fmt} needs {e.name}; pip install 'albertlm[corpora]'") from None
    except OSError as e:
        raise DataError(f"{path}: not a readable {fmt} file ({e})") from None
    except Exception as e:
        if type(e).__module__.startswith(("pyarrow", "datasets")):
            raise DataError(f"{path}: not a readable {fmt} file ({e})") from None
        raise


def table_records(path: Path, fmt: str) -> tuple[list[dict], dict[str, list[str]]]:
    """Every row of a Parquet file (its whole shard series) or a saved ``datasets`` folder as a dict, ClassLabel
    ids replaced by their names (-1, datasets' "no label", by None), and the names by column."""
    with _reading(path, fmt):
        if fmt == "datasets":
            import datasets

            ds = datasets.load_from_disk(str(path))
            if isinstance(ds, datasets.DatasetDict):
                raise DataError(f"{path} holds the splits {', '.join(ds)}: pass the folder as --data (train and "
                                f"validation are found by name) or one split's folder")  # fmt: skip
            rows, names = ds.to_list(), class_names(path)
        else:
            import pyarrow.parquet as pq

            rows, names = [], class_names(path)
            for file in parquet_series(path):
                source = pq.ParquetFile(file)
                rows += [r for g in range(source.num_row_groups) for r in source.read_row_group(g).to_pylist()]

    def name(column: str, v: Any) -> Any:
        classes = names[column]
        if isinstance(v, list):
            return [name(column, x) for x in v]
        if isinstance(v, int) and not isinstance(v, bool):
            return classes[v] if 0 <= v < len(classes) else None
        return v

    if names:
        rows = [{k: name(k, v) if k in names else v for k, v in r.items()} for r in rows]
    return rows, names


def table_bytes(path: Path) -> int:
    """The size on disk (a datasets folder: its files together), for progress bars."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def _batches(path: Path, fmt: str, columns: list[str]) -> Iterator[dict[str, list]]:
    with _reading(path, fmt):
        if fmt == "parquet":
            import pyarrow.parquet as pq

            source = pq.ParquetFile(path)
            names = source.schema_arrow.names
            _check_columns(path, columns, names)
            for batch in source.iter_batches(batch_size=BATCH_ROWS, columns=columns):
                yield batch.to_pydict()
        elif fmt == "arrow":
            import pyarrow as pa

            with pa.memory_map(str(path)) as f:
                try:
                    reader: Any = pa.ipc.open_stream(f)
                    batches = iter(reader)
                except pa.ArrowInvalid:
                    f.seek(0)
                    reader = pa.ipc.open_file(f)
                    batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
                _check_columns(path, columns, reader.schema.names)
                for batch in batches:
                    yield batch.select(columns).to_pydict()
        else:
            import datasets

            ds = datasets.load_from_disk(str(path))
            if isinstance(ds, datasets.DatasetDict):
                raise DataError(f"{path} holds the splits {', '.join(ds)}: pass one split's folder, e.g. "
                                f"{path / next(iter(ds))}")  # fmt: skip
            _check_columns(path, columns, ds.column_names)
            yield from ds.select_columns(columns).iter(batch_size=BATCH_ROWS)


def _check_columns(path: Path, wanted: list[str], names: list[str]) -> None:
    missing = [c for c in wanted if c not in names]
    if missing:
        flag = "--text-column" if missing[0] == wanted[0] else "--doc-column"
        raise DataError(f"{path}: no column {missing[0]!r} (it has {', '.join(names)}); pass {flag} NAME")


def iter_rows(path: Path, fmt: str, columns: TextColumns, stats: Counter) -> Iterator[tuple[Any, str]]:
    """(document id or the row's number, text) of every row with text; rows whose text is not a string are
    counted in ``stats["bad_rows"]``."""
    wanted = [columns.text_column] + ([columns.doc_column] if columns.doc_column else [])
    row = 0
    for batch in _batches(path, fmt, wanted):
        texts = batch[columns.text_column]
        ids = batch[columns.doc_column] if columns.doc_column else range(row, row + len(texts))
        for doc, text in zip(ids, texts, strict=True):
            row += 1
            if isinstance(text, str):
                yield doc, text
            elif text is not None:
                stats["bad_rows"] += 1


def iter_table_lines(path: Path, fmt: str, columns: TextColumns, stats: Counter) -> Iterator[str]:
    """The table as the classic text file would give it: lines, a blank line ("") between documents."""
    previous: Any = _NO_ROW
    for doc, text in iter_rows(path, fmt, columns, stats):
        if previous is not _NO_ROW and doc != previous:
            yield ""
        previous = doc
        yield from text.splitlines()


def iter_table_documents(path: Path, fmt: str, columns: TextColumns, stats: Counter) -> Iterator[list[str]]:
    """Documents (lists of sentences), cleaned and split as ``corpus.iter_documents`` does for text files."""
    from albertlm.data.corpus import MAX_SENTENCE_CHARS, cap_sentence, clean_line, split_sentences

    doc: list[str] = []
    if columns.doc_column is None:  # a row is a document: its text is running prose
        for _, text in iter_rows(path, fmt, columns, stats):
            doc = [p for para in text.splitlines() for s in split_sentences(clean_line(para))
                   for p in cap_sentence(s, stats)]  # fmt: skip
            if doc:
                yield doc
        return
    for line in iter_table_lines(path, fmt, columns, stats):
        line = clean_line(line)
        if not line:
            if doc:
                yield doc
            doc = []
        elif len(line) <= MAX_SENTENCE_CHARS:
            doc.append(line)
        else:  # as a text file's overlong line: split at sentence ends, then cut
            doc.extend(p for s in split_sentences(line) for p in cap_sentence(s, stats))
    if doc:
        yield doc
