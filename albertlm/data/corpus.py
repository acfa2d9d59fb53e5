"""Raw text -> documents: which input files, in which format, split into sentences, bounded in size.

Input is the classic pretraining format (one sentence per line, a blank line between documents), running
paragraphs, or JSON lines with a ``text`` field. Lines are read in bounded pieces, so a huge single line
never sits in one string; files are cut into byte chunks at document boundaries for parallel builds.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from albertlm.errors import DataError

INPUT_FORMATS = ("auto", "lines", "paragraphs", "jsonl")
INPUT_SUFFIXES = (".txt", ".jsonl", ".json", ".parquet")

# A physical line is read in pieces of at most this many bytes, so a 50 MB single line never sits in one
# Python string nor stalls the regexes; sentences longer than MAX_SENTENCE_CHARS are cut (counted).
MAX_LINE_BYTES = 1 << 20
# Beyond this a single physical line is junk (minified data, a dump), not prose: the rest is dropped.
MAX_PHYSICAL_LINE_BYTES = 4 << 20
MAX_SENTENCE_CHARS = 20_000

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# Sentence ends: CJK/ASCII !?; and 。 need no following space (Chinese has none); '.' must be followed by
# whitespace and not by a lower-case letter (keeps "e.g. this" and "3.5" together).
_SENT_END = re.compile(r"(?:[。！？；!?]+[”’」』）)\]\"']*|\.[”’\")\]']*(?=\s+(?![a-z])))\s*")
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


# ----------------------------------------------------------------------------------------------- reading


def resolve_inputs(inputs: list[str | Path], exclude: tuple[str, ...] = ()) -> list[Path]:
    """Files named or found (``*.txt``, ``*.jsonl``, ``*.json``, ``*.parquet``) in directories, and folders
    ``datasets`` saved (named, not searched for); sorted, deduplicated."""
    out: list[Path] = []
    for raw in inputs:
        p = Path(raw)
        if not p.exists():
            raise FileNotFoundError(f"input path does not exist: {p}")
        if p.is_dir() and not (p / "state.json").is_file():  # a folder of files, not a saved dataset
            found = sorted(
                q
                for q in p.rglob("*")
                if q.is_file() and q.suffix in INPUT_SUFFIXES and not any(q.match(x) for x in exclude)
            )
            if not found:
                raise DataError(f"no input files (*.txt, *.jsonl, *.parquet) in directory: {p}")
            out.extend(found)
        else:
            out.append(p)
    for p in out:
        if not os.access(p, os.R_OK):
            raise PermissionError(f"input file is not readable: {p}")
    return sorted(set(out), key=lambda q: str(q))


def looks_binary(path: Path, head_bytes: int = 8192) -> bool:
    """True for files that are not text: many NULs or control bytes, or mostly invalid UTF-8 at the start."""
    with open(path, "rb") as f:
        head = f.read(head_bytes)
    if not head:
        return False
    if head.count(b"\x00") > max(4, len(head) // 100):  # a stray NUL is repaired, not a binary file
        return True
    controls = sum(head.count(bytes([c])) for c in range(32) if c not in (9, 10, 12, 13, 27))
    if controls > len(head) // 10:
        return True
    return head.decode("utf-8", "replace").count("\ufffd") > len(head) // 10


def detect_format(path: Path) -> str:
    """``jsonl`` by extension or a leading '{'; otherwise the classic one-sentence-per-line format."""
    if path.suffix in (".jsonl", ".json"):
        return "jsonl"
    with open(path, "rb") as f:
        for raw in iter(lambda: f.readline(4096), b""):
            if raw.strip():
                return "jsonl" if raw.lstrip().startswith(b"{") else "lines"
    return "lines"


def split_sentences(text: str) -> list[str]:
    """Split running text at English and Chinese sentence ends (。！？!?； and '.' before a space)."""
    out, prev = [], 0
    for m in _SENT_END.finditer(text):
        s = text[prev : m.end()].strip()
        if s:
            out.append(s)
        prev = m.end()
    tail = text[prev:].strip()
    if tail:
        out.append(tail)
    return out


def cap_sentence(s: str, stats: Counter) -> list[str]:
    if len(s) <= MAX_SENTENCE_CHARS:
        return [s]
    stats["overlong_sentences_cut"] += 1
    return [s[i : i + MAX_SENTENCE_CHARS] for i in range(0, len(s), MAX_SENTENCE_CHARS)]


def clean_line(line: str) -> str:
    """Control characters (and a lone CR) become spaces; surrounding space goes."""
    line = _CONTROL.sub(" ", line).strip()
    return line.replace("\r", " ") if "\r" in line else line


def iter_lines(path: Path, start: int, end: int, stats: Counter) -> Iterator[str]:
    """Clean text lines of bytes [start, end): invalid UTF-8 replaced, NULs and control chars removed.

    Physical lines longer than MAX_LINE_BYTES come out in pieces cut at a UTF-8 character boundary;
    past MAX_PHYSICAL_LINE_BYTES the rest of the line is dropped (counted).
    """
    with open(path, "rb") as f:
        f.seek(start)
        pos, in_long_line, line_bytes = start, False, 0
        while pos < end:
            raw = f.readline(min(MAX_LINE_BYTES, end - pos))
            if not raw:
                break
            if in_long_line and line_bytes >= MAX_PHYSICAL_LINE_BYTES:
                stats["overlong_line_bytes_dropped"] += len(raw)
                pos += len(raw)
                in_long_line = not raw.endswith(b"\n")
                line_bytes = line_bytes if in_long_line else 0
                continue
            if not raw.endswith(b"\n") and pos + len(raw) < end:
                # a piece of an overlong line: back up to a character boundary, re-read the rest next
                cut = len(raw)
                while cut > 1 and (raw[cut - 1] & 0xC0) == 0x80:
                    cut -= 1
                if cut > 1 and raw[cut - 1] >= 0xC0:
                    cut -= 1
                if cut < len(raw):
                    raw = raw[:cut]
                    f.seek(pos + cut)
                if not in_long_line:
                    stats["overlong_lines_split"] += 1
                in_long_line = True
                line_bytes += len(raw)
            else:
                in_long_line, line_bytes = False, 0
            if pos == 0 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
                pos += 3
            pos += len(raw)
            if b"\x00" in raw:
                stats["nul_bytes_removed"] += raw.count(b"\x00")
                raw = raw.replace(b"\x00", b"")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                stats["invalid_utf8_lines"] += 1
                line = raw.decode("utf-8", "replace")
            if line.endswith("\r\n"):
                stats["crlf_lines"] += 1
            line = clean_line(line.rstrip("\r\n"))
            yield line


def iter_documents(
    path: Path, fmt: str, start: int = 0, end: int | None = None, stats: Counter | None = None
) -> Iterator[list[str]]:
    """Documents (lists of sentences) from bytes [start, end) of a file.

    ``lines``: one sentence per line, blank line between documents (the original's input, spec s6);
    ``paragraphs``: running text, each line split into sentences, blank line between documents;
    ``jsonl``: one document per line in its ``text`` field, split into sentences.
    """
    stats = Counter() if stats is None else stats
    end = path.stat().st_size if end is None else end
    doc: list[str] = []
    for line in iter_lines(path, start, end, stats):
        if fmt == "jsonl":
            if not line:
                continue
            try:
                text = json.loads(line)["text"]
                if not isinstance(text, str):
                    raise TypeError
            except (ValueError, KeyError, TypeError):
                stats["bad_json_lines"] += 1
                continue
            doc = [s for para in text.splitlines() for s in split_sentences(para)]
        elif not line:
            if doc:
                yield doc
            doc = []
            continue
        elif fmt == "lines" and len(line) <= MAX_SENTENCE_CHARS:
            doc.append(line)
            continue
        else:
            doc.extend(split_sentences(line))
        if fmt == "jsonl":
            doc = [p for s in doc for p in cap_sentence(s, stats)]
            if doc:
                yield doc
            doc = []
        else:
            doc[:] = [p for s in doc for p in cap_sentence(s, stats)]
    if doc:
        yield doc


def chunk_boundaries(path: Path, fmt: str, chunk_bytes: int) -> list[tuple[int, int]]:
    """Byte ranges of ~chunk_bytes, each starting right after a document boundary (a unit of work)."""
    size = path.stat().st_size
    cuts = [0]
    with open(path, "rb") as f:
        for target in range(chunk_bytes, size, chunk_bytes):
            if target <= cuts[-1]:
                continue
            f.seek(target)
            f.readline(MAX_LINE_BYTES)  # finish the partial line
            while True:
                raw = f.readline(MAX_LINE_BYTES)
                if not raw:
                    break
                # jsonl: every line ends a document; otherwise a blank line does
                if fmt == "jsonl" and raw.endswith(b"\n") or not raw.strip():
                    break
            pos = f.tell()
            if cuts[-1] < pos < size:
                cuts.append(pos)
    cuts.append(size)
    return list(zip(cuts[:-1], cuts[1:], strict=True))
