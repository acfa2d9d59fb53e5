"""CoNLL-style token tagging files, and the PKU People's Daily POS corpus -> character-level BIO NER.

CoNLL: one token per line, the token in the first column and its tag in the last, a blank line between
sentences, ``-DOCSTART-`` lines ignored.

PKU (``199801.txt``): ``word/tag`` separated by spaces, one paragraph per line, bracketed compounds
``[中国/ns 政府/n]nt`` in some releases. ``nr`` (person), ``ns`` (place) and ``nt`` (organisation) become
PER / LOC / ORG; a surname and given name are tagged as two ``nr`` words (``江/nr 泽民/nr``), so
consecutive ``nr`` words are one person, as in the usual conversion. Paragraphs are cut into sentences
at 。！？ so sequences fit in 128 tokens, and the split is by line number (contiguous blocks, so
neighbouring paragraphs of one article do not straddle train and test).
"""

from __future__ import annotations

import re
from pathlib import Path

from albertlm.tasks.examples import DataError, RowPolicy, TaggingExample, check_nonempty, read_lines

PKU_ENTITY = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
_SENT_END = frozenset("。！？")
_COMPOUND_END = re.compile(r"^(.*)\](\w+)$")


def read_conll(path: Path, policy: RowPolicy, token_col: int = 0, tag_col: int = -1) -> list[TaggingExample]:
    """Tokens from column ``token_col`` and tags from ``tag_col`` (0-based; negative counts from the end)."""
    need = max(token_col, tag_col, -token_col - 1, -tag_col - 1) + 1
    lines = read_lines(path)
    out: list[TaggingExample] = []
    words: list[str] = []
    tags: list[str] = []
    start = 1
    bad = False

    def flush(n: int) -> None:
        nonlocal words, tags, bad
        if words and not bad:
            out.append(TaggingExample(words, tags, f"{path}:{start}"))
        words, tags, bad = [], [], False

    for n, line in enumerate(lines, start=1):
        if not line.strip() or line.startswith("-DOCSTART-"):
            flush(n)
            start = n + 1
            continue
        cols = line.split()
        if len(cols) < max(2, need):
            policy.bad(path, n, f"expected 'token tag' ({max(2, need)} columns), found {line.strip()!r}")
            bad = True  # drop the whole sentence, not just the token: the tags would be misaligned
            continue
        words.append(cols[token_col])
        tags.append(cols[tag_col])
    flush(len(lines))
    if not any(line.strip() for line in lines):
        raise DataError(f"{path}: file is empty")
    return check_nonempty(path, out, policy)


def pku_line_to_bio(line: str) -> list[tuple[str, str]]:
    """One PKU paragraph -> [(character, BIO tag)]."""
    spans: list[tuple[str, str | None]] = []  # (text, entity type or None)
    compound: list[tuple[str, str]] | None = None
    for tok in line.split():
        if tok.startswith("[") and len(tok) > 1:
            compound, tok = [], tok[1:]
        m = _COMPOUND_END.match(tok)
        outer = None
        if m and compound is not None:
            tok, outer = m.group(1), m.group(2)
        word, _, pos = tok.rpartition("/")
        if not word:
            word, pos = tok, ""
        if compound is not None:
            compound.append((word, pos))
            if outer is not None:  # the bracket closes: one entity if the compound tag is one
                if outer in PKU_ENTITY:
                    spans.append(("".join(w for w, _ in compound), PKU_ENTITY[outer]))
                else:
                    spans.extend((w, PKU_ENTITY.get(p)) for w, p in compound)
                compound = None
            continue
        spans.append((word, PKU_ENTITY.get(pos)))
    if compound:  # unclosed bracket: keep the words
        spans.extend((w, PKU_ENTITY.get(p)) for w, p in compound)
    chars: list[tuple[str, str]] = []
    prev = None
    for text, ent in spans:
        for i, ch in enumerate(text):
            if ent is None:
                chars.append((ch, "O"))
            else:
                # surname + given name: a second nr word continues the person
                cont = i > 0 or (ent == "PER" and prev == "PER")
                chars.append((ch, f"{'I' if cont else 'B'}-{ent}"))
        prev = ent
    return chars


def pku_sentences(path: Path, lines: range | None = None) -> list[TaggingExample]:
    """Sentences of the given 1-based line numbers (all lines by default) as tagging examples."""
    text_lines = read_lines(path)
    out: list[TaggingExample] = []
    for n in lines or range(1, len(text_lines) + 1):
        chars = pku_line_to_bio(text_lines[n - 1])
        cur: list[tuple[str, str]] = []
        for ch, tag in chars:
            cur.append((ch, tag))
            if ch in _SENT_END:
                out.append(TaggingExample([c for c, _ in cur], [t for _, t in cur], f"{path}:{n}"))
                cur = []
        if cur:
            out.append(TaggingExample([c for c, _ in cur], [t for _, t in cur], f"{path}:{n}"))
    return out


def pku_split_lines(num_lines: int, split: str) -> range:
    """train = first 80 % of lines, dev = next 10 %, test = last 10 % (1-based line numbers)."""
    a, b = int(num_lines * 0.8), int(num_lines * 0.9)
    ranges = {"train": range(1, a + 1), "dev": range(a + 1, b + 1), "test": range(b + 1, num_lines + 1)}
    if split not in ranges:
        raise DataError(f"unknown split {split!r} for the PKU corpus; choose train, dev or test")
    return ranges[split]


def write_conll(examples: list[TaggingExample], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for ex in examples:
            f.writelines(f"{w} {t}\n" for w, t in zip(ex.words, ex.tags or ["O"] * len(ex.words), strict=True))
            f.write("\n")


def convert_pku(src: Path, out_dir: Path) -> dict[str, int]:
    """Write train.txt / dev.txt / test.txt (CoNLL, character per line) into ``out_dir``."""
    num_lines = len(read_lines(src))
    counts = {}
    for split in ("train", "dev", "test"):
        examples = pku_sentences(src, pku_split_lines(num_lines, split))
        write_conll(examples, out_dir / f"{split}.txt")
        counts[split] = len(examples)
    return counts
