"""Reference implementations of the official QA evaluation scripts, written for the tests from their
definitions (SQuAD evaluate-v1.1.py and evaluate-v2.0.py, CMRC 2018 cmrc2018_evaluate.py), and a seeded
generator of adversarial predictions. Each scorer walks a dataset in SQuAD JSON as the script does."""

from __future__ import annotations

import collections
import random
import re
import string
import unicodedata

from nltk.tokenize.punkt import PunktLanguageVars


class NeedsPunktModel(Exception):
    """This run's sentence split depends on Punkt's learned English parameters, which are not here."""


def lists_could_decide(run: str) -> bool:
    # A word token ending in "." followed by more text: whether a sentence ends there depends on the
    # English model's abbreviation list (and, for initials and numbers, its casing statistics).
    toks = PunktLanguageVars().word_tokenize(run)
    return any(t.endswith(".") and t.strip(".") for t in toks[:-1])


def ref_squad_normalize(s: str) -> str:
    s = s.lower().translate(str.maketrans("", "", string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())


def ref_squad_f1(pred_toks: list[str], gold_toks: list[str]) -> float:
    same = sum((collections.Counter(pred_toks) & collections.Counter(gold_toks)).values())
    if same == 0:
        return 0.0
    p, r = same / len(pred_toks), same / len(gold_toks)
    return 2 * p * r / (p + r)


def ref_squad_v1(dataset: dict, preds: dict[str, str]) -> tuple[dict, dict]:
    per_q, em, f1, total = {}, 0.0, 0.0, 0
    for article in dataset["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                total += 1
                if qa["id"] not in preds:  # "Unanswered question ... will receive score 0."
                    continue
                golds = [a["text"] for a in qa["answers"]]
                p = ref_squad_normalize(preds[qa["id"]])
                e = max(float(p == ref_squad_normalize(g)) for g in golds)
                f = max(ref_squad_f1(p.split(), ref_squad_normalize(g).split()) for g in golds)
                per_q[qa["id"]] = (e, f)
                em, f1 = em + e, f1 + f
    return per_q, {"exact_match": 100.0 * em / total, "f1": 100.0 * f1 / total}


def ref_squad_v2(dataset: dict, preds: dict[str, str], na_probs: dict[str, float], thresh: float = 1.0):
    qas = [qa for article in dataset["data"] for para in article["paragraphs"] for qa in para["qas"]]
    has_ans = {qa["id"]: bool(qa["answers"]) for qa in qas}
    exact_raw, f1_raw = {}, {}
    for qa in qas:
        golds = [a["text"] for a in qa["answers"] if ref_squad_normalize(a["text"])] or [""]
        if qa["id"] not in preds:  # "Missing prediction for ..."
            continue
        pred = preds[qa["id"]]
        exact_raw[qa["id"]] = max(float(ref_squad_normalize(g) == ref_squad_normalize(pred)) for g in golds)
        toks = lambda s: ref_squad_normalize(s).split() if s else []  # noqa: E731
        f1_raw[qa["id"]] = max(
            float(toks(g) == toks(pred)) if not toks(g) or not toks(pred) else ref_squad_f1(toks(pred), toks(g))
            for g in golds
        )
    thresholded = [
        {q: float(not has_ans[q]) if na_probs[q] > thresh else s for q, s in raw.items()} for raw in (exact_raw, f1_raw)
    ]
    out = {"exact": 100.0 * sum(thresholded[0].values()) / len(thresholded[0]),
           "f1": 100.0 * sum(thresholded[1].values()) / len(thresholded[1]), "total": len(thresholded[0])}  # fmt: skip
    for name, ids in (
        ("HasAns", [q for q in has_ans if has_ans[q]]),
        ("NoAns", [q for q in has_ans if not has_ans[q]]),
    ):
        if ids:  # the official script raises KeyError here when a prediction is missing
            out[f"{name}_exact"] = 100.0 * sum(thresholded[0][q] for q in ids) / len(ids)
            out[f"{name}_f1"] = 100.0 * sum(thresholded[1][q] for q in ids) / len(ids)
            out[f"{name}_total"] = len(ids)
    for name, raw in (("exact", exact_raw), ("f1", f1_raw)):
        score = best = sum(1 for q in has_ans if not has_ans[q])
        best_thresh = 0.0
        for q in sorted(na_probs, key=lambda k: na_probs[k]):
            if q not in raw:
                continue
            score += raw[q] if has_ans[q] else (-1 if preds[q] else 0)
            if score > best:
                best, best_thresh = score, na_probs[q]
        out[f"best_{name}"], out[f"best_{name}_thresh"] = 100.0 * best / len(raw), best_thresh
    return exact_raw, f1_raw, thresholded, out


CMRC_SP = ["-", ":", "_", "*", "^", "/", "\\", "~", "`", "+", "=", "，", "。", "：", "？", "！", "“", "”", "；", "’",
           "《", "》", "……", "·", "、", "「", "」", "（", "）", "－", "～", "『", "』"]  # fmt: skip


def ref_cmrc_segments(text: str, word_tokenize, rm_punc: bool) -> list[str]:
    out, pending = [], ""
    for ch in str(text).lower().strip():
        if rm_punc and ch in CMRC_SP:
            continue
        if re.search("[\u4e00-\u9fa5]", ch) or ch in CMRC_SP:
            if pending != "":
                out.extend(word_tokenize(pending))
                pending = ""
            out.append(ch)
        else:
            pending += ch
    if pending != "":
        out.extend(word_tokenize(pending))
    return out


def ref_lcs(s1: list[str], s2: list[str]) -> int:
    m = [[0] * (len(s2) + 1) for _ in range(len(s1) + 1)]
    longest = 0
    for i in range(len(s1)):
        for j in range(len(s2)):
            if s1[i] == s2[j]:
                m[i + 1][j + 1] = m[i][j] + 1
                longest = max(longest, m[i + 1][j + 1])
    return longest


def ref_cmrc_question(golds: list[str], pred: str, word_tokenize) -> tuple[float, float]:
    strip_punc = lambda s: "".join(c for c in str(s).lower().strip() if c not in CMRC_SP)  # noqa: E731
    pred_segs = ref_cmrc_segments(pred, word_tokenize, True)
    scores = []
    for g in golds:
        gold_segs = ref_cmrc_segments(g, word_tokenize, True)
        n = ref_lcs(gold_segs, pred_segs)
        if n == 0:
            scores.append(0.0)
            continue
        p, r = n / len(pred_segs), n / len(gold_segs)
        scores.append(2 * p * r / (p + r))
    return float(any(strip_punc(g) == strip_punc(pred) for g in golds)), max(scores)


def ref_cmrc(dataset: dict, preds: dict[str, str], word_tokenize) -> tuple[dict, dict]:
    per_q, em, f1, total = {}, 0.0, 0.0, 0
    for article in dataset["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                total += 1
                qid = qa["id"].strip()
                if qid not in preds:  # "Unanswered question", counted in SKIP
                    continue
                e, f = ref_cmrc_question([a["text"] for a in qa["answers"]], str(preds[qid]), word_tokenize)
                per_q[qid] = (e, f)
                em, f1 = em + e, f1 + f
    em, f1 = 100.0 * em / total, 100.0 * f1 / total
    return per_q, {"exact_match": em, "f1": f1, "average": (em + f1) / 2}


# --- seeded adversarial predictions -----------------------------------------------------------------
FULL_WIDTH = {c: chr(ord(c) + 0xFEE0) for c in string.ascii_letters + string.digits + string.punctuation}


def perturb(rng: random.Random, text: str, context: str, start: int) -> str:
    """One or more of: case, punctuation (ASCII and CJK), articles, odd whitespace, sub- and superstrings,
    empty answers, full-width and combining-mark variants, decimals, thousands, ellipses, other spans."""
    ops = [
        lambda s: s.upper(),
        lambda s: s.title(),
        lambda s: s.swapcase(),
        lambda s: rng.choice(["", "the ", "The ", "a ", "an "]) + s + rng.choice(["", " the", " a"]),
        lambda s: (
            rng.choice(['"', "'", "(", "《", "“", "「", "-", ""])
            + s
            + rng.choice([".", ",", "!", "?", '"', "'", ")", "。", "，", "！", "”", "》", "」", ":", "…", "……", ""])
        ),
        lambda s: (
            rng.choice([" ", "  ", "\t", "\n", "\u3000", "\xa0"]).join(s.split(" ")) + rng.choice(["", " ", "\n"])
        ),
        lambda s: " " + s + "  ",
        lambda s: s[rng.randint(0, max(0, len(s) // 2)) :],
        lambda s: s[: max(1, len(s) - rng.randint(0, max(0, len(s) // 2)))],
        lambda s: context[max(0, start - rng.randint(1, 12)) : start + len(s) + rng.randint(0, 12)],
        lambda s: "",
        lambda s: "".join(FULL_WIDTH.get(c, c) if rng.random() < 0.5 else c for c in s),
        lambda s: unicodedata.normalize("NFD", s) + rng.choice(["", "e\u0301", "\u0308"]),
        lambda s: s + rng.choice([" 4.9", "4.9", " 1,000", "1,000人", "1.1米", " 3.5%", " $3.88", "2,5"]),
        lambda s: s + rng.choice(["...", " ...", "... and so", "……", "..."]) + rng.choice(["", " more"]),
        lambda s: s + rng.choice(["? no", "! yes", '?"x', "'s", " don't", " n't", " (x)", " [y]", " & z"]),
        lambda s: context[(k := rng.randrange(max(1, len(context) - 20))) : k + rng.randint(1, 20)],
    ]
    for _ in range(rng.choice([1, 1, 2, 3])):
        text = rng.choice(ops)(text)
    return text


def predictions(dataset: dict, seed: int, drop: float = 0.0) -> dict[str, str]:
    rng = random.Random(seed)
    preds = {}
    for article in dataset["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                if rng.random() < drop:
                    continue
                answers = qa["answers"] or qa.get("plausible_answers") or [{"text": "", "answer_start": 0}]
                a = rng.choice(answers)
                start = a.get("answer_start", -1)
                start = start if start >= 0 else max(0, para["context"].find(a["text"]))
                preds[qa["id"]] = perturb(rng, a["text"], para["context"], start)
    return preds
