"""Your own data: the generic tasks ``classification``, ``regression``, ``tagging``, ``qa`` and ``choice`` read
a user's CSV, TSV, JSON lines, JSON or CoNLL file with the columns the user names (``UserData``), instead of a
benchmark's fixed layout.

    albertlm finetune --task classification --data reviews.csv --text-column review --label-column stars \\
        --model albert-base-v2 --out runs/mine

The format comes from ``--data-format``, else the file name, else the content:

- CSV (``.csv``, or sniffed by ``csv.Sniffer``): RFC 4180 quoting, so a field may hold the delimiter, quotes
  and line breaks; the delimiter is ``,`` (or ``;`` / ``|`` when sniffed).
- TSV (``.tsv`` / ``.tab``, or sniffed): tab-separated without quoting (the IANA TSV convention, and GLUE's:
  a field never holds a tab or a line break, and a bare ``"`` is text).
- JSON lines (``.jsonl`` / ``.ndjson``, or a first line that is an object): one object per line.
- JSON (``.json``, or content starting with ``[``): a list of objects; for ``qa``, SQuAD JSON.
- CoNLL (tagging's default for other names): a token and its tag per line, a blank line between sentences.

CSV and TSV: a first line is a header when the flags name columns found in it or it holds one of the
default column names; with columns given by index only, ``csv.Sniffer.has_header`` decides; ``--header`` /
``--no-header`` overrule. A column is a header name or a 0-based index; JSON fields are named.

Bad rows (a wrong number of fields, a missing field, an empty text, a label of another type than the
column's others, e.g. ``"n/a"`` among numbers) stop reading with the file and line, or are counted and
skipped under ``--skip-bad-rows``.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from albertlm.data.tables import table_records
from albertlm.errors import DataError
from albertlm.tasks import squad
from albertlm.tasks.examples import (
    ChoiceExample,
    RowPolicy,
    TaggingExample,
    TextExample,
    check_nonempty,
    is_number,
    json_objects,
)
from albertlm.tasks.tagging import read_conll

_log = logging.getLogger(__name__)

GENERIC = ("classification", "regression", "tagging", "qa", "choice")
FORMATS = ("csv", "tsv", "jsonl", "json", "conll", "parquet", "datasets")
SUFFIXES = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json",
            ".parquet": "parquet", ".conll": "conll", ".bio": "conll", ".iob": "conll"}  # fmt: skip
# a dataset folder instead of a file: the first of these names per split
SPLIT_FILES = {split: tuple(f"{stem}{ext}" for stem in stems for ext in (".csv", ".tsv", ".jsonl", ".json", ".txt"))
               for split, stems in (("train", ("train",)), ("dev", ("dev", "valid", "validation")),
                                    ("test", ("test",)))}  # fmt: skip

# the column a flag means when it is not given: the first of these names the file has
DEFAULT_NAMES = {
    "text": ("text", "sentence", "text_a", "sentence1", "review", "content", "question"),
    "pair": ("text_b", "sentence2"),
    "label": ("label", "labels", "class", "category", "target", "score"),
    "tokens": ("tokens", "words"),
    "tags": ("tags", "ner_tags", "labels", "label"),
    "question": ("question", "query"),
    "context": ("context", "article", "passage"),
    "options": ("options", "choices", "candidates"),
    "answer": ("label", "answer"),
}


@dataclass(frozen=True)
class UserData:
    """Where a generic task finds its fields in the user's files, and how they are read."""

    text_column: str | None = field(default=None, metadata={
        "help": "your data: the text column, a header name or 0-based index (tagging: the tokens; choice: the "
                "question) (default: text, sentence, text_a, sentence1, review, content or question)"})
    pair_column: str | None = field(default=None, metadata={
        "help": "your data: the second text of a sentence pair (default: text_b or sentence2 when present)"})
    label_column: str | None = field(default=None, metadata={
        "help": "your data: the label column; classification keeps its strings as label names, regression reads "
                "numbers, tagging a tag list, choice an option index, letter or text (default: label, ...)"})
    context_column: str | None = field(default=None, metadata={
        "help": "your data, choice: the passage shown with every option (default: context/article/passage)"})
    options_column: str | None = field(default=None, metadata={
        "help": "your data, choice: a list-valued field, or several columns joined by commas (default: options)"})
    data_format: str | None = field(default=None, metadata={
        "help": "your data: the file format (default: from the file name, else detected)", "choices": FORMATS})
    header: bool | None = field(default=None, metadata={
        "help": "your data: the first CSV/TSV line is a header (--no-header: it is data) (default: detected)"})
    dev_fraction: float = field(default=0.1, metadata={"above": 0, "max": 0.5,
        "help": "your data: with no dev file, hold out this share of the training rows (seeded by --seed)"})

    def given(self) -> dict[str, str]:
        """The column flags set, by flag name (for messages)."""
        return {f"--{k.replace('_', '-')}": v for k, v in vars(self).items() if k.endswith("_column") and v}


