"""The accuracy gate of every int8 export: int8 is measured against fp32 before the export is moved into place.

    albertlm export --model runs/sst2 --out runs/sst2-onnx --quantize int8 --gate-data data/glue_sst2
    albertlm export --model runs/sst2 --format executorch --out runs/sst2-pte --quantize int8 --calibration dev.txt

With ``--gate-data`` (labelled examples, read as ``albertlm evaluate --data`` reads them) the export scores the
task's main metric on the fp32 and on each int8 variant (onnxruntime's int8 graph, OpenVINO's static int8
file, the int8 ``.pte``); the loss is fp32 minus int8 in points (percentage points of accuracy, F1, ...).
Without labels, ``--calibration`` inputs give the share of answers (labels, tags, spans) int8 changes: a
changed answer is at most one lost, so that share bounds the loss from above. Both scores go into
deploy.json ("int8_gate"); past ``--max-int8-drop`` points the export stops with one line saying what was
lost and what to try, and the folder keeps what it held before (a worse int8 never replaces a good export).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from albertlm.errors import UserError

GATE_SIZE = 1000  # labelled examples (or calibration inputs) scored: a point is then 10 of them


class Int8GateFailed(UserError):
    """The int8 variant lost more than ``--max-int8-drop`` points against fp32."""


@dataclass(frozen=True)
class Int8Gate:
    """What the gate measures on: ``data`` (labelled, as ``evaluate --data``) or else ``calibration`` (inputs
    as ``predict`` reads them); ``tokenizer`` when the model folder holds none; ``max_drop`` in points."""

    data: Path | None = None
    calibration: Path | None = None
    tokenizer: Path | None = None
    max_drop: float = 1.0
    split: str = "dev"

    @property
    def active(self) -> bool:
        return self.data is not None or self.calibration is not None

    def measure(self, directory: Path, engine: str, precisions: tuple[str, ...] = ("int8",)) -> dict[str, Any]:
        """fp32 against each int8 ``precisions`` of ``engine`` on the export in ``directory``; raises
        ``Int8GateFailed`` past ``max_drop``. Returns deploy.json's "int8_gate" entry."""
        from albertlm.deploy.inference import Predictor

        fp32 = Predictor.load(directory, engine=engine, precision="fp32", tokenizer=self.tokenizer)
        result: dict[str, Any] = {"max_drop_points": self.max_drop}
        if self.data is not None:
            examples = self._labelled(fp32)
            scale = 1.0 if fp32.kind.name.startswith("qa") else 100.0  # QA scores are already in points
            metric = fp32.task.main_metric
            base = fp32.evaluate(examples)[0][metric] * scale
            result.update(data=str(self.data), examples=len(examples), metric=metric, fp32=round(base, 4))
        else:
            examples = self._inputs(fp32)
            base_rows = fp32.predict(examples)
            result.update(data=str(self.calibration), examples=len(examples), metric="answers changed (%)")
        for precision in precisions:
            int8 = Predictor.load(directory, engine=engine, precision=precision, tokenizer=self.tokenizer)
            if self.data is not None:
                score = int8.evaluate(examples)[0][metric] * scale
                drop = base - score
            else:
                rows = int8.predict(examples)
                changed = sum(_answer(a) != _answer(b) for a, b in zip(base_rows, rows, strict=True))
                score = 100.0 * changed / len(examples)
                drop = score
            key = f"{engine}_{precision}" if engine != "onnx" or precision != "int8" else "int8"
            result[key] = {"score": round(score, 4), "drop_points": round(drop, 4)}
            if drop > self.max_drop:
                raise Int8GateFailed(self._failure(engine, result, drop))
        return result

    def _failure(self, engine: str, result: dict[str, Any], drop: float) -> str:
        what = (f"int8 {result['metric']} fell {drop:.2f} points below fp32 ({result['fp32']:.2f}) on "
                f"{result['examples']} examples of {result['data']}" if self.data is not None else
                f"int8 changed {drop:.2f}% of the answers fp32 gives on {result['examples']} inputs of "
                f"{result['data']}")  # fmt: skip
        tries = {
            "onnx": "try static int8 (--calibration FILE, run by --engine openvino), a --graph standard export, or "
                    "keep fp32",
            "openvino": "try more --calibration inputs like the served ones, or onnxruntime's dynamic int8 "
                        "(--engine onnx)",
            "executorch": "try --calibration with more inputs like the served ones (static int8), leave "
                          "--calibration out (dynamic int8, per row), or keep fp32",
        }[engine]  # fmt: skip
        return (
            f"int8 gate: {what}, past --max-int8-drop {self.max_drop:g}; {tries}; nothing was written "
            "(raise --max-int8-drop to accept it)"
        )

    def _labelled(self, predictor: Any) -> list:
        from albertlm.tasks import RowPolicy, read_split

        if predictor.task is None:
            raise UserError("--gate-data needs a model that records its task (fine-tuned by albertlm finetune)")
        examples, _ = read_split(predictor.task, self.data, self.split, RowPolicy(False))
        if not examples:
            raise UserError(f"--gate-data {self.data} holds no {self.split} examples")
        return examples[:GATE_SIZE]

    def _inputs(self, predictor: Any) -> list:
        examples = []
        with open(self.calibration, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    examples.append(predictor.parse_line(line, f"{self.calibration}:{n}"))
                if len(examples) == GATE_SIZE:
                    break
        return examples


def _answer(row: dict[str, Any]) -> Any:
    """What a row answers (its label, tags, span or value), without the scores that int8 always moves."""
    for key in ("label", "tags", "answer", "option"):
        if key in row:
            return row[key]
    return round(float(row.get("value", row.get("score", 0.0))), 2)


__all__ = ["GATE_SIZE", "Int8Gate", "Int8GateFailed"]
