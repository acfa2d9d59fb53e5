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


def table_bytes(path: Path) -> int:
    """The size on disk (a datasets folder: its files together), for progress bars."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def _batches(path: Path, fmt: str, columns: list[str]) -> Iterator[dict[str, list]]:
    try:
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
    except ImportError as e:
        raise UserError(f"{path}: reading {fmt} needs {e.name}; pip install 'albertlm[corpora]'") from None
    except OSError as e:
        raise DataError(f"{path}: not a readable {fmt} file ({e})") from None
    except Exception as e:
        if type(e).__module__.startswith(("pyarrow", "datasets")):
            raise DataError(f"{path}: not a readable {fmt} file ({e})") from None
        raise


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