# --------------------------------------------------------------------------- format detection
def detect_format(path: Path, data: UserData, lines: str = "csv", one_object: bool = False) -> str:
    """``--data-format``, else the file name's, else the content's. ``lines``: what a reader of line-based
    text takes when the content is not JSON (``conll`` for tagging); ``one_object``: a file holding one JSON
    object is JSON (SQuAD), not one line of JSON lines."""
    if data.data_format:
        return data.data_format
    if path.is_dir() and (path / "state.json").is_file():  # a Dataset.save_to_disk folder
        return "datasets"
    if path.suffix.lower() in SUFFIXES:
        return SUFFIXES[path.suffix.lower()]
    head = _read_text(path)[:65536]
    first = head.lstrip()[:1]
    if first == "[" or (first == "{" and one_object):
        return "json"
    if first == "{":
        return "jsonl"
    if lines == "conll":
        return "conll"
    try:
        return "tsv" if csv.Sniffer().sniff(head, delimiters=",\t;|").delimiter == "\t" else "csv"
    except csv.Error:
        raise DataError(f"{path}: cannot tell the format (no delimiter found); pass --data-format") from None


def _read_text(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte {e.start}); convert the file to UTF-8") from None


# --------------------------------------------------------------------------- rows of a table
@dataclass
class Table:
    """A file's records: lists of fields (CSV/TSV) or objects (JSON), each with its line number."""

    path: Path
    fmt: str
    header: list[str] | None
    rows: list[tuple[int, Any]]
    width: int | None = None  # CSV/TSV: the number of fields every row must have (the header's, or the first row's)
    class_names: dict[str, list[str]] = field(default_factory=dict)  # Parquet / datasets: ClassLabel names by column

    def where(self, line: int | None) -> str:
        return f"{self.path}:{line}" if line is not None else str(self.path)

    def column(self, given: str | None, defaults: tuple[str, ...], flag: str, required: bool) -> Any:
        """A column key (an index for CSV/TSV, a name for JSON), or None when not given and not found."""
        if self.header is None and self.fmt in ("csv", "tsv"):  # headerless: indices only
            if given is None:
                if required:
                    raise DataError(f"{self.path}: no header line; name the column by index, e.g. {flag} 0")
                return None
            if not given.isdigit():
                raise DataError(f"{self.path}: no header line, so {flag} {given} must be a 0-based index "
                                "(or pass --header)")  # fmt: skip
            return self._index(int(given), flag)
        names = self.header if self.header is not None else _json_keys(self.rows)
        if given is not None:
            if given in names:
                return names.index(given) if self.header is not None else given
            if given.isdigit() and self.header is not None:
                return self._index(int(given), flag)
            raise DataError(f"{self.where(1 if self.header is not None else None)}: no column {given!r} for {flag} "
                            f"(the file has: {', '.join(names)})")  # fmt: skip
        found = next((n for n in defaults if n in names), None)
        if found is None:
            if required:
                raise DataError(f"{self.path}: none of the columns {', '.join(names)} is a default "
                                f"({', '.join(defaults)}); pass {flag} NAME")  # fmt: skip
            return None
        return names.index(found) if self.header is not None else found

    def _index(self, i: int, flag: str) -> int:
        if self.width is not None and i >= self.width:
            raise DataError(f"{self.path}: {flag} {i} is past the last column (the rows have {self.width} fields, "
                            f"numbered from 0)")  # fmt: skip
        return i

    def name(self, key: Any) -> str:
        if isinstance(key, int):
            return self.header[key] if self.header is not None and key < len(self.header) else f"#{key}"
        return str(key)


