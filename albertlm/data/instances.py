"""Pretraining instances, as the original ``create_pretraining_data.py`` makes them (spec s6).

Text files -> documents (lists of sentences) -> token ids -> instance *plans* -> n-gram whole-word masks.

A plan row is six integers ``(a_start, a_end, b_start, b_end, label, b_shard)``: token ranges into the
flat token arrays of the shard being planned (A) and of shard ``b_shard`` (B; another shard only for a
random-B segment, which the original draws from all documents of the corpus). Pairs are always contiguous
token ranges (A and B are runs of consecutive sentences, truncation only trims their ends), so planning
needs only sentence lengths and the same plan drives both static builds (masks written once per dupe
copy) and dynamic datasets (masks drawn per epoch).

Randomness: every choice comes from ``numpy.random.Generator``s seeded from ``(seed, shard, epoch)``
(planning) and ``(seed, shard, epoch, instance)`` (masking), and random-B documents are drawn from the
``DocumentPool`` of the whole build, so output never depends on worker counts. The original draws n-gram
sizes from numpy's unseeded global RNG (spec s6); ours is reproducible.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np

from albertlm.data.corpus import CJK
from albertlm.errors import UserError, check_settings, import_extra

OBJECTIVES = ("sop", "nsp", "none")


@dataclass(frozen=True)
class InstanceConfig:
    """How pairs are cut and masked; defaults are the original's (spec s6). The metadata is the flags of
    ``albertlm data build`` and the bounds ``validate`` holds them to."""

    # sop (sentence order), nsp (random next document), none (single segment)
    task: str = field(default="sop", metadata={"choices": OBJECTIVES, "help": (
        "inter-sentence task: sentence order (ALBERT), next sentence (BERT) or none")})  # fmt: skip
    max_seq_length: int = field(default=512, metadata={"min": 8, "help": "tokens per instance, with specials"})
    max_predictions_per_seq: int = field(default=20, metadata={  # cap on masked tokens per instance
        "min": 1, "flag": "--max-predictions", "metavar": "MAX_PREDICTIONS",
        "help": "max masked tokens per instance"})  # fmt: skip
    masked_lm_prob: float = field(default=0.15, metadata={  # before the cap
        "above": 0.0, "below": 1.0, "help": "fraction of tokens to mask"})  # fmt: skip
    short_seq_prob: float = field(default=0.1, metadata={  # a random target length in [2, max]
        "min": 0.0, "max": 1.0, "help": "probability that a document uses a random shorter target length"})  # fmt: skip
    ngram: int = field(default=3, metadata={  # p(n) proportional to 1/n
        "min": 1, "help": "longest masked n-gram in words (p(n) ~ 1/n)"})  # fmt: skip
    single_sentence_random_b: bool = field(default=True, metadata={  # an original quirk
        "help": "one-sentence chunks take B from a random document even in SOP mode (original)"})  # fmt: skip

    def validate(self) -> None:
        if self.task not in OBJECTIVES:
            raise UserError(f"--task must be one of {OBJECTIVES}, got {self.task!r}")
        check_settings(self)

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------------------------- encoding


def import_jieba():  # noqa: ANN201 - the jieba module
    """jieba (the `chinese` extra), or one line saying how to install it or do without."""
    return import_extra("jieba", "Chinese whole-word masking (a WordPiece tokenizer's default)", "chinese",
                        "build with --no-whole-word-zh (pieces mask alone, as the original)")


class DocumentEncoder:
    """Token ids and word-start flags for a batch of documents.

    Word starts come from the vocabulary ('▁' pieces, non-'##' wordpieces, spec s5) except, with
    ``whole_word_zh``, for sentences containing CJK: those are segmented with jieba so the characters of
    one Chinese word mask together (the albert_zh/Chinese-BERT whole-word masking).
    """

    def __init__(self, tokenizer, whole_word_zh: bool = False) -> None:
        self.tok = tokenizer
        self.word_start = np.asarray(tokenizer.word_start_mask(), dtype=bool)
        self.whole_word_zh = whole_word_zh
        if whole_word_zh:
            jieba = import_jieba()
            jieba.setLogLevel(60)
            self._cut = jieba.lcut

    def encode(self, docs: list[list[str]]) -> list[tuple[list[np.ndarray], list[np.ndarray] | None]]:
        flat = [s for d in docs for s in d]
        ids = self.tok.encode_batch(flat, add_special_tokens=False)
        flags: list[np.ndarray] | None = None
        if self.whole_word_zh:
            flags = []
            for k, s in enumerate(flat):
                if CJK.search(s):
                    wid, wflag = self.tok.encode_words(self._cut(s))
                    ids[k] = wid
                    flags.append(np.asarray(wflag, dtype=np.uint8))
                else:
                    flags.append(self.word_start[np.asarray(ids[k], dtype=np.int64)].astype(np.uint8))
        out, k = [], 0
        for d in docs:
            sids = [np.asarray(x, dtype=np.int64) for x in ids[k : k + len(d)]]
            sflags = flags[k : k + len(d)] if flags is not None else None
            keep = [i for i, x in enumerate(sids) if len(x)]  # sentences that encode to nothing are dropped
            out.append(([sids[i] for i in keep], [sflags[i] for i in keep] if sflags is not None else None))
            k += len(d)
        return out


# ---------------------------------------------------------------------------------------------- planning


def _truncate(la: int, lb: int, max_num_tokens: int) -> tuple[int, int]:
    """Tokens to remove from A and B: the original trims the longer one (B on ties) one token at a time."""
    excess = la + lb - max_num_tokens
    if excess <= 0:
        return 0, 0
    diff = abs(la - lb)
    if excess <= diff:
        return (excess, 0) if la > lb else (0, excess)
    rest = excess - diff
    ra, rb = (diff, 0) if la > lb else (0, diff)
    return ra + rest // 2, rb + rest - rest // 2


class DocumentPool:
    """Every document of a build, one ``(sent_offsets, doc_offsets)`` pair per shard, numbered globally in
    shard order: random-B segments come from any of them, as the original's ``all_documents`` (spec s6)."""

    def __init__(self, shards: list[tuple[np.ndarray, np.ndarray]]) -> None:
        self.sent = [s for s, _ in shards]
        self.doc = [d for _, d in shards]
        self.base = np.concatenate(([0], np.cumsum([len(d) - 1 for d in self.doc]))).astype(np.int64)
        self.n_docs = int(self.base[-1])

    def locate(self, g: int) -> tuple[int, int]:
        """(shard, document within the shard) of global document ``g``."""
        k = int(np.searchsorted(self.base, g, side="right")) - 1
        return k, g - int(self.base[k])


