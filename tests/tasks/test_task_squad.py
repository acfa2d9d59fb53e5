"""SQuAD windowing: gold answer text recovered exactly from token character offsets (real SQuAD and
CMRC examples), window layout and p_mask, and logits -> answer text."""

from __future__ import annotations

import numpy as np
import pytest

from albertlm.tasks import RowPolicy, get_task, read_split
from albertlm.tasks.squad import best_spans_v1, make_features, token_spans, word_bounds
from albertlm.tokenizer import load_tokenizer


def _round_trip(examples, tok, **kw):
    feats, dropped = make_features(examples, tok, training=True, **kw)
    exact = inside = total = 0
    for f in feats:
        if f.is_impossible:
            continue
        ex = examples[f.example_index]
        text = ex.context[f.token_spans[f.start_position][0] : f.token_spans[f.end_position][1]]
        total += 1
        exact += text == ex.answers[0]
        inside += ex.answers[0] in text
    return feats, dropped, exact, inside, total


def _squad_offsets(data, tok_dir, min_exact: float):
    tok = load_tokenizer(tok_dir)
    examples = read_split(get_task("squad"), data / "squad_v1.1", "dev", RowPolicy())[0][:600]
    ids, spans = token_spans(tok, examples[0].context)
    assert ids == tok.encode(examples[0].context, add_special_tokens=False)  # same ids as whole-text encoding
    feats, dropped, exact, inside, total = _round_trip(examples, tok, max_seq_length=384, doc_stride=128)
    assert dropped == 0 and total >= 0.98 * len(examples)
    assert inside == total  # every gold answer lies inside its token span
    assert exact / total > min_exact  # the rest are answers ending inside a piece ("4" of "49ers")


def _cmrc_offsets(data, tok_dir):
    tok = load_tokenizer(tok_dir)
    examples = read_split(get_task("cmrc2018"), data / "cmrc2018", "dev", RowPolicy())[0][:300]
    # short windows force many documents across several windows
    feats, dropped, exact, inside, total = _round_trip(examples, tok, max_seq_length=128, doc_stride=64)
    assert len(feats) > 2 * len(examples) and dropped <= 0.01 * len(examples)
    assert exact / total > 0.99 and inside == total


def test_squad_offsets_round_trip(data, en_tok_dir):
    _squad_offsets(data, en_tok_dir, 0.9)  # the slice is Super Bowl 50: "49ers", "24-10", denser than most


def test_cmrc_offsets_round_trip(data, zh_tok_dir):
    _cmrc_offsets(data, zh_tok_dir)


@pytest.mark.shared
def test_offsets_round_trip_on_600_squad_and_300_cmrc_questions(full_data, en_tok_dir, zh_tok_dir):
    _squad_offsets(full_data, en_tok_dir, 0.97)
    _cmrc_offsets(full_data, zh_tok_dir)


def test_window_layout_and_decoding(data, en_tok_dir):
    tok = load_tokenizer(en_tok_dir)
    ex = read_split(get_task("squad"), data / "squad_v1.1", "dev", RowPolicy())[0][0]
    feats, _ = make_features([ex], tok, max_seq_length=64, doc_stride=16, max_query_length=10, training=True)
    assert len(feats) > 3
    for f in feats:
        assert len(f.input_ids) <= 64 and f.input_ids[0] == tok.cls_id and f.input_ids[-1] == tok.sep_id
        n_q = f.token_type_ids.index(1)
        assert f.p_mask[0] == 0 and all(f.p_mask[1:n_q]) and not any(f.p_mask[n_q:-1]) and f.p_mask[-1] == 1
    # every document token is "max context" in exactly one window
    pos = {}
    for f in feats:
        for sp, mc in zip(f.token_spans, f.max_context, strict=True):
            if sp is not None and mc:
                pos[sp] = pos.get(sp, 0) + 1
    assert set(pos.values()) == {1}
    # logits peaked on the gold window's span decode to the gold text
    gold = next(f for f in feats if not f.is_impossible and f.max_context[f.start_position])
    start = [np.zeros(len(f.input_ids)) for f in feats]
    end = [np.zeros(len(f.input_ids)) for f in feats]
    i = feats.index(gold)
    start[i][gold.start_position] = end[i][gold.end_position] = 10.0
    assert best_spans_v1([ex], feats, start, end)[0].text == ex.answers[0]