def _json_keys(rows: list[tuple[int, Any]]) -> list[str]:
    keys: dict[str, None] = {}
    for _, row in rows[:1000]:
        keys.update(dict.fromkeys(row))
    return list(keys)


def read_table(path: Path, data: UserData, policy: RowPolicy, task: str, names: tuple[str, ...]) -> Table:
    """Every record of ``path``; ``names`` are the column names the flags (or defaults) may mean, which
    decide whether a CSV/TSV first line is a header."""
    fmt = detect_format(path, data)
    if fmt in ("csv", "tsv"):
        return _read_delimited(path, fmt, data, policy, names)
    if fmt == "jsonl":
        return Table(path, fmt, None, _nonempty(path, json_objects(path, _read_text(path).split("\n"), policy)))
    if fmt == "json":
        return Table(path, fmt, None, _nonempty(path, _json_array(path, policy)))
    if fmt in ("parquet", "datasets"):  # rows numbered from 1, as lines are (a shard series: on through its files)
        rows, names = table_records(path, fmt)
        return Table(path, fmt, None, _nonempty(path, list(enumerate(rows, start=1))), class_names=names)
    raise DataError(f"{path}: {fmt} is not a table format; task {task} reads csv, tsv, jsonl, json, parquet or a "
                    "datasets folder")  # fmt: skip


def _nonempty(path: Path, rows: list) -> list:
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows


def _read_delimited(path: Path, fmt: str, data: UserData, policy: RowPolicy, names: tuple[str, ...]) -> Table:
    text = _read_text(path)
    csv.field_size_limit(max(csv.field_size_limit(), len(text)))  # a long document in one field is fine
    if fmt == "tsv":
        reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE)
    else:
        dialect: Any = "excel"
        if path.suffix.lower() != ".csv" or data.data_format == "csv":
            try:
                dialect = csv.Sniffer().sniff(text[:65536], delimiters=",;|")
            except csv.Error:
                dialect = "excel"
        reader = csv.reader(io.StringIO(text, newline=""), dialect)
    records: list[tuple[int, list[str]]] = []
    start = 1
    try:
        for fields in reader:
            if fields and any(f.strip() for f in fields):
                records.append((start, fields))
            start = reader.line_num + 1  # a quoted field may span lines: report the record's first line
    except csv.Error as e:
        raise DataError(f"{path}:{reader.line_num}: {e}; is --data-format right?") from None
    if not records:
        raise DataError(f"{path}: file is empty")
    first = [f.strip() for f in records[0][1]]
    header = data.header
    if header is None:
        if set(first) & {n for n in names if not n.isdigit()}:  # "1" names a column by index, not by name
            header = True
        else:
            try:
                header = csv.Sniffer().has_header(text[:65536])
            except csv.Error:
                header = False
    width = len(first)
    cols = first if header else None
    if header and len(set(first)) != len(first):
        dup = next(c for c, k in Counter(first).items() if k > 1)
        raise DataError(f"{path}:1: the header names column {dup!r} twice")
    rows = records[1:] if header else records
    return Table(path, fmt, cols, _nonempty(path, rows), width)


def _json_array(path: Path, policy: RowPolicy) -> list[tuple[int, dict]]:
    """A JSON list of objects, each with the line it starts on (``json`` alone does not tell)."""
    text = _read_text(path)
    dec = json.JSONDecoder()
    pos = len(text) - len(text.lstrip())
    if text[pos : pos + 1] != "[":
        raise DataError(f"{path}: expected a JSON list of objects ([{{...}}, ...])")
    pos += 1
    rows = []
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            break
        line = text.count("\n", 0, pos) + 1
        try:
            obj, pos = dec.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            policy.bad(path, line, f"expected an object in the list, found {_type(obj)}")
            continue
        rows.append((line, obj))
    return rows


def _type(v: Any) -> str:
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int | float):
        return "a number"
    return {str: "a string", list: "a list", dict: "an object", type(None): "null"}.get(type(v), type(v).__name__)


