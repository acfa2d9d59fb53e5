"""The official scripts' input files: written for real dev questions with seeded adversarial predictions,
then read back and scored by the reference implementations of the scripts, which must print our numbers."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from official_reference import NeedsPunktModel, perturb, ref_cmrc, ref_cmrc_question, ref_squad_v1, ref_squad_v2

from albertlm.tasks import RowPolicy, get_task, metrics, read_split
from albertlm.tasks.official import gold_json, official_scorer, write_official


def _adversarial(examples, seed: int) -> dict[str, str]:
    rng = random.Random(seed)
    out = {}
    for ex in examples:
        text, start = (ex.answers[0], ex.answer_starts[0]) if ex.answers else ("", 0)
        out[ex.qid] = perturb(rng, text, ex.context, max(start, 0))
    return out


def _read(files) -> tuple[dict, dict, dict | None]:  # noqa: ANN001
    load = lambda p: json.loads(p.read_text(encoding="utf-8"))  # noqa: E731
    return load(files.gold), load(files.predictions), load(files.null_odds) if files.null_odds else None


def test_squad_v1_files_score_as_ours(data: Path, tmp_path: Path):
    task = get_task("squad")
    examples = read_split(task, data / "squad_v1.1", "dev", RowPolicy())[0][:300]
    preds = _adversarial(examples, 0)
    files = write_official(task, examples, preds, None, tmp_path / "official")
    assert files.command == "python evaluate-v1.1.py dev.json predictions.json" and files.null_odds is None
    gold, written, _ = _read(files)
    assert gold["version"] == "1.1" and written == preds and list(written) == [ex.qid for ex in examples]
    ours = metrics.squad_v1(preds, {ex.qid: ex.answers for ex in examples})
    assert ref_squad_v1(gold, written)[1] == pytest.approx(ours, abs=1e-9)


@pytest.mark.shared  # counts of the full dev sets
def test_squad_v2_files_score_as_ours(full_data: Path, tmp_path: Path):
    task = get_task("squad2")
    examples = read_split(task, full_data / "squad_v2_subset", "dev", RowPolicy())[0]
    preds = _adversarial(examples, 1)
    rng = random.Random(1)
    null = {ex.qid: rng.choice([-1.0, 0.5, 1.0, 2.5]) for ex in examples}  # ties, and some above 1.0
    files = write_official(task, examples, preds, null, tmp_path / "official")
    assert files.command == "python evaluate-v2.0.py dev.json predictions.json --na-prob-file null_odds.json"
    gold, written, odds = _read(files)
    assert gold["version"] == "v2.0" and written == preds and odds == null and list(odds) == list(null)
    assert sum(qa.get("is_impossible", False) for p in gold["data"][0]["paragraphs"] for qa in p["qas"]) > 300
    ours = metrics.squad_v2(preds, {ex.qid: ex.answers for ex in examples}, null)
    assert ref_squad_v2(gold, written, odds)[3] == pytest.approx(ours, abs=1e-9)


@pytest.mark.shared  # counts of the full dev sets
def test_cmrc_files_from_the_original_list_format(full_data: Path, tmp_path: Path, offline_word_tokenize):
    task = get_task("cmrc2018")
    original = full_data / "cmrc2018" / "data" / "cmrc2018_dev.json"  # CMRC's own format, not SQuAD's
    examples = read_split(task, full_data / "cmrc2018", "dev", RowPolicy(), original)[0][:300]
    preds = _adversarial(examples, 2)
    kept = []
    for ex in examples:  # a "." inside a run: the English Punkt model's lists decide (see test_task_metrics)
        try:
            ref_cmrc_question(ex.answers, preds[ex.qid], offline_word_tokenize)
            kept.append(ex)
        except NeedsPunktModel:
            del preds[ex.qid]
    examples = kept
    assert len(examples) > 280
    files = write_official(task, examples, preds, None, tmp_path / "official")
    assert files.command == "python cmrc2018_evaluate.py dev.json predictions.json"
    gold, written, _ = _read(files)
    assert [qa["id"] for p in gold["data"][0]["paragraphs"] for qa in p["qas"]] == [ex.qid for ex in examples]
    assert written == preds and "\\u" not in files.predictions.read_text(encoding="utf-8")  # UTF-8, readable
    ours = metrics.cmrc2018(preds, {ex.qid: ex.answers for ex in examples})
    assert ref_cmrc(gold, written, offline_word_tokenize)[1] == pytest.approx(ours, abs=1e-12)


def test_gold_json_groups_questions_by_context():
    from albertlm.tasks.examples import QAExample

    exs = [QAExample("a", "q1", "ctx one", ["one"], [4]), QAExample("b", "q2", "ctx one", ["ctx"], [0]),
           QAExample("c", "q3", "ctx two", [], [], True)]  # fmt: skip
    doc = gold_json(exs, "v2.0")
    paras = doc["data"][0]["paragraphs"]
    assert [len(p["qas"]) for p in paras] == [2, 1] and paras[1]["qas"][0] == {
        "id": "c", "question": "q3", "answers": [], "is_impossible": True}  # fmt: skip
    assert paras[0]["qas"][0]["answers"] == [{"text": "one", "answer_start": 4}]


def test_refusals_are_clear(tmp_path: Path):
    from albertlm.tasks.examples import QAExample

    with pytest.raises(ValueError, match="sst2 has no official evaluation script"):
        official_scorer(get_task("sst2"))
    exs = [QAExample("a", "q", "c", ["c"], [0]), QAExample("b", "q", "c", ["c"], [0])]
    with pytest.raises(ValueError, match=r"no prediction for 1 of 2 questions \(first: 'b'\)"):
        write_official(get_task("squad"), exs, {"a": "c"}, None, tmp_path)
    with pytest.raises(ValueError, match="null scores are needed"):
        write_official(get_task("squad2"), exs, {"a": "c", "b": ""}, None, tmp_path)
    assert not any(tmp_path.iterdir())  # nothing written on refusal
