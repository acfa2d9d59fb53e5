"""Early exit over ALBERT's layers: the exit rules and the one loop every engine runs.

Every computed ALBERT layer is the same function (one set of shared weights), so a model fine-tuned with
exits (``albertlm finetune --exits per-layer|shared``, ``albertlm.heads.ExitHeads``) can stop as soon as it
is sure. After each layer every row still running gets that layer's prediction, and the rule decides:

- patience t (PABEE, Zhou et al. 2020): stop once the predicted class has stayed the same for t more
  layers; for regression, once the value has moved by less than ``exit_delta`` for t layers;
- confidence p: stop at the first layer whose top probability is at least p;
- entropy x: stop at the first layer whose prediction entropy, divided by log(classes), is at most x;
- max layers n: never compute more than n layers.

Rules combine with "or"; a row that none stops runs to the last layer. Rows decide alone: a row that stops
leaves the batch, the others go on (trimmed to their own longest length), so a batch gains as well as a
single input, and a row exits at the same layer with the same answer alone or in any batch. Each answer
row carries ``layer``, the computed layer it left at (1-based).

An engine that runs exits has ``exit_start(batch) -> state`` (the first layer's input) and
``exit_step(state, layer) -> (state, logits)``; ``state`` is ``{"hidden": (N, S, H), "attention_mask":
(N, S)}`` (numpy arrays or torch tensors). The torch engine steps the model itself; the onnx and openvino
engines step the export's layer graphs (``ExitGraphs``): one embedding graph and one graph per stored
layer group, applied repeatedly, weights stored once.

Tagging and span QA have no exits: their answer is one decision per token (or per start/end position),
and a rule over hundreds of them would stop only when the slowest token settles; fine-tuning with
``--exits`` refuses them in one line.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from albertlm.errors import DataError, UserError
from albertlm.files import inside

EXIT_KINDS = ("classification", "regression", "choice")  # task kinds whose heads have exits
RULE_FIELDS = ("exit_patience", "exit_confidence", "exit_entropy", "exit_max_layers", "exit_delta")


@dataclass(frozen=True)
class ExitRule:
    """When a row stops (see the module docstring); built from the ``exit_*`` inference settings."""

    patience: int = 0
    confidence: float | None = None
    entropy: float | None = None
    max_layers: int | None = None
    delta: float = 0.1

    @classmethod
    def from_settings(cls, s: Any) -> ExitRule | None:
        """The rule of ``InferenceSettings`` ``s``, or None when it asks for no exit (full depth)."""
        rule = cls(s.exit_patience or 0, s.exit_confidence, s.exit_entropy, s.exit_max_layers, s.exit_delta)
        return rule if rule.active else None

    @property
    def active(self) -> bool:
        return bool(self.patience) or any(v is not None for v in (self.confidence, self.entropy, self.max_layers))

    def describe(self) -> str:
        parts = [f"patience {self.patience}" if self.patience else "",
                 f"confidence {self.confidence:g}" if self.confidence is not None else "",
                 f"entropy {self.entropy:g}" if self.entropy is not None else "",
                 f"max {self.max_layers} layers" if self.max_layers is not None else ""]  # fmt: skip
        return ", ".join(p for p in parts if p) or "full depth"

    def settings(self) -> dict[str, Any]:
        """The ``exit_*`` settings that give this rule (what deploy.json and config.json record)."""
        return dict(zip(RULE_FIELDS, asdict(self).values(), strict=True))


def check_exits(rule: ExitRule, config: Any, kind: str, engine: Any) -> None:
    """Refuse, in one line, a rule the model or engine cannot run."""
    if kind not in EXIT_KINDS:
        raise UserError(f"early exit is for {', '.join(EXIT_KINDS)} models; a {kind} model answers at full depth "
                        "(leave out the --exit-* flags)")  # fmt: skip
    if kind == "regression" and (rule.confidence is not None or rule.entropy is not None):
        raise UserError("a regression model has no class probabilities: use --exit-patience (with --exit-delta) "
                        "or --exit-max-layers, not --exit-confidence / --exit-entropy")  # fmt: skip
    if getattr(config, "exit_heads", "none") == "none":
        raise UserError("this model has no exits (config.json exit_heads is none): fine-tune it with --exits "
                        "per-layer (or shared), or --exits per-layer --train-exits-only from this model, or "
                        "leave out the --exit-* flags")  # fmt: skip
    if not getattr(engine, "can_exit", False):
        raise UserError(f"{engine.path if hasattr(engine, 'path') else 'this export'} has no exit graphs; export "
                        "the model again (albertlm export writes them for a model with exits)")  # fmt: skip


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _take(value: Any, rows: np.ndarray, length: int) -> Any:
    """Rows ``rows`` of a (N, S, ...) array or tensor, cut to ``length`` positions."""
    if isinstance(value, torch.Tensor):
        return value[torch.from_numpy(rows).to(value.device), :length]
    return np.ascontiguousarray(value[rows, :length])


def run(engine: Any, batch: dict[str, np.ndarray], rule: ExitRule, num_layers: int,
        regression: bool = False) -> dict[str, np.ndarray]:  # fmt: skip
    """One batch through ``engine`` with early exit: ``{"logits": (B, width), "exit_layer": (B,)}``.

    A (B, C, S) batch (multiple choice) runs B * C rows; the C rows of an example stop together, on the
    (B, C) choice logits."""
    ids = np.asarray(batch["input_ids"])
    group = ids.shape[1] if ids.ndim == 3 else 1
    mask = batch.get("attention_mask")
    mask = np.ones(ids.shape, dtype=np.int64) if mask is None else np.asarray(mask)
    lengths = mask.reshape(-1, ids.shape[-1]).sum(axis=1)  # real tokens per model row
    n = ids.shape[0]
    last = num_layers if rule.max_layers is None else min(rule.max_layers, num_layers)
    active = np.arange(n)  # examples still running
    out_logits: np.ndarray | None = None
    exit_layer = np.zeros(n, dtype=np.int64)
    prev = np.zeros(n)  # previous layer's class (or value), per example
    streak = np.zeros(n, dtype=np.int64)
    state = engine.exit_start(batch)
    for layer in range(last):
        state, logits = engine.exit_step(state, layer)
        logits = np.asarray(logits, dtype=np.float32).reshape(len(active), -1)  # (examples, width)
        if out_logits is None:
            out_logits = np.zeros((n, logits.shape[1]), dtype=np.float32)
        now, agreed = _agreement(logits, prev[active], streak[active], layer, rule, regression)
        stop = _stops(rule, logits, layer, last, agreed, regression)
        prev[active], streak[active] = now, agreed
        done = active[stop]
        out_logits[done], exit_layer[done] = logits[stop], layer + 1
        if stop.all():
            break
        if not stop.any():
            continue  # nobody left: the state goes on as it is, no copy
        keep = np.flatnonzero(~stop)
        active = active[keep]
        rows = (keep[:, None] * group + np.arange(group)).ravel()  # model rows of the examples that go on
        length = int(lengths[(active[:, None] * group + np.arange(group)).ravel()].max())
        state = {k: _take(v, rows, length) for k, v in state.items()}
    return {"logits": out_logits, "exit_layer": exit_layer}


def _agreement(logits: np.ndarray, prev: np.ndarray, streak: np.ndarray, layer: int, rule: ExitRule,
               regression: bool) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(this layer's prediction, how many layers in a row it has agreed with the one before)."""
    now = logits[:, 0] if regression else logits.argmax(axis=1).astype(np.float64)
    same = np.abs(now - prev) < rule.delta if regression else now == prev
    return now, np.where(same & (layer > 0), streak + 1, 0)