def _scalar_name(v: Any) -> str:
    """A JSON label as a label name: strings as they are, 1 -> "1", true -> "true"."""
    return v.strip() if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


# --------------------------------------------------------------------------- values of a row
class _Rows:
    """Field access shared by the readers: a missing or non-text field is a bad row."""

    def __init__(self, table: Table, policy: RowPolicy):
        self.t, self.policy = table, policy

    def get(self, n: int, row: Any, key: Any, what: str) -> Any:
        """The raw value, or raises _Bad."""
        if isinstance(row, list):
            return row[key]
        if key not in row:
            raise _Bad(f"no field {key!r} for the {what} (has {', '.join(map(str, row)) or 'none'})")
        return row[key]

    def text(self, n: int, row: Any, key: Any, what: str) -> str:
        v = self.get(n, row, key, what)
        if not isinstance(v, str):
            raise _Bad(f"the {what} ({self.t.name(key)}) is {_type(v)}, not a string")
        v = v.strip()
        if not v:
            raise _Bad(f"empty {what} in column {self.t.name(key)!r}")
        return v


class _Bad(Exception):
    pass


def _each(table: Table, policy: RowPolicy, build: Callable[[int, Any], Any]) -> list:
    out = []
    for n, row in table.rows:
        try:
            if table.width is not None and len(row) != table.width:
                origin = "header" if table.header is not None else "first row"
                raise _Bad(f"{len(row)} fields where the {origin} has {table.width}")
            out.append(build(n, row))
        except _Bad as e:
            policy.bad(table.path, n, str(e))
    return out


def _mixed_types(table: Table, policy: RowPolicy, column: str, items: list, type_of: Callable[[Any], str]) -> list:
    """Rows whose label has another type than most of the column's are bad rows (a shifted column, a
    "n/a" among numbers, 1 among "1"s): named with their line, or skipped."""
    types = Counter(type_of(x) for x in items)
    if len(types) < 2:
        return items
    common, _ = types.most_common(1)[0]
    out = []
    for x in items:
        k = type_of(x)
        if k != common:
            n = int(x.source.rsplit(":", 1)[1])
            policy.bad(table.path, n, f"label {x.label!r} is {k}, but the {column!r} column's labels are "
                                      f"{common} ({types[common]} of {len(items)} rows): mixed types")  # fmt: skip
            continue
        out.append(x)
    return out


# --------------------------------------------------------------------------- readers per generic task
def read_text(path: Path, data: UserData, policy: RowPolicy, regression: bool = False) -> list[TextExample]:
    """Classification / regression: a text (and a pair text) and a label per row."""
    given = tuple(c for c in (data.text_column, data.pair_column, data.label_column) if c)
    names = given + DEFAULT_NAMES["text"] + DEFAULT_NAMES["pair"] + DEFAULT_NAMES["label"]
    table = read_table(path, data, policy, "regression" if regression else "classification", names)
    text = table.column(data.text_column, DEFAULT_NAMES["text"], "--text-column", required=True)
    pair_defaults = DEFAULT_NAMES["pair"] if data.text_column is None else ()
    pair = table.column(data.pair_column, pair_defaults, "--pair-column", required=bool(data.pair_column))
    label = table.column(data.label_column, DEFAULT_NAMES["label"], "--label-column", required=bool(data.label_column))
    if label is not None and label in (text, pair):
        raise DataError(f"{path}: the label column {table.name(label)!r} is also a text column; pass --label-column")
    _log.info("%s (%s%s): text=%s%s, label=%s", path, table.fmt, ", header" if table.header else "",
              table.name(text), f", pair={table.name(pair)}" if pair is not None else "",
              table.name(label) if label is not None else "(none: unlabeled)")  # fmt: skip
    rows = _Rows(table, policy)
    raw_types: dict[str, str] = {}

    def build(n: int, row: Any) -> TextExample:
        a = rows.text(n, row, text, "text")
        b = rows.text(n, row, pair, "second text") if pair is not None else None
        y = None
        if label is not None:
            v = rows.get(n, row, label, "label")
            if isinstance(v, list | dict) or v is None:
                raise _Bad(f"the label ({table.name(label)}) is {_type(v)}")
            y = _scalar_name(v)
            if not y:
                raise _Bad(f"empty label in column {table.name(label)!r}")
            src = f"{path}:{n}"
            typed = table.fmt in ("json", "jsonl", "parquet", "datasets")  # values with their own types, not text
            raw_types[src] = _type(v) if typed else "a number" if is_number(y) else "a string"
            if regression and not is_number(y):
                raise _Bad(f"label {y!r} is not a number (regression needs numbers)")
        return TextExample(a, b, y, f"{path}:{n}", classes)

    classes = tuple(table.class_names[label]) if label in table.class_names and not regression else None
    out = _each(table, policy, build)
    if label is not None and not regression:
        out = _mixed_types(table, policy, table.name(label), out, lambda x: raw_types[x.source])
    return check_nonempty(path, out, policy)


