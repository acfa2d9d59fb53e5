"""Readers for sentence(-pair) classification files: GLUE TSV (with or without a header), MRPC's MSR
files, MNLI as parallel s1/s2/labels files, CLUE / FewCLUE JSON lines, CLUE and ChnSentiCorp TSV.

A format is described by column names (header files) or positions (headerless files); one reader
handles all of them so the bad-row handling is written once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from albertlm.tasks.examples import DataError, RowPolicy, TextExample, check_nonempty, json_objects, read_lines


@dataclass(frozen=True)
class Columns:
    """Where text_a / text_b / label live. Names are tried against a header line (first match wins);
    ``positions`` (a, b, label) are used when the first line is not a header."""

    a: tuple[str, ...]
    b: tuple[str, ...] = ()
    label: tuple[str, ...] = ("label",)
    positions: tuple[int, int | None, int | None] | None = None


def read_tsv(path: Path, cols: Columns, policy: RowPolicy) -> list[TextExample]:
    """GLUE-style TSV: tab-separated, no quoting (GLUE sentences contain bare quotes)."""
    lines = read_lines(path)
    if not lines or not any(line.strip() for line in lines):
        raise DataError(f"{path}: file is empty")
    # the MSR files' BOM was encoded twice ("ï»¿"): strip both spellings
    header = [h.strip().lstrip("\ufeffï»¿") for h in lines[0].split("\t")]
    names = set(cols.a) | set(cols.b) | set(cols.label)
    if names & set(header):
        idx_a = _find(header, cols.a)
        if idx_a is None:
            raise DataError(f"{path}:1: header has no text column (looked for {'/'.join(cols.a)}); got {header}")
        idx_b = _find(header, cols.b) if cols.b else None
        if cols.b and idx_b is None:
            raise DataError(f"{path}:1: header has no second-text column ({'/'.join(cols.b)}); got {header}")
        idx_label = _find(header, cols.label)  # None: an unlabeled test file
        start = 1
    elif cols.positions is not None:
        idx_a, idx_b, idx_label = cols.positions
        # a headerless test file drops the label column: decide from the first row
        if idx_label is not None and len(lines[0].split("\t")) <= idx_label:
            idx_label = None
        start = 0
    else:
        raise DataError(f"{path}:1: expected a header naming {'/'.join(cols.a)}, got {header}")
    need = max(i for i in (idx_a, idx_b, idx_label) if i is not None) + 1
    out: list[TextExample] = []
    for n, line in enumerate(lines[start:], start=start + 1):
        if not line.strip():
            continue
        f = line.split("\t")
        if len(f) < need:
            policy.bad(path, n, f"expected at least {need} tab-separated columns, found {len(f)}")
            continue
        label = f[idx_label].strip() if idx_label is not None else None
        if label == "-1":  # the HF GLUE export marks unlabeled test rows with -1
            label = None
        if idx_label is not None and label == "":
            policy.bad(path, n, "empty label")
            continue
        out.append(
            TextExample(f[idx_a].strip(), f[idx_b].strip() if idx_b is not None else None, label, f"{path}:{n}")
        )
    return check_nonempty(path, out, policy)


def _find(header: list[str], names: tuple[str, ...]) -> int | None:
    for name in names:
        if name in header:
            return header.index(name)
    return None


def read_jsonl(path: Path, cols: Columns, policy: RowPolicy) -> list[TextExample]:
    """CLUE JSON lines; a list-valued field (CSL keywords) is joined with a comma."""
    lines = read_lines(path)
    if not any(line.strip() for line in lines):
        raise DataError(f"{path}: file is empty")
    out: list[TextExample] = []
    for n, row in json_objects(path, lines, policy):
        a = _field(row, cols.a)
        b = _field(row, cols.b) if cols.b else None
        if a is None or (cols.b and b is None):
            want = "/".join(cols.a) if a is None else "/".join(cols.b)
            policy.bad(path, n, f"missing field {want} (has {sorted(row)})")
            continue
        label = _field(row, cols.label)
        out.append(TextExample(a, b, None if label in (None, "", "-1") else label, f"{path}:{n}"))
    return check_nonempty(path, out, policy)


def _field(row: dict, names: tuple[str, ...]) -> str | None:
    for name in names:
        if name in row and row[name] is not None:
            v = row[name]
            return ",".join(map(str, v)) if isinstance(v, list) else str(v)
    return None


def read_parallel(directory: Path, policy: RowPolicy) -> list[TextExample]:
    """MNLI as three line-aligned files ``s1.*``, ``s2.*``, ``labels.*`` (the robust-nli release)."""
    files = {}
    for stem in ("s1", "s2", "labels"):
        found = sorted(directory.glob(f"{stem}.*"))
        if not found:
            raise DataError(f"{directory}: no {stem}.* file (expected s1.*, s2.*, labels.*)")
        files[stem] = found[0]
    s1, s2, labels = (read_lines(files[k]) for k in ("s1", "s2", "labels"))
    if not (len(s1) == len(s2) == len(labels)):
        raise DataError(
            f"{directory}: s1/s2/labels have {len(s1)}/{len(s2)}/{len(labels)} lines; they must be line-aligned"
        )
    out = []
    for n, (a, b, y) in enumerate(zip(s1, s2, labels, strict=True), start=1):
        if not a.strip() or not y.strip():
            policy.bad(files["s1"] if not a.strip() else files["labels"], n, "empty line")
            continue
        out.append(TextExample(a.strip(), b.strip(), y.strip(), f"{files['s1']}:{n}"))
    return check_nonempty(directory, out, policy)


def read_cluewsc(path: Path, policy: RowPolicy) -> list[TextExample]:
    """CLUEWSC: does the pronoun (span2) refer to span1? The spans are marked in the text the way the
    CLUE baseline does it (``_span1_`` and ``[span2]``), and the question is the second segment."""
    out = []
    for n, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            t, text = row["target"], row["text"]
            i1, i2, s1, s2 = t["span1_index"], t["span2_index"], t["span1_text"], t["span2_text"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            policy.bad(path, n, f"not a CLUEWSC row ({type(e).__name__}: {e})")
            continue
        if text[i1 : i1 + len(s1)] != s1 or text[i2 : i2 + len(s2)] != s2:
            policy.bad(path, n, "span index does not match span text")
            continue
        marks = sorted([(i1, len(s1), "_"), (i2, len(s2), "[")], reverse=True)
        for i, length, m in marks:  # right to left so the earlier index stays valid
            close = "]" if m == "[" else "_"
            text = text[:i] + m + text[i : i + length] + close + text[i + length :]
        label = row.get("label")
        out.append(TextExample(text, f"{s2}指的是{s1}", None if label in (None, "") else str(label), f"{path}:{n}"))
    return check_nonempty(path, out, policy)
