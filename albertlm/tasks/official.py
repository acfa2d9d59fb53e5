"""The input files of the official evaluation scripts, so anyone can check our scores with the scripts
themselves: SQuAD v1.1 ``evaluate-v1.1.py``, SQuAD v2.0 ``evaluate-v2.0.py``, CMRC 2018
``cmrc2018_evaluate.py``.

    files = write_official(task, examples, preds, null_scores, Path("runs/eval/official"))
    # then, in that folder: python evaluate-v2.0.py dev.json predictions.json --na-prob-file null_odds.json

Each script reads a gold file and a predictions file ``{question id: answer text}``; evaluate-v2.0.py also
reads the null scores ``{question id: score}`` (``--na-prob-file``). The gold file written here holds
exactly the evaluated questions in SQuAD JSON, so a ``--limit`` run or CMRC's original list format is
scored on the same questions as ours. Our scorer (``albertlm.tasks.metrics``) gives the same numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from albertlm.errors import DataError, UserError
from albertlm.files import write_text_atomic
from albertlm.tasks import metrics
from albertlm.tasks.examples import QAExample

SCRIPTS = {  # scorer -> (official script, gold "version" field it expects)
    "squad_v1": ("evaluate-v1.1.py", "1.1"),
    "squad_v2": ("evaluate-v2.0.py", "v2.0"),
    "cmrc2018": ("cmrc2018_evaluate.py", "v1.0"),
}


def official_scorer(task) -> str:  # noqa: ANN001 - a registry Task
    """Which official script scores ``task``: the one whose definition its metric implements."""
    scorers = {metrics.squad_v1: "squad_v1", metrics.squad_v2: "squad_v2", metrics.cmrc2018: "cmrc2018"}
    if task.metric not in scorers:
        raise UserError(f"--official-format: task {task.name} has no official evaluation script; only span QA "
                        "tasks do (squad, squad2, cmrc2018)")  # fmt: skip
    return scorers[task.metric]


@dataclass
class OfficialFiles:
    gold: Path
    predictions: Path
    null_odds: Path | None
    command: str  # the official script's command line, run inside the folder


def write_official(
    task,  # noqa: ANN001 - a registry Task
    examples: list[QAExample],
    predictions: dict[str, str],
    null_scores: dict[str, float] | None,
    out: Path,
) -> OfficialFiles:
    """Write ``dev.json`` (the evaluated questions), ``predictions.json`` and, for SQuAD 2.0,
    ``null_odds.json`` into ``out``, each atomically; returns their paths and the command to run."""
    scorer = official_scorer(task)
    script, version = SCRIPTS[scorer]
    missing = [ex.qid for ex in examples if ex.qid not in predictions]
    if missing:
        raise DataError(f"no prediction for {len(missing)} of {len(examples)} questions (first: {missing[0]!r})")
    if scorer == "squad_v2" and null_scores is None:
        raise DataError("SQuAD 2.0: null scores are needed for evaluate-v2.0.py --na-prob-file")
    out.mkdir(parents=True, exist_ok=True)
    gold, preds = out / "dev.json", out / "predictions.json"
    _write_json(gold, gold_json(examples, version))
    # in question order, as our scorer walks them: the v2 threshold search breaks ties in file order
    _write_json(preds, {ex.qid: predictions[ex.qid] for ex in examples})
    command = f"python {script} {gold.name} {preds.name}"
    odds = None
    if scorer == "squad_v2":
        odds = out / "null_odds.json"
        _write_json(odds, {ex.qid: float(null_scores[ex.qid]) for ex in examples})
        command += f" --na-prob-file {odds.name}"
    return OfficialFiles(gold, preds, odds, command)


def gold_json(examples: list[QAExample], version: str) -> dict:
    """SQuAD JSON of ``examples``: one paragraph per run of questions on the same context, in order."""
    paragraphs: list[dict] = []
    for ex in examples:
        if not paragraphs or paragraphs[-1]["context"] != ex.context:
            paragraphs.append({"context": ex.context, "qas": []})
        qa = {
            "id": ex.qid,
            "question": ex.question,
            "answers": [{"text": t, "answer_start": s} for t, s in zip(ex.answers, ex.answer_starts, strict=True)],
        }
        if ex.is_impossible:
            qa["is_impossible"] = True
        paragraphs[-1]["qas"].append(qa)
    return {"version": version, "data": [{"title": "albertlm evaluation", "paragraphs": paragraphs}]}


def _write_json(path: Path, obj: dict) -> None:
    write_text_atomic(path, json.dumps(obj, ensure_ascii=False, indent=1) + "\n")