def read_tagging(path: Path, data: UserData, policy: RowPolicy) -> list[TaggingExample]:
    """CoNLL (token and tag columns by index: first and last by default), or JSON(L) rows with a token
    list and a tag list of the same length."""
    fmt = detect_format(path, data, lines="conll")
    if fmt == "conll":
        for flag, v in (("--text-column", data.text_column), ("--label-column", data.label_column)):
            if v is not None and not v.lstrip("-").isdigit():
                raise DataError(f"{path}: a CoNLL file has no header, so {flag} {v} must be a column index")
        token_col = int(data.text_column) if data.text_column is not None else 0
        tag_col = int(data.label_column) if data.label_column is not None else -1
        return read_conll(path, policy, token_col, tag_col)
    names = tuple(c for c in (data.text_column, data.label_column) if c) + DEFAULT_NAMES["tokens"] + DEFAULT_NAMES[
        "tags"]  # fmt: skip
    table = read_table(path, data, policy, "tagging", names)
    if table.header is not None:
        raise DataError(f"{path}: tagging reads CoNLL, JSON lines or JSON (tokens and tags as lists), not {fmt}")
    tokens = table.column(data.text_column, DEFAULT_NAMES["tokens"], "--text-column", required=True)
    tags = table.column(data.label_column, DEFAULT_NAMES["tags"], "--label-column", required=bool(data.label_column))
    rows = _Rows(table, policy)

    def build(n: int, row: Any) -> TaggingExample:
        words = rows.get(n, row, tokens, "tokens")
        if not isinstance(words, list) or not words or not all(isinstance(w, str) and w.strip() for w in words):
            raise _Bad(f"{tokens!r} must be a non-empty list of non-empty strings")
        labels = None
        if tags is not None:
            labels = rows.get(n, row, tags, "tags")
            if not isinstance(labels, list) or not all(isinstance(t, str) and t for t in labels):
                raise _Bad(f"{tags!r} must be a list of tag strings")
            if len(labels) != len(words):
                raise _Bad(f"{len(words)} tokens but {len(labels)} tags")
        return TaggingExample([w.strip() for w in words], labels, f"{path}:{n}")

    return check_nonempty(path, _each(table, policy, build), policy)


def read_qa(path: Path, data: UserData, policy: RowPolicy) -> list:
    """SQuAD-format JSON (v1.1, or v2.0 when questions are marked impossible)."""
    if detect_format(path, data, one_object=True) != "json":
        raise DataError(f"{path}: qa reads SQuAD-format JSON ({{\"data\": [{{\"paragraphs\": ...}}]}})")
    return squad.read_squad(path, policy)