def plan_instances(
    sent_offsets: np.ndarray,
    doc_offsets: np.ndarray,
    cfg: InstanceConfig,
    rng: np.random.Generator,
    stats: Counter | None = None,
    pool: DocumentPool | None = None,
    shard: int = 0,
) -> np.ndarray:
    """Plan rows (N, 6) int64 ``a_start, a_end, b_start, b_end, label, b_shard`` for the documents of shard
    ``shard`` of ``pool`` (a pool of this shard alone when None).

    ``sent_offsets`` (S+1) are token offsets of sentences, ``doc_offsets`` (D+1) sentence offsets of
    documents. Follows create_instances_from_document of the original (spec s6): a random B (NSP's, or a
    one-sentence chunk's) comes from a document drawn uniformly from all documents of the pool.
    """
    stats = Counter() if stats is None else stats
    so, do = sent_offsets.tolist(), doc_offsets.tolist()
    n_docs = len(do) - 1
    if pool is None:
        pool, shard = DocumentPool([(sent_offsets, doc_offsets)]), 0
    base = int(pool.base[shard])
    pair = cfg.task != "none"
    max_num_tokens = cfg.max_seq_length - (3 if pair else 2)
    rows: list[tuple[int, int, int, int, int, int]] = []
    for d in range(n_docs):
        s0, s1 = do[d], do[d + 1]
        if s1 <= s0:
            continue
        # one target per document, as the original (short_seq_prob: random length in [2, max])
        target = max_num_tokens
        if rng.random() < cfg.short_seq_prob:
            target = int(rng.integers(2, max_num_tokens + 1))
        c0, i = s0, s0
        while i < s1:
            if i == s1 - 1 or so[i + 1] - so[c0] >= target:
                c1 = i + 1
                if not pair:
                    a0, a1 = so[c0], so[c1]
                    r = max(0, a1 - a0 - max_num_tokens)
                    f = int(rng.binomial(r, 0.5)) if r else 0
                    rows.append((a0 + f, a1 - (r - f), a1, a1, 0, shard))
                    c0, i = c1, c1
                    continue
                a_end = c0 + 1 if c1 - c0 < 2 else c0 + int(rng.integers(1, c1 - c0))
                a0, a1 = so[c0], so[a_end]
                single = c1 - c0 == 1
                if single and not cfg.single_sentence_random_b:
                    stats["single_sentence_chunks_skipped"] += 1
                    c0, i = c1, c1
                    continue
                if (single and cfg.single_sentence_random_b) or (cfg.task == "nsp" and rng.random() < 0.5):
                    if single:
                        stats["single_sentence_chunks_random_b"] += 1
                    target_b = target - (a1 - a0)
                    for _ in range(10):
                        rd = int(rng.integers(pool.n_docs))
                        if rd != base + d:
                            break
                    b_shard, rd = pool.locate(rd)
                    bso, bdo = (so, do) if b_shard == shard else (pool.sent[b_shard], pool.doc[b_shard])
                    r0, r1 = int(bdo[rd]), int(bdo[rd + 1])
                    j = r0 + int(rng.integers(r1 - r0))
                    b0 = int(bso[j])
                    while j < r1:
                        j += 1
                        if int(bso[j]) - b0 >= target_b:
                            break
                    b1, label = int(bso[j]), 1
                    # the sentences after A were not used: they start the next chunk (original)
                    i = a_end - 1
                elif cfg.task == "sop" and rng.random() < 0.5:
                    (a0, a1), (b0, b1), label = (so[a_end], so[c1]), (a0, a1), 1  # swapped order
                    b_shard = shard
                else:
                    b0, b1, label, b_shard = so[a_end], so[c1], 0, shard
                ra, rb = _truncate(a1 - a0, b1 - b0, max_num_tokens)
                fa = int(rng.binomial(ra, 0.5)) if ra else 0  # each trimmed token: front or back at p=.5
                fb = int(rng.binomial(rb, 0.5)) if rb else 0
                rows.append((a0 + fa, a1 - (ra - fa), b0 + fb, b1 - (rb - fb), label, b_shard))
                c0 = i + 1
            i += 1
    return np.asarray(rows, dtype=np.int64).reshape(-1, 6)


