"""Instance creation and n-gram masking against spec section 6, on slices of the real corpora."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from shared_data import CORPUS, corpus_slice

from albertlm.data import (
    DocumentEncoder,
    InstanceConfig,
    SpecialIds,
    build_instance,
    iter_documents,
    ngram_probs,
    plan_instances,
    split_sentences,
)


@pytest.fixture(scope="module")
def en(tmp_path_factory):
    from albertlm.data.tokenizer_training import train_sentencepiece

    d = tmp_path_factory.mktemp("en")
    text = d / "en.txt"  # the three English slices, ~110 kB of Wikipedia, WikiText and news
    text.write_bytes(b"".join((CORPUS / "en" / f).read_bytes()
                              for f in ("wikitext2.txt", "enwiki_excerpt.txt", "lee_background.txt")))
    tok = train_sentencepiece([text], d / "tok", vocab_size=1500, num_threads=1)
    return tok, text


@pytest.fixture(scope="module")
def zh(tmp_path_factory):
    from albertlm.data.tokenizer_training import train_wordpiece

    d = tmp_path_factory.mktemp("zh")
    text = corpus_slice("zh", "peoples_daily_199801.txt", 200_000, d / "zh.txt")
    return train_wordpiece([text], d / "tok", vocab_size=3000), text


def encode_corpus(tok, path: Path, whole_word_zh: bool = False):
    """Flat token array, sentence and document offsets, per-token word-start flags (as a shard holds)."""
    docs = list(iter_documents(path, "lines"))
    flat, sent, doc, flags = [], [0], [0], []
    for sids, sflags in DocumentEncoder(tok, whole_word_zh).encode(docs):
        for k, s in enumerate(sids):
            flat.append(s)
            sent.append(sent[-1] + len(s))
            if sflags is not None:
                flags.append(sflags[k])
        doc.append(len(sent) - 1)
    flags_arr = np.concatenate(flags).astype(bool) if flags else None
    return np.concatenate(flat), np.array(sent), np.array(doc), flags_arr


def specials(tok) -> SpecialIds:
    return SpecialIds(tok.cls_id, tok.sep_id, tok.mask_id, tok.vocab_size)


def doc_of(token_pos: np.ndarray, sent: np.ndarray, doc: np.ndarray) -> np.ndarray:
    s = np.searchsorted(sent, token_pos, side="right") - 1
    return np.searchsorted(doc, s, side="right") - 1


def test_split_sentences_english_and_chinese():
    assert split_sentences("It rained. Then it stopped! Why? e.g. this stays 3.5 long.") == [
        "It rained.",
        "Then it stopped!",
        "Why?",
        "e.g. this stays 3.5 long.",
    ]
    assert split_sentences("今天下雨了。明天呢？“好！”他说") == ["今天下雨了。", "明天呢？", "“好！”", "他说"]


def test_ngram_probs_match_spec():
    np.testing.assert_allclose(ngram_probs(3), [6 / 11, 3 / 11, 2 / 11])


def test_sop_pairs_balanced_and_really_swapped(en):
    tok, text = en
    flat, sent, doc, _ = encode_corpus(tok, text)
    cfg = InstanceConfig(max_seq_length=128, single_sentence_random_b=False)
    plan = plan_instances(sent, doc, cfg, np.random.default_rng(0))
    a0, a1, b0, b1, label, _ = plan.T
    assert len(plan) > 200 and np.all(a1 > a0) and np.all(b1 > b0)
    assert np.all((a1 - a0) + (b1 - b0) <= cfg.max_seq_length - 3)
    n1 = int(label.sum())
    assert abs(n1 - len(plan) / 2) < 4 * np.sqrt(len(plan) / 4)  # binomial, 4 sigma
    same_doc = doc_of(a0, sent, doc) == doc_of(b0, sent, doc)
    assert same_doc.all()  # SOP never leaves the document
    assert np.all(a1[label == 0] <= b0[label == 0])  # kept order: A precedes B in the source
    assert np.all(b1[label == 1] <= a0[label == 1])  # swapped: B (the earlier text) comes second


def test_single_sentence_chunk_quirk_takes_random_document(en):
    tok, text = en
    flat, sent, doc, _ = encode_corpus(tok, text)
    cfg = InstanceConfig(max_seq_length=64)  # short target: long sentences become one-sentence chunks
    stats = Counter()
    plan = plan_instances(sent, doc, cfg, np.random.default_rng(0), stats)
    assert stats["single_sentence_chunks_random_b"] > 0
    other = doc_of(plan[:, 0], sent, doc) != doc_of(plan[:, 2], sent, doc)
    assert other.sum() >= stats["single_sentence_chunks_random_b"] * 0.9
    assert np.all(plan[other, 4] == 1)


def test_nsp_b_from_another_document(en):
    tok, text = en
    flat, sent, doc, _ = encode_corpus(tok, text)
    cfg = InstanceConfig(task="nsp", max_seq_length=128, single_sentence_random_b=False)
    plan = plan_instances(sent, doc, cfg, np.random.default_rng(1))
    a0, a1, b0, b1, label, _ = plan.T
    same = doc_of(a0, sent, doc) == doc_of(b0, sent, doc)
    assert np.all(same[label == 0]) and np.all(a1[label == 0] <= b0[label == 0])
    assert np.mean(~same[label == 1]) > 0.95  # 10 tries at another document, as the original
    assert 0.4 < label.mean() < 0.6


def test_none_task_single_segment(en):
    tok, text = en
    flat, sent, doc, _ = encode_corpus(tok, text)
    cfg = InstanceConfig(task="none", max_seq_length=128)
    plan = plan_instances(sent, doc, cfg, np.random.default_rng(0))
    item = build_instance(flat, plan[0], None, tok.word_start_mask(), cfg, specials(tok), np.random.default_rng(0))
    assert "sentence_order_label" not in item
    assert (item["token_type_ids"] == 0).all() and len(item["input_ids"]) <= 128


def mask_many(tok, flat, sent, doc, cfg, flags=None, n=400, log=None):
    """Plan with seed 0 and mask the first ``n`` instances; returns (plan row, item) pairs."""
    plan = plan_instances(sent, doc, cfg, np.random.default_rng(0))[:n]
    out = []
    for j, row in enumerate(plan):
        orig = build_instance(
            flat, row, flags, tok.word_start_mask(), cfg, specials(tok), np.random.default_rng([9, j]), log
        )
        out.append((row, orig))
    return out


def unmasked(item) -> np.ndarray:
    x = item["input_ids"].copy()
    x[item["masked_positions"]] = item["masked_labels"]
    return x


def test_masking_statistics(en):
    tok, text = en
    flat, sent, doc, _ = encode_corpus(tok, text)
    cfg = InstanceConfig(max_seq_length=128)
    items = mask_many(tok, flat, sent, doc, cfg)
    n_tok = sum(len(it["input_ids"]) for _, it in items)
    n_masked = sum(len(it["masked_positions"]) for _, it in items)
    budgets = [min(20, max(1, round(len(it["input_ids"]) * 0.15))) for _, it in items]
    assert all(len(it["masked_positions"]) <= b for (_, it), b in zip(items, budgets, strict=True))
    assert 0.13 < n_masked / n_tok < 0.16
    kinds = Counter()
    for _, it in items:
        x, pos, lab = it["input_ids"], it["masked_positions"], it["masked_labels"]
        ids = unmasked(it)
        special = (ids == tok.cls_id) | (ids == tok.sep_id)
        assert not special[pos].any(), "a [CLS]/[SEP] was masked"
        kinds["mask"] += int((x[pos] == tok.mask_id).sum())
        kinds["keep"] += int((x[pos] == lab).sum())
        kinds["random"] += int(((x[pos] != lab) & (x[pos] != tok.mask_id)).sum())
    total = sum(kinds.values())
    assert abs(kinds["mask"] / total - 0.8) < 0.02
    assert abs(kinds["keep"] / total - 0.1) < 0.02  # (+ random draws of the same token: ~1/vocab)
    assert abs(kinds["random"] / total - 0.1) < 0.02


def test_ngram_length_distribution(en):
    tok, text = en
    flat, sent, doc, _ = encode_corpus(tok, text)
    cfg = InstanceConfig(max_seq_length=256, max_predictions_per_seq=256)
    log: list[tuple[int, int, int]] = []
    items = mask_many(tok, flat, sent, doc, cfg, n=200, log=log)
    drawn = np.array([d for avail, d, _ in log if avail == 3])
    assert len(drawn) > 2000  # a proportion's standard error is then <= 0.011: 0.03 is ~3 sigma
    np.testing.assert_allclose(np.bincount(drawn, minlength=4)[1:] / len(drawn), [6 / 11, 3 / 11, 2 / 11], atol=0.03)
    # accepted spans lean shorter (longer ones collide with covered tokens or the budget more often, as
    # in the original) but all lengths occur, and each accepted n-gram is n whole words
    accepted = np.array([a for _, _, a in log if a])
    freq = np.bincount(accepted, minlength=4)[1:] / len(accepted)
    assert freq[0] > freq[1] > freq[2] > 0.08
    ws = tok.word_start_mask()
    n_words = 0
    for _, it in items:
        ids = unmasked(it)
        # a continuation piece after [SEP] continues the word before it (original); the first piece after
        # [CLS] always opens a word
        starts = ws[ids].copy()
        starts[1] = True
        n_words += int(starts[it["masked_positions"]].sum())
    assert n_words == int(accepted.sum())


def assert_whole_words(items, word_starts_of):
    for _, it in items:
        ids = unmasked(it)
        starts = word_starts_of(it, ids)
        masked = np.zeros(len(ids), bool)
        masked[it["masked_positions"]] = True
        special = np.zeros(len(ids), bool)
        special[[0, int(np.argmax(it["token_type_ids"])) - 1, len(ids) - 1]] = True
        starts = starts & ~special  # words skip [CLS]/[SEP]: one may go on across the [SEP] (original)
        starts[1] = True
        word_id = np.cumsum(starts)
        for w in np.unique(word_id[masked]):
            assert masked[(word_id == w) & ~special].all(), "a word was only partly masked"


def test_sentencepiece_whole_word_masking(en):
    tok, text = en
    flat, sent, doc, _ = encode_corpus(tok, text)
    items = mask_many(tok, flat, sent, doc, InstanceConfig(max_seq_length=128), n=200)
    ws = tok.word_start_mask()
    pieces_per_masked_word = []
    assert_whole_words(items, lambda it, ids: ws[ids])
    for _, it in items:
        pieces_per_masked_word.append(len(it["masked_positions"]))
    assert sum(pieces_per_masked_word) > 0


def test_chinese_jieba_whole_word_masking(zh):
    tok, text = zh
    flat, sent, doc, flags = encode_corpus(tok, text, whole_word_zh=True)
    assert flags is not None and len(flags) == len(flat)
    # jieba groups characters: fewer word starts than characters
    assert flags.mean() < 0.8
    cfg = InstanceConfig(max_seq_length=128)
    items = mask_many(tok, flat, sent, doc, cfg, flags=flags, n=200)
    multi = 0

    row_of = {id(it): row for row, it in items}

    def starts_of(it, ids):
        a0, a1, b0, b1, _, _ = row_of[id(it)]
        one = np.ones(1, bool)
        return np.concatenate([one, flags[a0:a1], one, flags[b0:b1], one])

    assert_whole_words(items, starts_of)
    for _, it in items:
        pos = it["masked_positions"]
        multi += int((np.diff(pos) == 1).sum())
    assert multi > 0  # multi-character words were masked together


def test_same_seed_same_instances_different_seed_differs(en):
    tok, text = en
    flat, sent, doc, _ = encode_corpus(tok, text)
    cfg = InstanceConfig(max_seq_length=128)
    p1 = plan_instances(sent, doc, cfg, np.random.default_rng([5, 0, 0]))
    p2 = plan_instances(sent, doc, cfg, np.random.default_rng([5, 0, 0]))
    p3 = plan_instances(sent, doc, cfg, np.random.default_rng([6, 0, 0]))
    assert np.array_equal(p1, p2) and not np.array_equal(p1, p3)
    ws, ids = tok.word_start_mask(), specials(tok)
    x1 = build_instance(flat, p1[0], None, ws, cfg, ids, np.random.default_rng(1))
    x2 = build_instance(flat, p1[0], None, ws, cfg, ids, np.random.default_rng(1))
    assert all(np.array_equal(x1[k], x2[k]) for k in ("input_ids", "masked_positions"))


def test_reader_repairs_bad_lines(tmp_path):
    p = tmp_path / "bad.txt"
    p.write_bytes(
        b"\xef\xbb\xbfFirst line.\r\nSecond\x00 line \xff\xfe here.\r\n\r\n"
        b"Only one sentence doc.\n\n" + b"Big. " * 300_000 + b"\n\nTail a.\nTail b.\n"
    )
    stats = Counter()
    docs = list(iter_documents(p, "lines", stats=stats))
    assert docs[0] == ["First line.", "Second line \ufffd\ufffd here."]
    assert docs[1] == ["Only one sentence doc."]
    assert docs[-1] == ["Tail a.", "Tail b."]
    assert stats["invalid_utf8_lines"] == 1 and stats["nul_bytes_removed"] == 1
    assert stats["crlf_lines"] == 3 and stats["overlong_lines_split"] == 1
    # the 1.5 MB line comes in 1 MB pieces, split into its sentences (one cut at the piece boundary)
    assert Counter(docs[2])["Big."] >= 300_000 - 2 and "".join(docs[2]) == "Big." * 300_000


def test_jsonl_and_paragraph_formats(tmp_path):
    j = tmp_path / "a.jsonl"
    j.write_text('{"text": "One. Two three."}\nnot json\n{"text": "中文。第二句！"}\n{"id": 3}\n', "utf-8")
    stats = Counter()
    assert list(iter_documents(j, "jsonl", stats=stats)) == [["One.", "Two three."], ["中文。", "第二句！"]]
    assert stats["bad_json_lines"] == 2
    para = tmp_path / "p.txt"
    para.write_text("A b. C d? E\nF.\n\nG h.\n", "utf-8")
    assert list(iter_documents(para, "paragraphs")) == [["A b.", "C d?", "E", "F."], ["G h."]]


FIXTURE_TOK = Path(__file__).resolve().parent / "fixtures" / "original" / "en"


def _synthetic_files(root: Path, n_files: int = 3, docs: int = 40) -> list[Path]:
    """Files of equal document counts: documents of 1-4 sentences of common words."""
    rng = np.random.default_rng(0)
    words = "the a of river city north war music film year game team song league station line park".split()
    files = []
    for f in range(n_files):
        lines = []
        for _ in range(docs):
            for _ in range(int(rng.integers(1, 5))):
                lines.append(" ".join(rng.choice(words, int(rng.integers(4, 12)))) + ".")
            lines.append("")
        (root / f"f{f}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        files.append(root / f"f{f}.txt")
    return files


def test_random_b_comes_from_every_shard_and_not_from_worker_layout(tmp_path):
    """The original draws random-B documents from all documents: shards of a build are one pool, and
    the output is the same whatever the number of workers."""
    import json

    from albertlm.data import MANIFEST, PretrainingDataset, build_dataset
    from albertlm.tokenizer import load_tokenizer

    tok = load_tokenizer(FIXTURE_TOK)
    files = _synthetic_files(tmp_path)
    cfg = InstanceConfig(task="nsp", max_seq_length=48)
    built = []
    for workers in (1, 2):
        out = tmp_path / f"static{workers}"
        m = build_dataset(files, tok, out, mode="static", cfg=cfg, dupe_factor=2, workers=workers, seed=5)
        built.append({p.name: p.read_bytes() for p in sorted((out / m["shard_dir"]).iterdir())})
    assert len(m["shards"]) == 3 and built[0] == built[1]
    assert json.loads((tmp_path / "static1" / MANIFEST).read_text())["tokenizer"]["compat"] == "original"

    build_dataset(files, tok, tmp_path / "dyn", mode="dynamic", cfg=cfg, workers=2, seed=5)
    ds = PretrainingDataset(tmp_path / "dyn")
    home = np.concatenate([np.full(len(p), k) for k, p in enumerate(ds.plans)])
    rows = np.concatenate(ds.plans)
    random_b = rows[:, 4] == 1
    other = rows[random_b, 5] != home[random_b]
    # B's document is uniform over the 120 documents but the current one: 80 of 119 lie in other shards
    expected, n = 80 / 119, int(random_b.sum())
    assert n > 100 and abs(other.mean() - expected) < 4 * np.sqrt(expected * (1 - expected) / n)
    # an instance whose B lives in another shard holds exactly those tokens
    i = int(np.flatnonzero(random_b & (rows[:, 5] != home))[0])
    item, (a0, a1, b0, b1, _, bk) = ds[i], rows[i]
    ids = np.where(item["labels"] >= 0, item["labels"], item["input_ids"])
    assert ids[a1 - a0 + 2 : -1].tolist() == np.asarray(ds.shards[bk]["tokens"][b0:b1]).tolist()
