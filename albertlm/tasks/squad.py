"""Span QA (SQuAD v1.1 / v2.0, CMRC 2018): reading, character offsets of tokens, sliding windows, and
turning window logits back into answer text from the original context.

Windows follow the original BERT/ALBERT ``run_squad``: ``[CLS] question [SEP] doc-window [SEP]``, the
question cut to ``max_query_length`` tokens, windows of the document advancing by ``doc_stride``; a token
seen by several windows is scored only in the window where it has the most context on both sides.
``p_mask`` is 1 on the question and the separators and 0 on the document and on [CLS], which the
SQuAD 2.0 head of the original uses as the no-answer position.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from albertlm.tasks.examples import DataError, QAExample, RowPolicy, check_nonempty
from albertlm.tokenizer import SPIECE_UNDERLINE, Tokenizer


# --- reading ----------------------------------------------------------------------------------------
def read_squad(path: Path, policy: RowPolicy) -> list[QAExample]:
    """SQuAD JSON (v1.1 / v2.0, also CMRC's squad-style files) or CMRC's original list format."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    if isinstance(doc, list):  # CMRC 2018 original: [{context_text, qas: [{query_id, query_text, answers}]}]
        doc = {"data": [{"paragraphs": [_cmrc_paragraph(p) for p in doc]}]}
    if not isinstance(doc, dict) or "data" not in doc:
        raise DataError(f"{path}: expected SQuAD JSON with a top-level 'data' list")
    out: list[QAExample] = []
    for a, article in enumerate(doc["data"]):
        for p, para in enumerate(article.get("paragraphs", [])):
            context = para.get("context")
            where = f"data[{a}].paragraphs[{p}]"
            if not isinstance(context, str):
                policy.bad(path, None, f"{where}: no context string")
                continue
            for qa in para.get("qas", []):
                try:
                    qid, question = str(qa["id"]), qa["question"]
                except KeyError as e:
                    policy.bad(path, None, f"{where}: question without {e}")
                    continue
                impossible = bool(qa.get("is_impossible", False))
                answers = [] if impossible else qa.get("answers", [])
                texts = [x["text"] if isinstance(x, dict) else str(x) for x in answers]
                starts = [int(x.get("answer_start", -1)) if isinstance(x, dict) else -1 for x in answers]
                starts = [s if s >= 0 else context.find(t) for s, t in zip(starts, texts, strict=True)]
                out.append(QAExample(qid, question, context, texts, starts, impossible, f"{path}:{qid}"))
    return check_nonempty(path, out, policy)


def _cmrc_paragraph(p: dict) -> dict:
    qas = [
        {"id": q.get("query_id"), "question": q.get("query_text"), "answers": list(q.get("answers", []))}
        for q in p.get("qas", [])
    ]
    return {"context": p.get("context_text"), "qas": qas}


# --- character offsets ------------------------------------------------------------------------------
def token_spans(tokenizer: Tokenizer, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """Ids of ``text`` (no specials) and each token's ``[start, end)`` character span in ``text``.

    WordPiece and tokenizer.json: the ``tokenizers`` offsets (exact). SentencePiece: ``preprocess_text`` and the
    model both treat whitespace as a hard boundary, so each whitespace-separated word is encoded alone (same ids as
    encoding the whole text) and its pieces are aligned to the word's characters."""
    if hasattr(tokenizer, "tk"):  # a `tokenizers` pipeline (WordPiece, a tokenizer.json): its own offsets
        enc = tokenizer.tk.encode(text, add_special_tokens=False)
        return list(enc.ids), [tuple(o) for o in enc.offsets]
    words, starts = [], []
    i = 0
    for w in text.split():
        i = text.index(w, i)
        words.append(w)
        starts.append(i)
        i += len(w)
    ids: list[int] = []
    spans: list[tuple[int, int]] = []
    for w, s, w_ids in zip(words, starts, tokenizer.encode_batch(words), strict=True):
        pieces = tokenizer.convert_ids_to_tokens(w_ids)
        ids.extend(w_ids)
        spans.extend((s + a, s + b) for a, b in _align_word(w, pieces, tokenizer.unk_id, w_ids))
    return ids, spans


def _normalize_map(word: str) -> tuple[str, list[int]]:
    """ALBERT's preprocessing applied per character: the normalized word and, for each of its characters,
    the index of the original character it came from."""
    out, src = [], []
    for i, ch in enumerate(word):
        n = unicodedata.normalize("NFKD", ch) if not ch.isascii() else ch
        n = "".join(c for c in n if not unicodedata.combining(c)).lower()
        out.append(n)
        src.extend([i] * len(n))
    return "".join(out), src


def _align_word(word: str, pieces: list[str], unk_id: int, ids: list[int]) -> list[tuple[int, int]]:
    norm, src = _normalize_map(word)
    spans: list[tuple[int, int] | None] = []
    pos = 0
    for piece, i in zip(pieces, ids, strict=True):
        p = piece.replace(SPIECE_UNDERLINE, "").lower()
        k = -1 if i == unk_id or not p else norm.find(p, pos)
        if not p:
            spans.append((pos, pos))
        elif k < 0:
            spans.append(None)  # <unk> or a piece SentencePiece's own normalizer changed: resolved below
        else:
            spans.append((k, k + len(p)))
            pos = k + len(p)
    # an unresolved piece covers the gap up to the next resolved one
    for j, s in enumerate(spans):
        if s is None:
            lo = spans[j - 1][1] if j else 0
            hi = next((t[0] for t in spans[j + 1 :] if t is not None), len(norm))
            spans[j] = (lo, max(lo, hi))
    if not norm:
        return [(0, len(word))] * len(pieces)

    def to_orig(a: int, b: int) -> tuple[int, int]:
        if b <= a:
            x = src[a] if a < len(src) else len(word)
            return x, x
        return src[a], src[b - 1] + 1

    return [to_orig(a, b) for a, b in spans]  # type: ignore[misc]


# --- windows ----------------------------------------------------------------------------------------
@dataclass
class QAFeature:
    example_index: int
    input_ids: list[int]
    token_type_ids: list[int]
    p_mask: list[int]
    token_spans: list[tuple[int, int] | None]  # character span per token, None outside the document
    max_context: list[bool]  # per token: this window is the token's best-context window
    start_position: int = 0
    end_position: int = 0
    is_impossible: bool = False


def make_features(
    examples: list[QAExample],
    tokenizer: Tokenizer,
    max_seq_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
    training: bool = False,
) -> tuple[list[QAFeature], int]:
    """Windows for every example; in training, examples whose gold answer cannot be located in the
    context are dropped (the original does the same) and counted in the second return value."""
    feats: list[QAFeature] = []
    dropped = 0
    questions = tokenizer.encode_batch([ex.question for ex in examples])
    for ei, (ex, q_ids) in enumerate(zip(examples, questions, strict=True)):
        q_ids = q_ids[:max_query_length]
        doc_ids, spans = token_spans(tokenizer, ex.context)
        tok_start = tok_end = -1
        if training and not ex.is_impossible:
            if not ex.answers or ex.answer_starts[0] < 0:
                dropped += 1
                continue
            a0, a1 = ex.answer_starts[0], ex.answer_starts[0] + len(ex.answers[0])
            inside = [t for t, (s, e) in enumerate(spans) if e > a0 and s < a1]
            if not inside or ex.context[a0:a1] != ex.answers[0]:
                dropped += 1
                continue
            tok_start, tok_end = inside[0], inside[-1]
        max_doc = max_seq_length - len(q_ids) - 3
        if max_doc <= 0:
            raise DataError(f"{ex.source}: --max-seq-length {max_seq_length} leaves no room for the document")
        windows = []
        start = 0
        while True:
            length = min(len(doc_ids) - start, max_doc)
            windows.append((start, length))
            if start + length >= len(doc_ids):
                break
            start += min(length, doc_stride)
        for w, (ws, wl) in enumerate(windows):
            ids = [tokenizer.cls_id, *q_ids, tokenizer.sep_id, *doc_ids[ws : ws + wl], tokenizer.sep_id]
            n_q = len(q_ids) + 2
            types = [0] * n_q + [1] * (wl + 1)
            p_mask = [0] + [1] * (n_q - 1) + [0] * wl + [1]
            tspans: list[tuple[int, int] | None] = [None] * n_q + list(spans[ws : ws + wl]) + [None]
            maxc = [False] * n_q + [_is_max_context(windows, w, ws + t) for t in range(wl)] + [False]
            f = QAFeature(ei, ids, types, p_mask, tspans, maxc)
            if training:
                if ex.is_impossible or not (ws <= tok_start and tok_end < ws + wl):
                    f.is_impossible = True  # answer not in this window: point at [CLS]
                else:
                    f.start_position, f.end_position = tok_start - ws + n_q, tok_end - ws + n_q
            feats.append(f)
    return feats, dropped


def _is_max_context(windows: list[tuple[int, int]], cur: int, pos: int) -> bool:
    # original check_is_max_context: score = min(left, right) context + 0.01 * window length
    best, best_i = None, None
    for i, (s, n) in enumerate(windows):
        if not s <= pos < s + n:
            continue
        score = min(pos - s, s + n - 1 - pos) + 0.01 * n
        if best is None or score > best:
            best, best_i = score, i
    return best_i == cur


# --- logits -> answers ------------------------------------------------------------------------------
class Answer(NamedTuple):
    """A decoded span: its text and ``[start, end)`` character offsets in the context (None when no span
    qualifies, and then ``text`` is ""), with the span's probability (0 when none)."""

    text: str
    start: int | None
    end: int | None
    score: float


NO_SPAN = Answer("", None, None, 0.0)


def _is_word_char(ch: str) -> bool:
    """Part of a word as BERT's BasicTokenizer cuts words: letters, digits and combining marks; a CJK ideograph is
    a word by itself, and whitespace and punctuation end words."""
    cp = ord(ch)
    cjk = (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0xF900 <= cp <= 0xFAFF or 0x20000 <= cp <= 0x2FA1F)
    return not cjk and (ch.isalnum() or unicodedata.category(ch).startswith("M"))


def word_bounds(text: str, a: int, b: int) -> tuple[int, int]:
    """``[a, b)`` widened to the whole words it cuts into: a span whose first or last piece is part of a word
    ("15" of "2015", "ing" of "running") takes the rest of that word. Punctuation and CJK characters are words of
    their own, so "2015." stays "2015" and Chinese spans keep their characters."""
    if a < b:
        while a > 0 and _is_word_char(text[a]) and _is_word_char(text[a - 1]):
            a -= 1
        while b < len(text) and _is_word_char(text[b - 1]) and _is_word_char(text[b]):
            b += 1
    return a, b


def _answer(ex: QAExample, f: QAFeature, s: int, e: int, score: float, align_to_words: bool) -> Answer:
    a, b = f.token_spans[s][0], f.token_spans[e][1]
    if align_to_words:
        a, b = word_bounds(ex.context, a, b)
    return Answer(ex.context[a:b], a, b, score)


def _valid(f: QAFeature, s: int, e: int, max_answer_length: int) -> bool:
    n = len(f.input_ids)
    return (
        0 < s < n and 0 < e < n and f.token_spans[s] is not None and f.token_spans[e] is not None
        and f.max_context[s] and s <= e and e - s + 1 <= max_answer_length
    )  # fmt: skip


def _log_softmax(x: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    x = np.where(allowed, x.astype(np.float64), -np.inf)
    top = x.max()
    return x - top - np.log(np.exp(x - top).sum())


def best_spans_v1(
    examples: list[QAExample],
    features: list[QAFeature],
    start_logits: list[np.ndarray],
    end_logits: list[np.ndarray],
    n_best: int = 20,
    max_answer_length: int = 30,
    align_to_words: bool = True,
) -> list[Answer]:
    """SQuAD 1.1 head: the highest start+end logit span over all windows of each question (the original's
    choice), in example order (not keyed by id: two questions may share one, e.g. requests batched together by
    the server). Its score is a probability, as in HF's pipeline: softmax of the start and of the end logits over
    the window's [CLS] and context tokens, multiplied. ``align_to_words`` widens the span to whole words
    (``word_bounds``); without it the span ends where its pieces end, as the original's predictions do."""
    best: dict[int, tuple[float, QAFeature, int, int, np.ndarray, np.ndarray]] = {}
    for f, sl, el in zip(features, start_logits, end_logits, strict=True):
        n = len(f.input_ids)
        sl, el = sl[:n], el[:n]
        for s in np.argsort(sl)[::-1][:n_best]:
            for e in np.argsort(el)[::-1][:n_best]:
                if not _valid(f, int(s), int(e), max_answer_length):
                    continue
                score = float(sl[s] + el[e])
                if f.example_index not in best or score > best[f.example_index][0]:
                    best[f.example_index] = (score, f, int(s), int(e), sl, el)
    out = []
    for i, ex in enumerate(examples):
        if i not in best:
            out.append(NO_SPAN)
            continue
        _, f, s, e, sl, el = best[i]
        allowed = np.array([t == 0 or span is not None for t, span in enumerate(f.token_spans)])
        prob = float(np.exp(_log_softmax(sl, allowed)[s] + _log_softmax(el, allowed)[e]))
        out.append(_answer(ex, f, s, e, prob, align_to_words))
    return out


def best_spans_v2(
    examples: list[QAExample],
    features: list[QAFeature],
    start_top_log_probs: np.ndarray,
    start_top_index: np.ndarray,
    end_top_log_probs: np.ndarray,
    end_top_index: np.ndarray,
    cls_logits: np.ndarray,
    max_answer_length: int = 30,
    align_to_words: bool = True,
) -> tuple[list[Answer], list[float]]:
    """SQuAD 2.0 head: best beam span per question (its probability: the exp of the head's start and end
    log-probabilities), and its null score (the smallest answerability logit over the question's windows, as the
    original's ``score_null``), both in example order; ``align_to_words`` as in ``best_spans_v1``."""
    best: dict[int, tuple[float, QAFeature, int, int]] = {}
    null: dict[int, float] = {}
    for fi, f in enumerate(features):
        null[f.example_index] = min(null.get(f.example_index, float("inf")), float(cls_logits[fi]))
        k = start_top_index.shape[1]
        for i in range(k):
            s = int(start_top_index[fi, i])
            for j in range(end_top_index.shape[2]):
                e = int(end_top_index[fi, i, j])
                if not _valid(f, s, e, max_answer_length):
                    continue
                score = float(start_top_log_probs[fi, i] + end_top_log_probs[fi, i, j])
                if f.example_index not in best or score > best[f.example_index][0]:
                    best[f.example_index] = (score, f, s, e)
    answers = [NO_SPAN if i not in best else _answer(ex, best[i][1], best[i][2], best[i][3],
                                                       float(np.exp(best[i][0])), align_to_words)
               for i, ex in enumerate(examples)]  # fmt: skip
    return answers, [null.get(i, 0.0) for i in range(len(examples))]