def _stops(rule: ExitRule, logits: np.ndarray, layer: int, last: int, agreed: np.ndarray,
           regression: bool) -> np.ndarray:  # fmt: skip
    """Which of the rows stop after computed layer ``layer`` (0-based); ``agreed``: layers in a row each
    row's prediction has not changed."""
    stop = np.full(len(logits), layer + 1 >= last)
    if rule.patience:
        stop |= agreed >= rule.patience
    if not regression and (rule.confidence is not None or rule.entropy is not None):
        p = _softmax(logits.astype(np.float64))
        if rule.confidence is not None:
            stop |= p.max(axis=1) >= rule.confidence
        if rule.entropy is not None and p.shape[1] > 1:
            h = -(p * np.log(np.clip(p, 1e-12, 1.0))).sum(axis=1) / math.log(p.shape[1])
            stop |= h <= rule.entropy
    return stop


def save_rule(model_dir: Path, rule: ExitRule) -> Path:
    """``rule`` becomes the model's default (config.json's task settings, rewritten atomically); predict,
    serve and export then use it. Returns the file written."""
    from albertlm.config import AlbertConfig
    from albertlm.deploy.engines import architecture_of
    from albertlm.deploy.inference import TASK_KEY

    config = AlbertConfig.load(model_dir)
    config.extra[TASK_KEY] = {**(config.extra.get(TASK_KEY) or {}), **rule.settings()}
    config.save(model_dir, architectures=[architecture_of(model_dir)])
    return Path(model_dir) / "config.json"


