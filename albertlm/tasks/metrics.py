"""Task metrics. Library ones (scikit-learn, scipy, seqeval) where they exist; written here only what no
maintained library ships: the official SQuAD v1.1 / v2.0 and CMRC 2018 evaluation scripts, re-implemented
from their definitions so every question scores what the official script gives it (tests check this
question by question against reference implementations; `albertlm evaluate --official-format DIR`
writes the files to run the official scripts themselves).

Every metric returns a flat ``{name: float}``; scores are percentages where the official scripts print
percentages (SQuAD, CMRC), fractions elsewhere (GLUE convention). An undefined score is NaN, as scipy and
the GLUE scorer report it; ``json_ready`` turns it into ``None`` for JSON files, which have no NaN.
"""

from __future__ import annotations

import collections
import functools
import math
import re
import string
import warnings
from collections.abc import Sequence

import numpy as np

from albertlm.errors import DataError, import_extra


# --- classification / regression (GLUE) ------------------------------------------------------------
def accuracy(preds: Sequence[int], labels: Sequence[int]) -> dict[str, float]:
    p, y = np.asarray(preds), np.asarray(labels)
    return {"accuracy": float((p == y).mean()) if len(y) else 0.0}


def accuracy_f1(preds: Sequence[int], labels: Sequence[int]) -> dict[str, float]:
    """MRPC / QQP: accuracy and F1 of the positive class (label id 1)."""
    from sklearn.metrics import f1_score

    return {**accuracy(preds, labels), "f1": float(f1_score(labels, preds, pos_label=1, zero_division=0))}


def accuracy_macro_f1(preds: Sequence[int], labels: Sequence[int]) -> dict[str, float]:
    """Your own classes: accuracy, and macro F1 (each class counts the same, so a rare class is not drowned)."""
    from sklearn.metrics import f1_score

    return {**accuracy(preds, labels), "macro_f1": float(f1_score(labels, preds, average="macro", zero_division=0))}


def matthews(preds: Sequence[int], labels: Sequence[int]) -> dict[str, float]:
    from sklearn.metrics import matthews_corrcoef

    return {"mcc": float(matthews_corrcoef(labels, preds)), **accuracy(preds, labels)}


def pearson_spearman(preds: Sequence[float], labels: Sequence[float]) -> dict[str, float]:
    from scipy.stats import pearsonr, spearmanr

    p, y = np.asarray(preds, dtype=np.float64), np.asarray(labels, dtype=np.float64)
    if len(p) < 2:  # scipy refuses fewer than two points; the correlation is undefined
        return {"pearson": math.nan, "spearman": math.nan}
    with warnings.catch_warnings():  # a constant side: scipy warns and returns NaN, which is the answer
        warnings.simplefilter("ignore")
        return {"pearson": float(pearsonr(p, y)[0]), "spearman": float(spearmanr(p, y)[0])}


