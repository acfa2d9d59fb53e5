"""Multiple-choice readers: RACE (one JSON object per file, or JSON lines) and FewCLUE CHID (idiom cloze).

RACE: ``{"article", "questions": [...], "options": [[...], ...], "answers": ["A", ...]}``; a question with a
``_`` blank gets the option substituted into the blank, as the original ALBERT ``race_utils`` does.
CHID: ``{"content" with "#idiom#", "candidates": [...], "answer": i}``; the blank becomes ``[MASK]`` and
the passage is cut around it so the blank survives truncation.
"""

from __future__ import annotations

import json
from pathlib import Path

from albertlm.tasks.examples import ChoiceExample, DataError, RowPolicy, check_nonempty, read_lines

CHID_CONTEXT_CHARS = 120  # characters kept on each side of the blank


def _race_rows(path: Path, policy: RowPolicy) -> list[tuple[dict, int | None]]:
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        raise DataError(f"{path}: file is empty")
    try:
        return [(json.loads(text), None)]
    except json.JSONDecodeError:
        pass
    rows = []
    for n, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            try:
                rows.append((json.loads(line), n))
            except json.JSONDecodeError as e:
                policy.bad(path, n, f"not valid JSON ({e.msg})")
    return rows


def read_race(path: Path, policy: RowPolicy) -> list[ChoiceExample]:
    """A RACE file, JSON-lines file, or a directory of them (``**/*.txt`` and ``**/*.json``, sorted)."""
    files = sorted([*path.rglob("*.txt"), *path.rglob("*.json")]) if path.is_dir() else [path]
    if not files:
        raise DataError(f"{path}: no RACE *.txt / *.json files inside")
    out: list[ChoiceExample] = []
    for f in files:
        for row, n in _race_rows(f, policy):
            try:
                article, qs, opts, answers = row["article"], row["questions"], row["options"], row["answers"]
            except (KeyError, TypeError):
                policy.bad(f, n, "missing article/questions/options/answers")
                continue
            for q, o, a in zip(qs, opts, answers, strict=False):
                if not isinstance(a, str) or len(a) != 1 or not 0 <= ord(a.upper()) - 65 < len(o):
                    policy.bad(f, n, f"answer {a!r} is not a letter naming one of {len(o)} options")
                    continue
                out.append(ChoiceExample(article, q, list(o), ord(a.upper()) - 65, f"{f}:{n or 1}"))
    return check_nonempty(path, out, policy)


def read_chid(path: Path, policy: RowPolicy) -> list[ChoiceExample]:
    out: list[ChoiceExample] = []
    lines = read_lines(path)
    if not any(line.strip() for line in lines):
        raise DataError(f"{path}: file is empty")
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            content, cands = row["content"], row["candidates"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            policy.bad(path, n, f"not a CHID row ({type(e).__name__}: {e})")
            continue
        i = content.find("#idiom#")
        if i < 0:
            policy.bad(path, n, "content has no #idiom# blank")
            continue
        left = content[max(0, i - CHID_CONTEXT_CHARS) : i]
        right = content[i + 7 : i + 7 + CHID_CONTEXT_CHARS].replace("#idiom#", "")
        answer = row.get("answer")
        if answer is not None and not (isinstance(answer, int) and 0 <= answer < len(cands)):
            policy.bad(path, n, f"answer {answer!r} is not an index into {len(cands)} candidates")
            continue
        out.append(ChoiceExample(left + "[MASK]" + right, "", list(cands), answer, f"{path}:{n}"))
    return check_nonempty(path, out, policy)


def option_text(ex: ChoiceExample, option: str) -> str:
    """The second segment for one option: the question with the blank filled, or question + option."""
    if "_" in ex.question:
        return ex.question.replace("_", option, 1)
    return f"{ex.question} {option}".strip()