# --------------------------------------------------------------------------- exported layer graphs
def check_exit_entry(directory: Path, entry: Any, config: Any) -> None:
    """deploy.json's "exit" section holds to what the export wrote, checked at load (not a 500 per request
    later): heads the model has, one stored group per computed layer and one graph file per group in each
    variant, file names inside the folder, and a rule whose values its ``--exit-*`` flags would take."""
    where = f"{directory / 'deploy.json'} exit"
    try:
        if not isinstance(entry, dict) or not isinstance(entry.get("files"), dict) or not entry["files"]:
            raise ValueError("is not a table with a files table")
        if entry.get("heads") != config.exit_heads or config.exit_heads == "none":
            raise ValueError(f"heads {entry.get('heads')!r} is not the model's exit_heads {config.exit_heads!r}")
        groups = entry.get("group_of_layer")
        if not isinstance(groups, list) or len(groups) != config.num_hidden_layers:
            raise ValueError(f"group_of_layer must list one group per layer ({config.num_hidden_layers})")
        for variant, files in entry["files"].items():
            named = isinstance(files, dict) and isinstance(files.get("embed"), str)
            layers = files.get("layers") if named else None
            if not isinstance(layers, list) or not layers or not all(isinstance(n, str) for n in layers):
                raise ValueError(f"files.{variant} must name an embed file and a list of layer files")
            if not all(isinstance(g, int) and not isinstance(g, bool) and 0 <= g < len(layers) for g in groups):
                raise ValueError(f"group_of_layer {groups} must hold group numbers below {len(layers)} (the layer "
                                 f"files of {variant})")  # fmt: skip
            for name in (files["embed"], *layers):
                inside(directory, name, f"{where}.files.{variant}", DataError)
        rule = entry.get("rule")
        if rule is not None:
            from albertlm.errors import check_settings
            from albertlm.tasks.kinds import InferenceSettings

            if not isinstance(rule, dict) or set(rule) - set(RULE_FIELDS):
                raise ValueError(f"rule must be a table of {', '.join(RULE_FIELDS)}")
            try:
                check_settings(InferenceSettings(**rule))
            except UserError as e:
                raise ValueError(f"rule: {e}") from None
    except ValueError as e:
        raise DataError(f"{where}: {e}; export again: albertlm export --model DIR --out DIR") from None


class ExitGraphs:
    """An export's exit graphs on one runtime: ``exit_embed`` (ids -> the first layer's input) and one
    ``exit_layer_<g>`` per stored layer group ((hidden, attention_mask, layer) -> (hidden, logits), the
    classifier of ``layer`` picked inside the graph). ``session`` opens one graph file (an onnxruntime or
    OpenVINO session)."""

    def __init__(self, directory: Path, entry: dict[str, Any], session: Any, variant: str):
        """``variant``: which of the export's sets of graph files (fp32, int8, openvino_int8);
        ``session(path, outputs)`` opens one."""
        if variant not in entry["files"]:
            raise UserError(f"{directory} has no {variant} exit graphs; export with the matching --quantize / "
                            "--calibration, or choose another --precision")  # fmt: skip
        files = entry["files"][variant]
        where = f"{directory / 'deploy.json'} exit.files.{variant}"
        self.embed = session(inside(directory, files["embed"], where, DataError), ["hidden"])
        self.layers = [session(inside(directory, name, where, DataError), ["hidden_out", "logits"])
                       for name in files["layers"]]  # fmt: skip
        self.group_of_layer = list(entry["group_of_layer"])

    def exit_start(self, batch: dict[str, Any]) -> dict[str, np.ndarray]:
        ids = np.asarray(batch["input_ids"])
        flat = {k: np.asarray(v).reshape(-1, ids.shape[-1]) for k, v in batch.items()
                if k in ("input_ids", "attention_mask", "token_type_ids")}  # fmt: skip
        hidden = self.embed(flat)["hidden"]
        mask = flat.get("attention_mask", np.ones_like(flat["input_ids"]))
        return {"hidden": hidden, "attention_mask": mask.astype(np.int64)}

    def exit_step(self, state: dict[str, np.ndarray], layer: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
        graph = self.layers[self.group_of_layer[layer]]
        out = graph({"hidden": state["hidden"], "attention_mask": state["attention_mask"],
                     "layer": np.asarray(layer, dtype=np.int64)})  # fmt: skip
        return {**state, "hidden": out["hidden_out"]}, out["logits"]


__all__ = ["EXIT_KINDS", "RULE_FIELDS", "ExitGraphs", "ExitRule", "check_exit_entry", "check_exits", "run", "save_rule"]