def json_ready(row: dict) -> dict:
    """``row`` with every non-finite float (an undefined metric) as ``None``: JSON has no NaN, and
    ``json.dumps`` would write a bare ``NaN`` that strict parsers reject."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}


# --- tagging ----------------------------------------------------------------------------------------
def entity_f1(preds: list[list[str]], labels: list[list[str]]) -> dict[str, float]:
    """Entity-level precision / recall / F1 (seqeval's default CoNLL-2000 chunking) + token accuracy."""
    from seqeval.metrics import f1_score, precision_score, recall_score

    flat_p = [t for s in preds for t in s]
    flat_y = [t for s in labels for t in s]
    return {
        "f1": float(f1_score(labels, preds, zero_division=0)),
        "precision": float(precision_score(labels, preds, zero_division=0)),
        "recall": float(recall_score(labels, preds, zero_division=0)),
        "token_accuracy": float(np.mean([a == b for a, b in zip(flat_p, flat_y, strict=True)])) if flat_y else 0.0,
    }


def token_accuracy(preds: list[list[str]], labels: list[list[str]]) -> dict[str, float]:
    """Tags that are not entity chunks (part of speech, say): the share of tokens tagged right."""
    pairs = [(a, b) for p, y in zip(preds, labels, strict=True) for a, b in zip(p, y, strict=True)]
    return {"token_accuracy": float(np.mean([a == b for a, b in pairs])) if pairs else 0.0}


# --- SQuAD v1.1 (official evaluate-v1.1.py) ---------------------------------------------------------
def normalize_answer(s: str) -> str:
    """Lower text and remove punctuation, articles and extra whitespace."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


_PUNCT = frozenset(string.punctuation)


def squad_f1(prediction: str, ground_truth: str) -> float:
    pred, gold = normalize_answer(prediction).split(), normalize_answer(ground_truth).split()
    common = collections.Counter(pred) & collections.Counter(gold)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def squad_em(prediction: str, ground_truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def missing_predictions(predictions: dict[str, str], answers: dict[str, list[str]]) -> list[str]:
    """Question ids without a prediction, in ``answers`` order (the official scripts name each one)."""
    return [qid for qid in answers if qid not in predictions]


def squad_v1(predictions: dict[str, str], answers: dict[str, list[str]]) -> dict[str, float]:
    """``answers`` qid -> gold texts. A question without a prediction scores 0 and still counts, as the
    official script does ("Unanswered question ... will receive score 0"; see ``missing_predictions``)."""
    em = f1 = 0.0
    for qid, golds in answers.items():
        if qid not in predictions:
            continue
        em += max(squad_em(predictions[qid], g) for g in golds)
        f1 += max(squad_f1(predictions[qid], g) for g in golds)
    n = max(len(answers), 1)
    return {"exact_match": 100.0 * em / n, "f1": 100.0 * f1 / n}


# --- SQuAD v2.0 (official evaluate-v2.0.py) ---------------------------------------------------------
def _v2_tokens(s: str) -> list[str]:
    return normalize_answer(s).split() if s else []


def _v2_f1(gold: str, pred: str) -> float:
    g, p = _v2_tokens(gold), _v2_tokens(pred)
    if not g or not p:  # no-answer: F1 is 1 if both are empty, else 0
        return float(g == p)
    same = sum((collections.Counter(g) & collections.Counter(p)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def squad_v2(
    predictions: dict[str, str],
    answers: dict[str, list[str]],
    na_probs: dict[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, float]:
    """The official script's figures for ``predictions`` (``""`` = no answer) and, given null scores
    (its ``--na-prob-file``), its threshold rule and best-threshold search.

    A question is answerable when it has any gold answer (``answers[qid]`` non-empty), even one that
    normalises to nothing (such golds are scored as ``""``). With ``na_probs``, ``exact`` / ``f1`` count a
    question whose null score exceeds ``na_prob_thresh`` (the script's ``--na-prob-thresh``, default 1.0)
    as answered with no answer, and best_f1 is F1 when every question whose null score exceeds
    ``best_f1_thresh`` is. Every question needs a prediction (and a null score): the official script
    cannot score a partial file, so neither does this."""
    missing = missing_predictions(predictions, answers)
    if missing:
        raise DataError(f"SQuAD 2.0: no prediction for {len(missing)} of {len(answers)} questions (first: "
                         f"{missing[0]!r}); the official evaluate-v2.0.py cannot score a partial prediction "
                         f"file either: predict every question, with \"\" for no answer")  # fmt: skip
    if na_probs is not None:
        missing = [q for q in answers if q not in na_probs]
        if missing:
            raise DataError(f"SQuAD 2.0: no null score for {len(missing)} of {len(answers)} questions "
                             f"(first: {missing[0]!r}); the null-score file must cover every question")  # fmt: skip
    has_ans = {qid: bool(golds) for qid, golds in answers.items()}
    exact_raw, f1_raw = {}, {}
    for qid, golds in answers.items():
        golds = [a for a in golds if normalize_answer(a)] or [""]
        pred = predictions[qid]
        exact_raw[qid] = max(float(normalize_answer(a) == normalize_answer(pred)) for a in golds)
        f1_raw[qid] = max(_v2_f1(a, pred) for a in golds)
    exact, f1 = dict(exact_raw), dict(f1_raw)
    if na_probs is not None:
        for qid in answers:
            if na_probs[qid] > na_prob_thresh:  # predicted unanswerable: right iff it is
                exact[qid] = f1[qid] = float(not has_ans[qid])
    n = len(answers)
    out = {
        "exact": 100.0 * sum(exact.values()) / n if n else 0.0,
        "f1": 100.0 * sum(f1.values()) / n if n else 0.0,
        "total": float(n),
    }
    for name, keep in (("HasAns", True), ("NoAns", False)):
        ids = [q for q in answers if has_ans[q] == keep]
        if ids:
            out[f"{name}_exact"] = 100.0 * sum(exact[q] for q in ids) / len(ids)
            out[f"{name}_f1"] = 100.0 * sum(f1[q] for q in ids) / len(ids)
            out[f"{name}_total"] = float(len(ids))
    if na_probs is not None:
        for name, scores in (("exact", exact_raw), ("f1", f1_raw)):
            best, thresh = _best_thresh(predictions, scores, na_probs, has_ans)
            out[f"best_{name}"], out[f"best_{name}_thresh"] = best, thresh
    return out


def _best_thresh(
    preds: dict[str, str], scores: dict[str, float], na_probs: dict[str, float], has_ans: dict[str, bool]
) -> tuple[float, float]:
    # Walk questions by increasing null score (ties in file order, as sorted() keeps them); each step
    # flips one more question from "no answer" to its prediction.
    cur = best = float(sum(1 for q in has_ans if not has_ans[q]))
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1.0 if preds[qid] else 0.0
        cur += diff
        if cur > best:
            best, best_thresh = cur, na_probs[qid]
    return 100.0 * best / max(len(scores), 1), best_thresh


# --- CMRC 2018 (official cmrc2018_evaluate.py) ------------------------------------------------------
# the script's list, with its two-character "……" that no single character ever equals
_CMRC_PUNCT = frozenset(
    ["-", ":", "_", "*", "^", "/", "\\", "~", "`", "+", "=", "，", "。", "：", "？", "！", "“", "”", "；", "’",
     "《", "》", "……", "·", "、", "「", "」", "（", "）", "－", "～", "『", "』"]
)  # fmt: skip
_CJK = re.compile(r"[\u4e00-\u9fa5]")
CMRC_NEEDS = "CMRC 2018 scoring (the official script's word segmentation)"


class _EveryType(frozenset):
    """Punkt parameters that call every word type an abbreviation (see ``_word_tokenize``)."""

    def __contains__(self, item: object) -> bool:
        return True


@functools.cache
def _nltk_tokenizers():  # noqa: ANN202 - (sentence splitter, word tokenizer); nltk imported on first use
    punkt = import_extra("nltk.tokenize.punkt", CMRC_NEEDS, "chinese")
    params = punkt.PunktParameters()
    params.abbrev_types = _EveryType()
    words = import_extra("nltk.tokenize", CMRC_NEEDS, "chinese").NLTKWordTokenizer()
    return punkt.PunktSentenceTokenizer(params), words


@functools.lru_cache(maxsize=1 << 16)
def _word_tokenize(run: str) -> tuple[str, ...]:
    """``nltk.word_tokenize(run)`` as the official script calls it, without the Punkt model it needs.

    word_tokenize splits ``run`` into sentences with Punkt's English model (data downloaded apart from
    nltk), then tokenizes each sentence with ``NLTKWordTokenizer``, which splits a final period off
    only at the end of a sentence. Here the sentences come from nltk's own Punkt algorithm with one change:
    every word type counts as an abbreviation, so a token ending in "." never ends a sentence. Elsewhere
    the model's learned lists (abbreviations, collocations, sentence starters, casing statistics) cannot
    change the decision on the script's lowercased text: boundaries after "?", "!" and a lone "." are
    kept, an ellipsis before a lowercase word never is. Where the English model does end a sentence after
    a "."-final word token followed by more text in one non-Chinese run ("learning. machine": "learning"
    is no abbreviation it knows), the script gets "learning", "." and this gets "learning."; after the
    abbreviations it learned ("mr. smith") and after initials ("henry a. walsh", the only such runs in CMRC
    2018 dev answers) the two agree. Tests pin both sides. The tokenizer's rules also changed across nltk
    versions (dashes, quotes), hence the pinned range in pyproject.toml; see docs/results/qa_scorers/.
    """
    sentences, words = _nltk_tokenizers()
    return tuple(t for sent in sentences.tokenize(run) for t in words.tokenize(sent))


def mixed_segmentation(text: str, rm_punc: bool = False) -> list[str]:
    """The official segmentation: lowercased, each Chinese character (U+4E00-U+9FA5) and each listed
    punctuation mark a segment, the runs of other characters between them tokenized by nltk."""
    segs: list[str] = []
    run = ""
    for ch in str(text).lower().strip():
        if rm_punc and ch in _CMRC_PUNCT:
            continue
        if _CJK.search(ch) or ch in _CMRC_PUNCT:
            if run:
                segs.extend(_word_tokenize(run))
                run = ""
            segs.append(ch)
        else:
            run += ch
    if run:
        segs.extend(_word_tokenize(run))
    return segs


def remove_punctuation(text: str) -> str:
    return "".join(ch for ch in str(text).lower().strip() if ch not in _CMRC_PUNCT)


def _lcs_len(a: list[str], b: list[str]) -> int:
    # longest common *substring* (contiguous), exactly as the official find_lcs
    best = 0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b):
            if x == y:
                cur[j + 1] = prev[j] + 1
                best = max(best, cur[j + 1])
        prev = cur
    return best


def cmrc_f1(answers: list[str], prediction: str) -> float:
    scores = []
    pred = mixed_segmentation(prediction, rm_punc=True)
    for ans in answers:
        gold = mixed_segmentation(ans, rm_punc=True)
        n = _lcs_len(gold, pred)
        if n == 0:
            scores.append(0.0)
            continue
        precision, recall = n / len(pred), n / len(gold)
        scores.append(2 * precision * recall / (precision + recall))
    return max(scores)


def cmrc_em(answers: list[str], prediction: str) -> float:
    return float(any(remove_punctuation(a) == remove_punctuation(prediction) for a in answers))


def cmrc2018(predictions: dict[str, str], answers: dict[str, list[str]]) -> dict[str, float]:
    """A question without a prediction scores 0 and still counts, as in the official script (which
    prints "Unanswered question" and counts it in SKIP; see ``missing_predictions``)."""
    em = f1 = 0.0
    for qid, golds in answers.items():
        if qid in predictions:
            em += cmrc_em(golds, predictions[qid])
            f1 += cmrc_f1(golds, predictions[qid])
    n = max(len(answers), 1)
    em, f1 = 100.0 * em / n, 100.0 * f1 / n
    return {"exact_match": em, "f1": f1, "average": (em + f1) / 2}


def check_scorer(metric: object) -> None:
    """Fail before a run starts, not at its first evaluation, when ``metric`` needs an extra that is missing."""
    if metric is cmrc2018:
        _nltk_tokenizers()
