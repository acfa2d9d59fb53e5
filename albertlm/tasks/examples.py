"""What every reader returns: one small dataclass per task kind, and the bad-row policy they share.

Each example keeps ``source`` ("file:line") so an error found later (an unknown label, say) can still
name where the row came from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from albertlm.errors import DataError


@dataclass
class TextExample:
    """Sentence or sentence-pair classification / regression (GLUE, CLUE, ChnSentiCorp)."""

    text_a: str
    text_b: str | None = None
    label: str | None = None  # label name as written in the file (a number string for regression)
    source: str = ""
    label_names: tuple[str, ...] | None = None  # the file's own classes in id order (a datasets ClassLabel), if any


@dataclass
class TaggingExample:
    """One sentence as words (characters for Chinese NER) with one tag per word."""

    words: list[str]
    tags: list[str] | None = None
    source: str = ""


@dataclass
class QAExample:
    """SQuAD / CMRC question over a context; ``answer_starts`` are character offsets into ``context``."""

    qid: str
    question: str
    context: str
    answers: list[str] = field(default_factory=list)
    answer_starts: list[int] = field(default_factory=list)
    is_impossible: bool = False
    source: str = ""


@dataclass
class ChoiceExample:
    """RACE-style multiple choice: context + question + one of ``options`` (index ``label``)."""

    context: str
    question: str
    options: list[str]
    label: int | None = None
    source: str = ""


Example = TextExample | TaggingExample | QAExample | ChoiceExample


MAX_JSON_DEPTH = 32  # how deep an input object may nest (the server's limit too)


def check_json(value: Any, limit: int = MAX_JSON_DEPTH) -> None:
    """ValueError (the reason) unless ``value`` (parsed JSON, or a string) nests at most ``limit`` deep and
    holds only Unicode text: a JSON escape (``"\\ud800"``) or an undecodable command-line byte can leave half
    a surrogate pair in a Python string, which no tokenizer takes."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > limit:
            raise ValueError(f"JSON nested deeper than {limit} levels; an input is a flat object")
        for text in (v,) if isinstance(v, str) else v if isinstance(v, dict) else ():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(f"a string holds a lone surrogate ({text[e.start]!r} at char {e.start}), not "
                                 "Unicode text; send valid UTF-8") from None
        if isinstance(v, dict):
            stack.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, depth + 1) for x in v)


def load_json_line(line: str) -> Any:
    """One line of JSON, checked by ``check_json``; ValueError saying why not (never RecursionError, never a
    lone surrogate passed on)."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e.msg} at char {e.pos})") from None
    except RecursionError:
        raise ValueError(f"JSON nested too deep to read; at most {MAX_JSON_DEPTH} levels") from None
    except ValueError as e:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise ValueError(f"JSON that cannot be read ({str(e).split(';')[0][:100]})") from None
    check_json(value)
    return value


class RowPolicy:
    """Raise on the first bad row (default), or count and skip it (``--skip-bad-rows``)."""

    def __init__(self, skip_bad_rows: bool = False):
        self.skip = skip_bad_rows
        self.skipped = 0
        self.first: str | None = None  # the first skipped row's message, for the summary

    def bad(self, path: Path | str, line: int | None, msg: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        self.refuse(DataError(f"{where}: {msg}"))

    def refuse(self, error: DataError) -> None:
        """A bad row whose ``error`` names its file and line already: raised, or counted and skipped."""
        if not self.skip:
            raise DataError(f"{error} (pass --skip-bad-rows to skip such rows)")
        self.skipped += 1
        self.first = self.first or str(error)


def check_nonempty(path: Path, examples: list, policy: RowPolicy) -> list:
    if not examples:
        extra = f" ({policy.skipped} bad rows skipped)" if policy.skipped else ""
        raise DataError(f"{path}: no examples found{extra}; is this the right file for the task?")
    return examples


def read_lines(path: Path) -> list[str]:
    """The file's lines. Split on "\\n" only: ``str.splitlines`` also breaks at U+2028 / U+0085, which
    occur inside FewCLUE IFLYTEK JSON strings and would cut a row in two."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # -sig: the MSR paraphrase files carry a BOM
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte {e.start}); convert the file to UTF-8") from None
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    return lines[:-1] if lines and lines[-1] == "" else lines


def json_objects(path: Path, lines: list[str], policy: RowPolicy) -> list[tuple[int, dict]]:
    """(line number, object) of every JSON-object line; blank lines are skipped, others go to ``policy``."""
    rows = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = load_json_line(line)
        except ValueError as e:
            policy.bad(path, n, str(e))
            continue
        if not isinstance(row, dict):
            policy.bad(path, n, f"expected a JSON object per line, found {type(row).__name__}")
            continue
        rows.append((n, row))
    return rows


def is_number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False