def read_choice(path: Path, data: UserData, policy: RowPolicy) -> list[ChoiceExample]:
    """A question, an optional context, the options (a list field, or several columns) and the answer
    (an option index, a letter A, B, ... or the option's text)."""
    opt_cols = [c.strip() for c in data.options_column.split(",")] if data.options_column else []
    given = tuple(c for c in (data.text_column, data.context_column, data.label_column, *opt_cols) if c)
    names = given + DEFAULT_NAMES["question"] + DEFAULT_NAMES["context"] + DEFAULT_NAMES["options"] + DEFAULT_NAMES[
        "answer"]  # fmt: skip
    table = read_table(path, data, policy, "choice", names)
    question = table.column(data.text_column, DEFAULT_NAMES["question"], "--text-column", required=False)
    context = table.column(data.context_column, DEFAULT_NAMES["context"], "--context-column",
                           required=bool(data.context_column))  # fmt: skip
    if len(opt_cols) > 1:
        options: Any = [table.column(c, (), "--options-column", required=True) for c in opt_cols]
    else:
        options = table.column(opt_cols[0] if opt_cols else None, DEFAULT_NAMES["options"], "--options-column",
                               required=True)  # fmt: skip
    answer = table.column(data.label_column, DEFAULT_NAMES["answer"], "--label-column",
                          required=bool(data.label_column))  # fmt: skip
    rows = _Rows(table, policy)
    width: list[int] = []

    def build(n: int, row: Any) -> ChoiceExample:
        if isinstance(options, list):
            opts = [rows.text(n, row, k, "option") for k in options]
        else:
            opts = rows.get(n, row, options, "options")
            if not isinstance(opts, list) or len(opts) < 2 or not all(isinstance(o, str) and o.strip() for o in opts):
                raise _Bad(f"{table.name(options)!r} must be a list of two or more non-empty strings")
        width.append(width[0] if width else len(opts))
        if len(opts) != width[0]:
            raise _Bad(f"{len(opts)} options, but the first row has {width[0]}")
        q = rows.text(n, row, question, "question") if question is not None else ""
        c = rows.text(n, row, context, "context") if context is not None else ""
        y = None
        if answer is not None:
            y = _choice_label(rows.get(n, row, answer, "answer"), opts)
        return ChoiceExample(c, q, list(opts), y, f"{path}:{n}")

    return check_nonempty(path, _each(table, policy, build), policy)


def _choice_label(v: Any, opts: list[str]) -> int:
    if isinstance(v, str):
        s = v.strip()
        if s.isdigit():
            v = int(s)
        elif len(s) == 1 and "A" <= s.upper() <= "Z":
            v = ord(s.upper()) - ord("A")
        elif s in opts:
            return opts.index(s)
        else:
            raise _Bad(f"answer {s!r} is neither an option index, a letter nor one of the options")
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < len(opts):
        raise _Bad(f"answer {v!r} is not an index into {len(opts)} options")
    return v


READERS: dict[str, Callable[[Path, UserData, RowPolicy], list]] = {
    "classification": read_text,
    "regression": lambda p, d, pol: read_text(p, d, pol, regression=True),
    "tagging": read_tagging,
    "qa": read_qa,
    "choice": read_choice,
}


def with_columns(task: Any, columns: dict[str, Any]) -> Any:
    """A generic task with ``columns`` (UserData fields: text_column, label_column, ...) over the ones it
    has; a registered task has its own file format, so any column setting for it is an error."""
    from dataclasses import fields, replace

    from albertlm.errors import UserError, flag_name

    known = {f.name: f for f in fields(UserData)}
    unknown = sorted(set(columns) - set(known))
    if unknown:
        raise UserError(f"unknown column settings {', '.join(unknown)}; the fields of UserData are "
                        f"{', '.join(known)}")  # fmt: skip
    if not task.generic:
        if columns:
            raise UserError(f"{flag_name(known[next(iter(columns))])} is for your own data (--task "
                            f"{', '.join(GENERIC)}); task {task.name} has its own file format")  # fmt: skip
        return task
    data = replace(task.columns, **columns)
    return replace(task, columns=data, reader=reader(task.name, data))


def reader(name: str, data: UserData) -> Callable[[Path, RowPolicy], list]:
    """The ``Task.reader`` of generic task ``name`` over the user's column choices."""
    read = READERS[name]

    def read_user_file(path: Path, policy: RowPolicy) -> list:
        if path.is_dir() and detect_format(path, data) != "datasets":
            raise DataError(f"{path} is a folder; give the file (or a folder with train.csv/.tsv/.jsonl/.json)")
        return read(path, data, policy)

    return read_user_file


def is_bio(tags: set[str]) -> bool:
    """Tags that are all O or B-/I-/E-/S- prefixed: entity F1 means something for them."""
    return all(t == "O" or (len(t) > 2 and t[1] == "-" and t[0] in "BIES") for t in tags)
