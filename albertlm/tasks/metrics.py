"""Task metrics. Library ones (scikit-learn, scipy, seqeval) where they exist; written here only what no
maintained library ships: the official SQuAD v1.1 / v2.0 and CMRC 2018 evaluation scripts, ported
function by function so scores match the leaderboards' numbers.

Every metric returns a flat ``{name: float}``; scores are percentages where the official scripts print
percentages (SQuAD, CMRC), fractions elsewhere (GLUE convention).
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Sequence

import numpy as np


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
    if len(p) < 2 or p.std() == 0 or y.std() == 0:  # correlation undefined: report 0, not NaN
        return {"pearson": 0.0, "spearman": 0.0}
    return {"pearson": float(pearsonr(p, y)[0]), "spearman": float(spearmanr(p, y)[0])}


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


def squad_v1(predictions: dict[str, str], answers: dict[str, list[str]]) -> dict[str, float]:
    """``answers`` qid -> gold texts; a question without a prediction scores 0 (as the official script)."""
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
    predictions: dict[str, str], answers: dict[str, list[str]], na_probs: dict[str, float] | None = None
) -> dict[str, float]:
    """EM/F1 (``""`` = no answer) plus, given null scores, the best threshold search: best_f1 is F1 when
    every question whose null score exceeds ``best_f1_thresh`` is answered with no answer."""
    exact, f1 = {}, {}
    has_ans = {}
    for qid, golds in answers.items():
        golds = [a for a in golds if normalize_answer(a)] or [""]
        has_ans[qid] = golds != [""]
        if qid not in predictions:
            continue
        exact[qid] = max(float(normalize_answer(a) == normalize_answer(predictions[qid])) for a in golds)
        f1[qid] = max(_v2_f1(a, predictions[qid]) for a in golds)
    n = max(len(answers), 1)
    out = {"exact": 100.0 * sum(exact.values()) / n, "f1": 100.0 * sum(f1.values()) / n, "total": float(n)}
    for name, keep in (("HasAns", True), ("NoAns", False)):
        ids = [q for q in answers if has_ans[q] == keep]
        if ids:
            out[f"{name}_exact"] = 100.0 * sum(exact.get(q, 0.0) for q in ids) / len(ids)
            out[f"{name}_f1"] = 100.0 * sum(f1.get(q, 0.0) for q in ids) / len(ids)
    if na_probs is not None:
        for name, scores in (("exact", exact), ("f1", f1)):
            best, thresh = _best_thresh(predictions, scores, na_probs, has_ans)
            out[f"best_{name}"], out[f"best_{name}_thresh"] = best, thresh
    return out


def _best_thresh(
    preds: dict[str, str], scores: dict[str, float], na_probs: dict[str, float], has_ans: dict[str, bool]
) -> tuple[float, float]:
    # Walk questions by increasing null score; each step flips one more question to "answered".
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
_CMRC_PUNCT = frozenset(
    ["-", ":", "_", "*", "^", "/", "\\", "~", "`", "+", "=", "，", "。", "：", "？", "！", "“", "”", "；", "’",
     "《", "》", "……", "·", "、", "「", "」", "（", "）", "－", "～", "『", "』"]
)  # fmt: skip
_CJK = re.compile(r"[\u4e00-\u9fa5]")
# nltk.word_tokenize in the official script; for the ASCII runs between Chinese characters (numbers,
# names, units) a word/punctuation split gives the same segments without the nltk dependency.
_WORD = re.compile(r"\w+|[^\w\s]")


def mixed_segmentation(text: str, rm_punc: bool = False) -> list[str]:
    """Chinese characters one by one, other runs split into words."""
    segs: list[str] = []
    run = ""
    for ch in str(text).lower().strip():
        if rm_punc and ch in _CMRC_PUNCT:
            continue
        if _CJK.search(ch) or ch in _CMRC_PUNCT:
            if run:
                segs.extend(_WORD.findall(run))
                run = ""
            segs.append(ch)
        else:
            run += ch
    if run:
        segs.extend(_WORD.findall(run))
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
    em = f1 = 0.0
    for qid, golds in answers.items():
        if qid in predictions:
            em += cmrc_em(golds, predictions[qid])
            f1 += cmrc_f1(golds, predictions[qid])
    n = max(len(answers), 1)
    em, f1 = 100.0 * em / n, 100.0 * f1 / n
    return {"exact_match": em, "f1": f1, "average": (em + f1) / 2}