# ----------------------------------------------------------------------------------------------- masking


@dataclass(frozen=True)
class SpecialIds:
    cls_id: int
    sep_id: int
    mask_id: int
    vocab_size: int


def ngram_probs(ngram: int) -> np.ndarray:
    """p(n) proportional to 1/n for n = 1..ngram: [6/11, 3/11, 2/11] for ngram 3 (spec s6)."""
    p = 1.0 / np.arange(1, ngram + 1)
    return p / p.sum()


def mask_tokens(
    tokens: np.ndarray,
    word_starts: np.ndarray,
    special: np.ndarray,
    cfg: InstanceConfig,
    ids: SpecialIds,
    rng: np.random.Generator,
    ngram_log: list[tuple[int, int, int]] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n-gram whole-word masking of one sequence: returns (masked input ids, positions, original ids).

    As the original ``create_masked_lm_predictions`` (create_pretraining_data.py lines 426-598):
    ``special`` flags [CLS]/[SEP], which are never masked and are skipped when words are formed, so a
    continuation piece right after [SEP] joins the word before it (line 446-448); a word is a start piece
    and the continuation pieces after it. Candidates are visited in a random order; each draws n from
    p(n) proportional to 1/n over the full 1..ngram even near the end of the sequence, where the n-gram is
    cut to the words left (the truncated slices of line 479). ``ngram_log`` collects
    ``(n available, n drawn, n accepted or 0)`` per candidate, for the statistical tests.
    """
    n_tok = len(tokens)
    cand = ~special
    starts = cand & word_starts
    first = np.flatnonzero(cand)[:1]
    starts[first] = True  # the first candidate always opens a word (line 446: no word to continue yet)
    wstart = np.flatnonzero(starts)
    bound = np.append(wstart, n_tok)  # word w spans the candidates in [bound[w], bound[w + 1])
    n_cand = np.concatenate(([0], np.cumsum(cand)))
    n_words = len(wstart)
    budget = min(cfg.max_predictions_per_seq, max(1, int(round(n_tok * cfg.masked_lm_prob))))
    empty = np.zeros(0, dtype=np.int64)
    if n_words == 0:
        return tokens.copy(), empty, empty
    cum = np.cumsum(ngram_probs(cfg.ngram))
    order = rng.permutation(n_words)
    u = rng.random(n_words)
    covered = np.zeros(n_tok, dtype=bool)
    chosen: list[np.ndarray] = []
    count = 0
    for t, w in enumerate(order.tolist()):
        if count >= budget:
            break
        avail = min(cfg.ngram, n_words - w)
        drawn = min(int(np.searchsorted(cum, u[t] * cum[-1], side="right")) + 1, cfg.ngram)
        n = min(drawn, avail)
        # as the original: try shorter n-grams while this one exceeds the budget, else skip it
        while n > 1 and count + int(n_cand[bound[w + n]] - n_cand[bound[w]]) > budget:
            n -= 1
        lo, hi = int(bound[w]), int(bound[w + n])
        pos = np.arange(lo, hi)[cand[lo:hi]]
        ok = count + len(pos) <= budget and not covered[pos].any()
        if ngram_log is not None:
            ngram_log.append((avail, drawn, n if ok else 0))
        if not ok:
            continue
        covered[pos] = True
        chosen.append(pos)
        count += len(pos)
    if not chosen:
        return tokens.copy(), empty, empty
    positions = np.sort(np.concatenate(chosen))
    labels = tokens[positions]
    r = rng.random(len(positions))
    rand = rng.integers(ids.vocab_size, size=len(positions))
    out = tokens.copy()
    # 80% [MASK], 10% the original token, 10% a random vocabulary token (original)
    out[positions] = np.where(r < 0.8, ids.mask_id, np.where(r < 0.9, labels, rand))
    return out, positions, labels


def build_instance(
    flat: np.ndarray,
    row: np.ndarray,
    word_start_of: np.ndarray | None,
    vocab_word_start: np.ndarray,
    cfg: InstanceConfig,
    ids: SpecialIds,
    rng: np.random.Generator,
    ngram_log: list[tuple[int, int, int]] | None = None,
    flat_b: np.ndarray | None = None,
    word_start_of_b: np.ndarray | None = None,
) -> dict[str, np.ndarray | int]:
    """Materialise one plan row: ``[CLS] A [SEP] B [SEP]`` (or ``[CLS] A [SEP]``), masked.

    ``word_start_of`` are stored per-token word-start flags (jieba), else the vocabulary's flags apply.
    ``flat_b`` / ``word_start_of_b`` are those of shard ``row[5]`` when B lies in another shard.
    """
    a0, a1, b0, b1, label = (int(x) for x in row[:5])
    if flat_b is None:
        flat_b, word_start_of_b = flat, word_start_of
    a, b = np.asarray(flat[a0:a1], dtype=np.int64), np.asarray(flat_b[b0:b1], dtype=np.int64)
    pair = cfg.task != "none"
    parts = [[ids.cls_id], a, [ids.sep_id]] + ([b, [ids.sep_id]] if pair else [])
    tokens = np.concatenate(parts).astype(np.int64)
    special = np.zeros(len(tokens), dtype=bool)
    special[[0, len(a) + 1, len(tokens) - 1]] = True
    if word_start_of is not None:
        ws_parts = [np.asarray(word_start_of[a0:a1], bool), np.asarray(word_start_of_b[b0:b1], bool)]
    else:
        ws_parts = [vocab_word_start[a], vocab_word_start[b]]
    one = np.ones(1, dtype=bool)
    word_starts = np.concatenate([one, ws_parts[0], one] + ([ws_parts[1], one] if pair else []))
    masked, positions, labels = mask_tokens(tokens, word_starts, special, cfg, ids, rng, ngram_log)
    token_type = np.zeros(len(tokens), dtype=np.int64)
    token_type[len(a) + 2 :] = 1  # types 0 for [CLS] A [SEP], 1 for B [SEP] (spec s5)
    item: dict[str, np.ndarray | int] = {
        "input_ids": masked,
        "token_type_ids": token_type,
        "masked_positions": positions,
        "masked_labels": labels,
    }
    if pair:
        item["sentence_order_label"] = label
    return item
