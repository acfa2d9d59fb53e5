"""Metrics against hand-computed values of the official scripts' definitions."""

from __future__ import annotations

import pytest

from albertlm.tasks import metrics


def test_classification_metrics():
    assert metrics.accuracy([1, 0, 1], [1, 1, 1])["accuracy"] == pytest.approx(2 / 3)
    # TP=1 FP=1 TN=2 FN=0: MCC = (1*2 - 1*0) / sqrt(2*1*3*2)
    assert metrics.matthews([1, 1, 0, 0], [1, 0, 0, 0])["mcc"] == pytest.approx(2 / 12**0.5)
    assert metrics.accuracy_f1([1, 1, 0, 0], [1, 0, 1, 0])["f1"] == pytest.approx(0.5)
    r = metrics.pearson_spearman([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 5.0])
    assert r["spearman"] == pytest.approx(1.0) and 0.95 < r["pearson"] < 1.0
    assert metrics.pearson_spearman([1.0, 1.0], [1.0, 2.0]) == {"pearson": 0.0, "spearman": 0.0}


def test_entity_f1():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "O"], ["B-ORG", "O"]]
    r = metrics.entity_f1(pred, gold)
    assert r["precision"] == 1.0 and r["recall"] == pytest.approx(2 / 3) and r["f1"] == pytest.approx(0.8)


def test_squad_v1_official_normalisation():
    assert metrics.normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert metrics.squad_em("the Denver Broncos", "Denver Broncos") == 1.0
    assert metrics.squad_f1("Denver Broncos won", "Denver Broncos") == pytest.approx(0.8)
    r = metrics.squad_v1({"a": "Denver Broncos", "b": "1990"}, {"a": ["Broncos", "Denver Broncos"], "b": ["1991"]})
    assert r == {"exact_match": 50.0, "f1": 50.0}
    assert metrics.squad_v1({}, {"a": ["x"]})["f1"] == 0.0  # a missing prediction scores 0


def test_squad_v2_best_threshold():
    answers = {"q1": ["Paris"], "q2": [], "q3": ["blue sky"]}
    preds = {"q1": "Paris", "q2": "London", "q3": "sky"}
    na = {"q1": 0.1, "q2": 0.9, "q3": 0.5}
    r = metrics.squad_v2(preds, answers, na)
    assert r["exact"] == pytest.approx(100 / 3) and r["f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)
    # thresholds: answering q1 and q3 and abstaining on q2 gives (1 + 2/3 + 1) / 3
    assert r["best_f1"] == pytest.approx(100 * (1 + 2 / 3 + 1) / 3) and r["best_f1_thresh"] == 0.5
    assert r["HasAns_exact"] == 50.0 and r["NoAns_f1"] == 0.0


def test_cmrc_official():
    assert metrics.mixed_segmentation("光荣和ω-force", rm_punc=True) == ["光", "荣", "和", "ωforce"]
    assert metrics.cmrc_f1(["光荣和ω-force"], "光荣和ω-force公司") == pytest.approx(0.8)
    assert metrics.cmrc_em(["《战国无双3》"], "战国无双3") == 1.0  # book-title marks are punctuation
    r = metrics.cmrc2018({"a": "光荣和ω-force", "b": "无关"}, {"a": ["光荣和ω-force"], "b": ["答案"]})
    assert r["exact_match"] == 50.0 and r["f1"] == 50.0 and r["average"] == 50.0