def test_decoding_keeps_questions_apart_when_ids_repeat(data, en_tok_dir):
    """Spans come back in example order, not keyed by id: the server batches requests whose questions may
    share an id (each defaults to "input 0"), and each must get its own answer."""
    tok = load_tokenizer(en_tok_dir)
    ex = read_split(get_task("squad"), data / "squad_v1.1", "dev", RowPolicy())[0][0]
    feats, _ = make_features([ex, ex], tok, max_seq_length=64, doc_stride=16, max_query_length=10, training=True)
    start = [np.zeros(len(f.input_ids)) for f in feats]
    end = [np.zeros(len(f.input_ids)) for f in feats]
    for i, f in enumerate(feats):
        if f.example_index == 0 and not f.is_impossible and f.max_context[f.start_position]:
            start[i][f.start_position] = end[i][f.end_position] = 10.0  # only the first question finds the gold
    first, second = best_spans_v1([ex, ex], feats, start, end)
    assert first.text == ex.answers[0] and second.text != ex.answers[0]


@pytest.mark.parametrize("text, piece, word", [
    ("played in 2015.", "15", "2015"),            # a piece inside a number; the full stop stays out
    ("they were running, fast", "unn", "running"),
    ("Levi's Stadium", "evi", "Levi"),            # the apostrophe ends a word, as BERT's BasicTokenizer cuts
    ("(Santa Clara)", "anta Cl", "Santa Clara"),
    ("比赛在2015年举行", "201", "2015"),           # digits in Chinese text are one word
    ("比赛在2015年举行", "举", "举"),              # a CJK character is a word by itself
    ("a, b", ",", ","),
])  # fmt: skip
def test_word_bounds_widen_a_span_to_whole_words(text, piece, word):
    a = text.index(piece)
    s, e = word_bounds(text, a, a + len(piece))
    assert text[s:e] == word


def test_answers_are_whole_words_with_a_probability(data, en_tok_dir):
    """The best span's first piece sits inside a word: aligned, the answer is the word (the official evaluation
    reads whole words); --no-align-to-words gives the piece, as the original's predictions. The score is the
    product of the start and end softmax over the window's [CLS] and context tokens (HF's pipeline score)."""
    tok = load_tokenizer(en_tok_dir)
    ex = read_split(get_task("squad"), data / "squad_v1.1", "dev", RowPolicy())[0][0]
    feats, _ = make_features([ex], tok, max_seq_length=384, doc_stride=128, max_query_length=64)
    f = feats[0]
    # the first document token that continues a word (no "▁"): the span starts and ends there
    pos = next(t for t, (i, sp) in enumerate(zip(f.input_ids, f.token_spans, strict=True))
               if sp is not None and sp[0] > 0 and ex.context[sp[0] - 1].isalnum() and f.max_context[t])  # fmt: skip
    start, end = np.zeros(len(f.input_ids)), np.zeros(len(f.input_ids))
    start[pos] = end[pos] = 10.0
    piece = best_spans_v1([ex], feats, [start], [end], align_to_words=False)[0]
    word = best_spans_v1([ex], feats, [start], [end])[0]
    assert piece.text == ex.context[f.token_spans[pos][0] : f.token_spans[pos][1]]
    assert len(word.text) > len(piece.text) and piece.text in word.text and " " not in word.text
    assert ex.context[word.start : word.end] == word.text
    allowed = 1 + sum(sp is not None for sp in f.token_spans)  # [CLS] and the context tokens
    p = np.exp(10.0) / (np.exp(10.0) + allowed - 1)
    assert word.score == pytest.approx(p * p, rel=1e-9) and piece.score == word.score
