"""One path from text to an answer: the ``Predictor`` used by evaluate, predict, serve, fine-tuning's
evaluation and the benchmarks, over any engine (``albertlm.deploy.engines``).

    p = Predictor.load("runs/sst2")                                  # PyTorch, an HF-layout model dir
    p = Predictor.load("runs/sst2-onnx", engine="onnx", threads=2)   # an `albertlm export` dir
    p = Predictor.load("runs/sst2-onnx", engine="openvino")          # the same, through OpenVINO (bf16)
    p.predict([p.parse({"text": "a gripping film"})])   # [{"label": "positive", "score": ..., ...}]
    p.evaluate(examples)                                # (metrics, answers)

An engine maps a batch of int64 arrays to the head's named outputs as numpy arrays (torch, onnxruntime,
OpenVINO or ExecuTorch); everything else (encoding with QA windows and word alignment, length-bucketed
batching, decoding, scoring, the rows users see) is the same code for every engine, taken from the model's
task kind (``albertlm.tasks.kinds``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from albertlm.deploy import early_exit
from albertlm.deploy.engines import (
    Engine,
    EngineSettings,
    OnnxEngine,
    OnnxSession,
    OpenVinoEngine,
    OpenVinoSession,
    TorchEngine,
    load_engine,
    load_torch_model,
    require,
)
from albertlm.errors import DataError, NonFiniteOutput, UserError, check_settings, with_article
from albertlm.tasks import features as F
from albertlm.tasks.examples import check_json
from albertlm.tasks.kinds import InferenceSettings, TaskKind, kind_for_architecture, kind_of
from albertlm.tasks.registry import Task, get_task, task_from_info
from albertlm.tokenizer import Tokenizer, load_tokenizer

TASK_KEY = "albertlm_task"  # config.json entry: the task a model was fine-tuned on and its settings


# --------------------------------------------------------------------------- text in, answers out
class Predictor:
    """Examples in -> answers out, on any engine, in length-bucketed batches (results keep the input
    order). The task kind decides the encoding (QA contexts longer than one window are cut with
    doc-stride, tagging is per word), the decoding and the rows.

    ``task`` is the registered task the model was fine-tuned on (its metric is used by ``evaluate``); a
    model without one is served by the kind its head implies.
    """

    def __init__(self, engine: Engine, tokenizer: Tokenizer, kind: TaskKind,
                 task: Task | None = None, settings: InferenceSettings | None = None,
                 info: dict | None = None):  # fmt: skip
        self.engine, self.tokenizer, self.kind, self.task = engine, tokenizer, kind, task
        self.config = engine.config
        self.info = dict(info or {})
        s = settings or InferenceSettings()
        check_settings(s)  # as its flags are: the API's keywords and the server's settings alike
        limit = self.config.max_position_embeddings
        length = s.max_seq_length or self.info.get("max_seq_length") or (task.max_seq_length if task else limit)
        self.settings = replace(s, max_seq_length=min(int(length), limit))
        if self.settings.eval_batch_size < 1:
            raise UserError(f"--eval-batch-size must be >= 1, got {self.settings.eval_batch_size}")
        if kind.uses_label_names and not self.config.id2label:
            raise DataError("config.json has no id2label; was this model fine-tuned for a labelled task?")
        if self.config.vocab_size < tokenizer.vocab_size:
            raise DataError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model's vocab_size is "
                            f"{self.config.vocab_size}; use the tokenizer the model was trained with")  # fmt: skip
        self.exit_rule = early_exit.ExitRule.from_settings(self.settings)
        if self.exit_rule is not None:
            early_exit.check_exits(self.exit_rule, self.config, kind.name, engine)

    @classmethod
    def load(cls, directory: str | Path, engine: str = "torch", threads: int | None = None,
             tokenizer: str | Path | None = None, task: str | None = None,
             overrides: dict[str, Any] | None = None, precision: str = "auto",
             device: str = "auto") -> Predictor:  # fmt: skip
        """A model directory (torch) or an exported one (onnx, openvino); ``precision`` as in ``load_engine``.
        ``InferenceSettings`` saved at fine-tuning time (``max_seq_length``, the QA windows) apply unless
        ``overrides`` sets them."""
        unknown = sorted(set(overrides or {}) - {f.name for f in fields(InferenceSettings)})
        if unknown:
            raise UserError(f"unknown inference settings {', '.join(unknown)}; the settings are the fields of "
                            "InferenceSettings")
        runner = load_engine(directory, engine, threads, precision, device)
        info = dict(runner.config.extra.get(TASK_KEY) or {})
        name = task or info.get("name")
        task_obj = None
        if name:  # the saved task (a generic one with the user's columns), or the one --task names
            task_obj = task_from_info(name, info) if get_task(name).name == info.get("name") else get_task(name)
        kind = kind_of(task_obj) if task_obj else kind_for_architecture(runner.architecture, runner.config)
        if kind.architecture != runner.architecture:
            raise DataError(f"{directory} holds {with_article(runner.architecture)}, but task {task_obj.name} needs "
                            f"{with_article(kind.architecture)}; fine-tune for that task first")  # fmt: skip
        try:
            tok = load_tokenizer(tokenizer or directory)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{tokenizer or directory} holds no tokenizer (spiece.model / vocab.txt / tokenizer.json); pass "
                "--tokenizer DIR, or export with `albertlm export --tokenizer DIR`"
            ) from None
        saved = {f.name: info[f.name] for f in fields(InferenceSettings) if info.get(f.name) is not None}
        try:  # read back from config.json: held to the flags' rules, naming the file (not a 500 per request later)
            check_settings(InferenceSettings(**saved))
        except UserError as e:
            raise DataError(f"{Path(directory) / 'config.json'}: {TASK_KEY} holds a bad setting ({e}); fix the value "
                            "or fine-tune again") from None  # fmt: skip
        return cls(runner, tok, kind, task_obj, InferenceSettings(**{**saved, **(overrides or {})}), info)

    @classmethod
    def from_model(cls, model: nn.Module, tokenizer: Tokenizer, task: Task,
                   settings: InferenceSettings | None = None, precision: str = "auto") -> Predictor:  # fmt: skip
        """An in-memory PyTorch model (fine-tuning's evaluation)."""
        return cls(TorchEngine(model, precision), tokenizer, kind_of(task), task, settings)

    def with_settings(self, **changes: Any) -> Predictor:
        """The same engine and tokenizer with some inference settings changed (e.g. another exit rule)."""
        return Predictor(self.engine, self.tokenizer, self.kind, self.task, replace(self.settings, **changes),
                         self.info)  # fmt: skip

    # ------------------------------------------------------------------ the one path
    @property
    def labels(self) -> list[str] | None:
        if not self.kind.uses_label_names:
            return None
        return [str(self.config.id2label.get(i, f"LABEL_{i}")) for i in range(self.config.num_labels)]

    def parse(self, obj: Any, where: str = "input") -> Any:
        """A user's input (JSON object or plain string) -> an example of this model's kind. A model fine-tuned
        on the user's own columns also reads them: {"review": ...} when it was trained with --text-column review."""
        columns = self.task.columns if self.task is not None else None
        if columns is not None and isinstance(obj, dict):
            for flag, key in self.kind.input_keys.items():
                col = getattr(columns, flag)
                if col is not None and col in obj and key not in obj:
                    obj = {**{k: v for k, v in obj.items() if k != col}, key: obj[col]}
        return self.kind.parse(obj, where)

    def parse_line(self, line: str, where: str) -> Any:
        """A ``predict`` input line (a JSON object, or plain text) -> an example."""
        return self.parse(self.kind.read_line(line, where), where)

    def answers(self, examples: list) -> list[dict]:
        counts = {len(ex.options) for ex in examples} if self.kind.name == "choice" else set()
        if len(counts) > 1:  # one batch holds one number of options: answer each number's inputs together
            out: list[dict] = [{}] * len(examples)
            for n in counts:
                idx = [i for i, ex in enumerate(examples) if len(ex.options) == n]
                for i, answer in zip(idx, self.answers([examples[i] for i in idx]), strict=True):
                    out[i] = answer
            return out
        enc = self.kind.encode(self.task, examples, self.tokenizer, self.config.label2id, self.settings)
        out = self.forward(enc.features)
        answers = self.kind.decode(examples, enc, out, self.settings, self.config, self.info)
        for answer, layer in zip(answers, out.get("exit_layer", ()), strict=False):  # exits: one row per example
            answer["layer"] = int(layer)
        return answers

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One batch through the engine: at full depth, or with the exit rule (outputs then add exit_layer)."""
        if self.exit_rule is None:
            return self.engine(feed)
        layers = self.config.num_hidden_layers
        return early_exit.run(self.engine, feed, self.exit_rule, layers, self.kind.name == "regression")

    def batches(self, feats: list[dict]) -> Iterator[tuple[list[int], dict[str, np.ndarray]]]:
        """(feature indices, the engine's input arrays) per length-bucketed batch: what the engine is fed."""
        for idx in F.batches(feats, self.settings.eval_batch_size, None, self.settings.bucketing):
            batch = F.collate([feats[i] for i in idx], self.tokenizer.pad_id)
            yield idx, {k: v.numpy() for k, v in batch.items()}

    def inputs(self, examples: list) -> list[dict[str, np.ndarray]]:
        """The engine's input batches for ``examples``, encoded and batched as ``answers`` would feed them
        (int8 calibration reads these)."""
        enc = self.kind.encode(self.task, examples, self.tokenizer, self.config.label2id, self.settings)
        return [feed for _, feed in self.batches(enc.features)]

    def forward(self, feats: list[dict]) -> dict[str, list]:
        """Raw head outputs per feature, in feature order (rows trimmed of nothing: padding stays)."""
        out: dict[str, list] = {}
        order: list[int] = []
        for idx, feed in self.batches(feats):
            result = self.run(feed)
            for name, value in result.items():
                value = np.asarray(value)
                if value.dtype.kind == "f" and not np.isfinite(value).all():
                    raise NonFiniteOutput(f"the model computed a non-finite {name} (NaN or infinity) from these "
                                          "inputs: its weights or config.json are broken (layer_norm_eps, a "
                                          "damaged checkpoint); fine-tune or convert it again")  # fmt: skip
            order.extend(idx)
            for name, value in result.items():
                out.setdefault(name, []).extend(value)
        inverse = np.argsort(order)
        return {k: [v[i] for i in inverse] for k, v in out.items()}

    def predict(self, examples: list) -> list[dict[str, Any]]:
        """One row per example: what ``albertlm predict`` prints and the server returns."""
        rows = []
        for ex, a in zip(examples, self.answers(examples), strict=True):
            rows.append(self.kind.row(ex, a, self.config))
            if "layer" in a:
                rows[-1]["layer"] = a["layer"]  # early exit: the computed layer this input left at
        return rows

    def evaluate(self, examples: list) -> tuple[dict[str, float], list[dict]]:
        """The task's metrics on labelled examples, and the answers they were computed from."""
        if self.task is None:
            raise UserError("this model records no task; pass --task to evaluate it")
        self.kind.check_gold(examples)
        answers = self.answers(examples)
        result = self.kind.score(self.task, examples, answers, self.config)
        baseline = self.kind.majority_baseline(self.task, examples, self.config)
        if baseline is not None:  # the bar the main metric must clear (always the most frequent label)
            result["majority_baseline"] = baseline
        result["examples"] = float(len(examples))
        if answers and "layer" in answers[0]:
            result["mean_layers"] = float(np.mean([a["layer"] for a in answers]))
        return result, answers

    # ------------------------------------------------------------------ conveniences
    def __call__(self, inputs: list[Any]) -> list[dict[str, Any]]:
        """One answer per input: a text, a pair (``(text, text_b)``; for QA ``(question, context)``), or an
        object as ``predict`` reads it (``{"text": ...}``, ``{"tokens": [...]}``, ...)."""
        if isinstance(inputs, (str, dict)) or not inputs:
            raise UserError("inputs: give a non-empty list of inputs (one answer each), e.g. "
                            "predictor([\"a charming film\"])")  # fmt: skip
        pair = ("question", "context") if self.kind.name.startswith("qa") else ("text", "text_b")
        examples = []
        for i, obj in enumerate(inputs):
            try:  # text the tokenizer cannot take (a lone surrogate), or nesting past the server's limit
                check_json(list(obj) if isinstance(obj, tuple) else obj)
            except ValueError as e:
                raise UserError(f"inputs[{i}]: {e}") from None
            if isinstance(obj, (tuple, list)):
                if len(obj) != 2 or not all(isinstance(x, str) for x in obj):
                    raise UserError(f"input {i}: a pair is two texts ({pair[0]}, {pair[1]}), not {obj!r}")
                obj = {"id": str(i), pair[0]: obj[0], pair[1]: obj[1]}
            examples.append(self.parse(obj, f"input {i}"))
        return self.predict(examples)

    def classify(self, texts: list[str], pairs: list[str] | None = None) -> list[dict[str, Any]]:
        pairs = pairs or [None] * len(texts)
        return self.predict([self.parse({"text": a, "text_b": b}, f"input {i}")
                             for i, (a, b) in enumerate(zip(texts, pairs, strict=True))])  # fmt: skip

    def tag(self, texts: list[str]) -> list[dict[str, Any]]:
        return self.predict([self.parse({"text": t}, f"input {i}") for i, t in enumerate(texts)])

    def answer(self, questions: list[str], contexts: list[str]) -> list[dict[str, Any]]:
        return self.predict([self.parse({"id": str(i), "question": q, "context": c}, f"input {i}")
                             for i, (q, c) in enumerate(zip(questions, contexts, strict=True))])  # fmt: skip


__all__ = ["Engine", "EngineSettings", "OnnxEngine", "OnnxSession", "OpenVinoEngine", "OpenVinoSession", "Predictor",
           "TorchEngine", "load_engine", "load_torch_model", "require"]  # fmt: skip
