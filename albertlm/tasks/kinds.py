"""Task kinds: everything that differs between classification, regression, tagging, span QA (v1 and v2)
and multiple choice, in one place. Training, evaluation, prediction, serving and export ask the kind;
no other module branches on it.

For each kind: its head (the model class, ``albertlm.heads.HEADS``), how examples become model inputs
(QA: doc-stride windows; tagging: word-aligned pieces; choice: one row per option), how the model's
outputs become answers (labels, per-word tags, spans), how answers are scored, what one prediction row
looks like (the JSON line ``predict`` writes and the server returns), and how a user's input object
becomes an example.

    kind = kind_of(task)
    enc = kind.encode(examples, tokenizer, label2id, settings)
    answers = kind.decode(examples, enc, outputs, settings, config)
    kind.score(task, examples, answers, config), [kind.row(ex, a, config) for ...]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from albertlm.errors import DataError, with_article
from albertlm.tasks import features as F
from albertlm.tasks import generic, metrics, squad
from albertlm.tasks.examples import (
    ChoiceExample,
    QAExample,
    TaggingExample,
    TextExample,
    check_json,
    is_number,
    load_json_line,
)

NULL_THRESHOLD_KEY = "null_threshold"  # SQuAD 2.0: answer "" when the null score is above this


@dataclass
class InferenceSettings:
    """How inputs are cut and batched, and how answers are decoded (evaluate, predict, serve, finetune)."""

    max_seq_length: int | None = field(default=None, metadata={"min": 8,
        "help": "tokens per sequence, specials included (default: the saved fine-tuning value, else the task's)"})
    eval_batch_size: int = field(default=64, metadata={"help": "sequences per forward when evaluating or predicting",
                                                       "min": 1})
    bucketing: bool = field(default=True, metadata={"help": "sort inputs by length before batching (less padding)"})
    doc_stride: int = field(default=128, metadata={"help": "QA: tokens between the starts of a long context's windows",
                                                   "min": 1})
    max_query_length: int = field(default=64, metadata={"help": "QA: question tokens kept", "min": 1})
    max_answer_length: int = field(default=30, metadata={"help": "QA: longest answer, in tokens", "min": 1})
    n_best: int = field(default=20, metadata={"help": "QA: start and end candidates searched per window", "min": 1})
    align_to_words: bool = field(default=True, metadata={"help": "QA: widen an answer to the whole words its first "
                                 "and last pieces belong to, as the official evaluation reads answers (--no-align-"
                                 "to-words: the span's pieces only, as the original's predictions)"})
    # Early exit (albertlm.deploy.early_exit), for models fine-tuned with --exits; rules combine with "or".
    exit_patience: int = field(default=0, metadata={"min": 0, "help": "early exit: a row stops once its predicted "
                               "class has stayed the same for N more layers (PABEE; 0: off)"})
    exit_confidence: float | None = field(default=None, metadata={"above": 0, "max": 1, "help": "early exit: a row "
                                          "stops at the first layer whose top probability is at least P"})
    exit_entropy: float | None = field(default=None, metadata={"min": 0, "max": 1, "help": "early exit: a row stops "
                                       "at the first layer whose prediction entropy / log(classes) is at most X"})
    exit_max_layers: int | None = field(default=None, metadata={"min": 1, "help": "early exit: compute at most N "
                                        "layers"})
    exit_delta: float = field(default=0.1, metadata={"above": 0, "help": "early exit, regression: a layer agrees "
                              "with the one before when the value moved by less than this"})


@dataclass
class Encoded:
    """Model inputs for a list of examples, and what decoding needs to map outputs back to them."""

    features: list[dict]  # one per model row (several per example for long QA contexts)
    windows: list | None = None  # QA: squad.QAFeature per feature (token -> character spans)
    dropped: int = 0  # QA training: examples whose gold answer is not in their context


class TaskKind(ABC):
    """What one kind of task does at each step; the concrete kinds below fill in the abstract methods."""

    name: ClassVar[str]
    architecture: ClassVar[str]  # the head class (a key of albertlm.heads.HEADS)
    label_field: ClassVar[str] = "label"  # the example attribute holding gold labels
    uses_label_names: ClassVar[bool] = False  # id2label comes from the training labels
    endpoint: ClassVar[str | None] = None  # the server's shortcut, POST /v1/<endpoint>, besides /v1/predict
    # a generic task's column flags (albertlm.tasks.generic.UserData) -> the input field ``parse`` reads, so a
    # model trained on {"review": ...} rows also answers {"review": ...} inputs
    input_keys: ClassVar[dict[str, str]] = {}

    # ---------------------------------------------------------------- model
    def head_config(self, labels: list[str] | None) -> dict[str, Any]:
        """Config fields the head needs (``id2label``, ``problem_type``)."""
        return {}

    def label_set(self, task: Any, train_examples: list) -> list[str] | None:
        return None

    def label_id(self, task: Any, label2id: dict[str, int], ex: Any) -> Any:
        return getattr(ex, self.label_field)

    def check_labels(self, task: Any, label2id: dict[str, int], examples: list) -> None:
        """Before training: every gold answer of ``examples`` (the dev file) is one the model can give; the
        first that is not raises a DataError naming it and its file:line."""
        for ex in examples:
            if getattr(ex, self.label_field) is not None:
                self.label_id(task, label2id, ex)

    def label_counts(self, task: Any, examples: list) -> dict[str, int] | None:
        """How often each class occurs (classification), for the imbalance report; None for other kinds."""
        return None

    # ---------------------------------------------------------------- your own data (generic tasks)
    def fit(self, task: Any, train: list) -> Any:
        """A generic task adjusted to what its training file holds (e.g. SQuAD 2.0 questions)."""
        return task

    def restore(self, task: Any, info: dict) -> Any:
        """The adjustment ``fit`` made, from what the fine-tuned model recorded (config.json)."""
        return task

    # ---------------------------------------------------------------- examples -> inputs
    @abstractmethod
    def encode(self, task: Any, examples: list, tok: Any, label2id: dict, s: InferenceSettings,
               training: bool = False) -> Encoded:  # fmt: skip
        """Model inputs for ``examples`` (with labels in training) and what decoding needs."""

    def check_gold(self, examples: list, need: str = "evaluation") -> None:
        """Evaluation (or training) needs gold answers: refuse an unlabeled file with the first row that has none."""
        unlabeled = [ex.source for ex in examples if getattr(ex, self.label_field) is None]
        if unlabeled:
            hint = {"training": "your own data: --label-column NAME",
                    "evaluation": "for a test set use predict"}.get(need, "pass a labelled --eval-file or --holdout N")
            raise DataError(f"{unlabeled[0]}: no label; {need} needs a labeled file (does it have a label column? "
                            f"{hint})")

    # ---------------------------------------------------------------- outputs -> answers
    @abstractmethod
    def decode(self, examples: list, enc: Encoded, out: dict[str, list], s: InferenceSettings, config: Any,
               info: dict | None = None) -> list[dict]:  # fmt: skip
        """One answer per example, a dict whose fields ``row`` and ``score`` read."""

    @abstractmethod
    def score(self, task: Any, examples: list, answers: list[dict], config: Any) -> dict[str, float]:
        """The task's metrics of ``answers`` against the examples' gold labels."""

    def majority_baseline(self, task: Any, examples: list, config: Any) -> float | None:
        """The main metric of always answering the label most frequent among ``examples``' gold labels: the bar a
        model must clear to have learned anything (None where a kind has no label to repeat)."""
        return None

    @abstractmethod
    def row(self, ex: Any, answer: dict, config: Any) -> dict[str, Any]:
        """The JSON object ``predict`` prints and the server returns for one input."""

    # ---------------------------------------------------------------- user input -> example
    @abstractmethod
    def parse(self, obj: Any, where: str) -> Any:
        """One user input (a JSON object, or a plain string) -> an unlabeled example."""

    def parse_line(self, line: str, where: str) -> Any:
        """A ``predict`` input line: a JSON object, else the plain text itself."""
        return self.parse(self.read_line(line, where), where)

    @staticmethod
    def read_line(line: str, where: str) -> Any:
        """A JSON object when the line is one, else the line's text; either is Unicode text nesting no deeper
        than ``MAX_JSON_DEPTH`` (the server's rule too), or one DataError naming ``where``."""
        try:
            if not line.lstrip().startswith("{"):
                check_json(line)
                return line
            return load_json_line(line)
        except ValueError as e:
            raise DataError(f"{where}: {e}") from None

    def __repr__(self) -> str:
        return f"TaskKind({self.name})"


def _labels(config: Any) -> list[str]:
    id2label = config.id2label or {}
    return [str(id2label.get(i, f"LABEL_{i}")) for i in range(config.num_labels)]


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _text_field(obj: dict, keys: tuple[str, ...]) -> str | None:
    value = next((obj[k] for k in keys if k in obj), None)
    if value is not None and not isinstance(value, str):
        raise DataError(f'"{next(k for k in keys if k in obj)}" must be a string, got {type(value).__name__}')
    return value


class Classification(TaskKind):
    name = "classification"
    architecture = "AlbertForSequenceClassification"
    uses_label_names = True
    endpoint = "classify"
    input_keys: ClassVar[dict[str, str]] = {"text_column": "text", "pair_column": "text_b"}
    TEXT_KEYS: ClassVar[tuple[str, ...]] = ("text", "text_a", "sentence", "sentence1")
    PAIR_KEYS: ClassVar[tuple[str, ...]] = ("text_b", "pair", "sentence2")

    def head_config(self, labels):
        head: dict[str, Any] = {"problem_type": "single_label_classification"}
        if labels is not None:
            head["id2label"] = dict(enumerate(labels))
        return head

    def label_set(self, task, train_examples):
        if task.labels is not None:
            return list(task.labels)
        own = train_examples[0].label_names if train_examples else None
        if own:  # a datasets ClassLabel: its names in its id order, so ids mean what they meant in the data
            return list(own)
        counts = self.label_counts(task, train_examples)
        if not counts:
            raise DataError(f"task {task.name}: the training file has no labels")
        if len(counts) == 1:
            where = train_examples[0].source.rsplit(":", 1)[0]
            raise DataError(f"{where}: every training label is {next(iter(counts))!r}; a classifier needs two or "
                            "more classes (is --label-column the right column?)")  # fmt: skip
        # numbers in numeric order ("2" before "10"), names alphabetically: the ids are stable and readable
        numeric = all(is_number(k) for k in counts)
        return sorted(counts, key=(lambda k: (float(k), k)) if numeric else None)

    def label_counts(self, task, examples):
        return dict(Counter(task.aliases.get(ex.label, ex.label) for ex in examples if ex.label is not None))

    def label_id(self, task, label2id, ex):
        name = task.aliases.get(ex.label, ex.label)
        if name not in label2id:
            raise DataError(f"{ex.source}: unknown label {ex.label!r}; task {task.name} has labels {sorted(label2id)}")
        return label2id[name]

    def encode(self, task, examples, tok, label2id, s, training=False):
        gold = [None if ex.label is None else self.label_id(task, label2id, ex) for ex in examples]
        return Encoded(F.encode_text(examples, gold, tok, s.max_seq_length))

    def decode(self, examples, enc, out, s, config, info=None):
        probs = _softmax(np.stack(out["logits"]).astype(np.float64))
        return [{"label_id": int(p.argmax()), "probs": p} for p in probs]

    def score(self, task, examples, answers, config):
        gold = [self.label_id(task, config.label2id, ex) for ex in examples]
        return task.metric([a["label_id"] for a in answers], gold)

    def majority_baseline(self, task, examples, config):
        return _majority(task, [self.label_id(task, config.label2id, ex) for ex in examples])

    def row(self, ex, answer, config):
        labels, p = _labels(config), answer["probs"]
        best = answer["label_id"]
        return {"label": labels[best], "score": float(p[best]),
                "probabilities": {lab: float(q) for lab, q in zip(labels, p, strict=True)}}  # fmt: skip

    def parse(self, obj, where):
        if isinstance(obj, str):
            a, _, b = obj.partition("\t")  # a plain line: the text, a tab before the second text of a pair
            return TextExample(a, b or None, None, where)
        if not isinstance(obj, dict):
            raise DataError(f'{where}: expected a JSON object with "text" (and "text_b" for a pair) or a string')
        try:
            a, b = _text_field(obj, self.TEXT_KEYS), _text_field(obj, self.PAIR_KEYS)
        except DataError as e:
            raise DataError(f"{where}: {e}") from None
        if a is None:
            null = next((k for k in self.TEXT_KEYS if k in obj), None)  # present, but null
            raise DataError(f'{where}: "{null}" must be a string, got null' if null
                            else f'{where}: no "text" field (has {sorted(obj)})')
        return TextExample(a, b, None, where)


class Regression(Classification):
    name = "regression"
    uses_label_names = False

    def label_counts(self, task, examples):
        return None

    def head_config(self, labels):
        return {"id2label": {0: "score"}, "problem_type": "regression"}

    def label_set(self, task, train_examples):
        return None

    def label_id(self, task, label2id, ex):
        try:
            return float(ex.label)
        except (TypeError, ValueError):
            msg = f"{ex.source}: label {ex.label!r} is not a number (task {task.name} is regression)"
            raise DataError(msg) from None

    def decode(self, examples, enc, out, s, config, info=None):
        return [{"value": float(x[0])} for x in out["logits"]]

    def score(self, task, examples, answers, config):
        gold = [self.label_id(task, config.label2id, ex) for ex in examples]
        return task.metric([a["value"] for a in answers], gold)

    def row(self, ex, answer, config):
        return {"value": answer["value"]}


class Tagging(TaskKind):
    name = "tagging"
    architecture = "AlbertForTokenClassification"
    label_field = "tags"
    uses_label_names = True
    endpoint = "tag"
    input_keys: ClassVar[dict[str, str]] = {"text_column": "tokens"}

    def head_config(self, labels):
        return {} if labels is None else {"id2label": dict(enumerate(labels))}

    def label_set(self, task, train_examples):
        if task.labels is not None:
            return list(task.labels)
        return ["O", *sorted({t for ex in train_examples for t in ex.tags or []} - {"O"})]

    def fit(self, task, train):
        if generic.is_bio({t for ex in train for t in ex.tags or []}):
            return task
        return self.restore(task, {"main_metric": "token_accuracy"})

    def restore(self, task, info):
        # tags that are not entity chunks (part of speech, say): seqeval would mis-chunk them
        if info.get("main_metric") == "token_accuracy":
            return replace(task, metric=metrics.token_accuracy, main_metric="token_accuracy")
        return task

    def check_labels(self, task, label2id, examples):
        for ex in examples:
            unknown = sorted(set(ex.tags or []) - set(label2id))
            if unknown:
                raise DataError(f"{ex.source}: tag {unknown[0]!r} is not among the training tags {sorted(label2id)}")

    def encode(self, task, examples, tok, label2id, s, training=False):
        return Encoded(F.encode_tagging(examples, tok, label2id, s.max_seq_length))

    def decode(self, examples, enc, out, s, config, info=None):
        """One tag per word: the tag of the word's first piece; words cut off by the length limit get "O"."""
        labels = _labels(config)
        answers = []
        for ex, f, logits in zip(examples, enc.features, out["logits"], strict=True):
            probs = _softmax(np.asarray(logits, dtype=np.float64))
            tags, scores = ["O"] * len(ex.words), [None] * len(ex.words)
            for pos, w in enumerate(f["word_index"]):
                if w >= 0:
                    best = int(probs[pos].argmax())
                    tags[w], scores[w] = labels[best], float(probs[pos, best])
            answers.append({"tags": tags, "scores": scores})
        return answers

    def score(self, task, examples, answers, config):
        return task.metric([a["tags"] for a in answers], [ex.tags for ex in examples])

    def row(self, ex, answer, config):
        return {"tokens": ex.words, "tags": answer["tags"], "scores": answer["scores"]}

    def parse(self, obj, where):
        words = obj.get("tokens") if isinstance(obj, dict) else None
        if words is not None:
            if not isinstance(words, list) or not all(isinstance(w, str) and w for w in words):
                raise DataError(f'{where}: "tokens" must be a list of non-empty strings')
            return TaggingExample(list(words), None, where)
        text = obj.get("text") if isinstance(obj, dict) else obj
        if not isinstance(text, str):
            raise DataError(f'{where}: tagging needs "tokens" (a list of words) or "text" (a string)')
        # words: whitespace-separated, or characters for unsegmented text (Chinese)
        return TaggingExample(text.split() if " " in text.strip() else list(text.strip()), None, where)


class SpanQA(TaskKind):
    """SQuAD 1.1 / CMRC 2018: the best span over all doc-stride windows of the context."""

    name = "qa"
    architecture = "AlbertForQuestionAnswering"
    label_field = "answers"
    endpoint = "answer"

    def encode(self, task, examples, tok, label2id, s, training=False):
        windows, dropped = squad.make_features(examples, tok, s.max_seq_length, s.doc_stride, s.max_query_length,
                                               training)  # fmt: skip
        feats = [self._feature(w, training) for w in windows]
        if training and not feats:
            raise DataError(f"task {task.name}: no training windows ({dropped} answers not found in their context)")
        return Encoded(feats, windows, dropped)

    def _feature(self, w: squad.QAFeature, training: bool) -> dict:
        d = {"input_ids": w.input_ids, "token_type_ids": w.token_type_ids}
        if training:
            d["start_positions"], d["end_positions"] = w.start_position, w.end_position
        return d

    def fit(self, task, train):
        if any(ex.is_impossible for ex in train):  # SQuAD 2.0: the answerability head and its scoring
            return self.restore(task, {"kind": "qa_v2"})
        return task

    def restore(self, task, info):
        if info.get("kind") == "qa_v2":
            return replace(task, kind="qa_v2", metric=metrics.squad_v2, main_metric="best_f1")
        return task

    def check_gold(self, examples, need="evaluation"):
        no_gold = [ex.source for ex in examples if not ex.answers and not ex.is_impossible]
        if no_gold:
            raise DataError(f"{no_gold[0]}: question without answers; {need} needs gold answers")

    def decode(self, examples, enc, out, s, config, info=None):
        spans = squad.best_spans_v1(examples, enc.windows, out["start_logits"], out["end_logits"], s.n_best,
                                    s.max_answer_length, s.align_to_words)  # fmt: skip
        return [span._asdict() for span in spans]

    def score(self, task, examples, answers, config):
        return task.metric({ex.qid: a["text"] for ex, a in zip(examples, answers, strict=True)},
                           {ex.qid: ex.answers for ex in examples})  # fmt: skip

    def row(self, ex, answer, config):
        return {"id": ex.qid, "answer": answer["text"], "start": answer["start"], "end": answer["end"],
                "score": answer["score"]}  # fmt: skip

    def parse(self, obj, where):
        if not isinstance(obj, dict) or not isinstance(obj.get("question"), str) or not isinstance(
                obj.get("context"), str):  # fmt: skip
            raise DataError(f'{where}: QA needs a JSON object with "question" and "context" strings')
        return QAExample(str(obj.get("id", where)), obj["question"], obj["context"], source=where)


class SpanQAv2(SpanQA):
    """SQuAD 2.0 with the original's answerability head: a span, and "" when the null score wins."""

    name = "qa_v2"
    architecture = "AlbertForQuestionAnsweringV2"
    OUTPUTS: ClassVar[tuple[str, ...]] = ("start_top_log_probs", "start_top_index", "end_top_log_probs",
                                          "end_top_index", "cls_logits")  # fmt: skip

    def _feature(self, w, training):
        d = super()._feature(w, training)
        d["p_mask"] = w.p_mask
        if training:
            d["is_impossible"] = float(w.is_impossible)
        return d

    def decode(self, examples, enc, out, s, config, info=None):
        arr = {k: np.stack(out[k]) for k in self.OUTPUTS}
        spans, null = squad.best_spans_v2(examples, enc.windows, **arr, max_answer_length=s.max_answer_length,
                                          align_to_words=s.align_to_words)
        threshold = float((info or {}).get(NULL_THRESHOLD_KEY, 0.0))
        answers = []
        for span, null_score in zip(spans, null, strict=True):
            answers.append({**span._asdict(), "null_score": null_score, "no_answer": null_score > threshold})
        return answers

    def score(self, task, examples, answers, config):
        return task.metric({ex.qid: a["text"] for ex, a in zip(examples, answers, strict=True)},
                           {ex.qid: ex.answers for ex in examples},
                           {ex.qid: a["null_score"] for ex, a in zip(examples, answers, strict=True)})  # fmt: skip

    def row(self, ex, answer, config):
        row = super().row(ex, answer, config)
        row["span"] = row["answer"]
        if answer["no_answer"]:
            row.update(answer="", start=None, end=None)
        row["null_score"] = answer["null_score"]
        return row


class MultipleChoice(TaskKind):
    name = "choice"
    architecture = "AlbertForMultipleChoice"
    input_keys: ClassVar[dict[str, str]] = {"text_column": "question", "context_column": "context",
                                            "options_column": "options"}  # fmt: skip

    def encode(self, task, examples, tok, label2id, s, training=False):
        return Encoded(F.encode_choice(examples, tok, s.max_seq_length))

    def decode(self, examples, enc, out, s, config, info=None):
        return [{"label_id": int(p.argmax()), "probs": p}
                for p in (_softmax(np.asarray(x, dtype=np.float64)) for x in out["logits"])]  # fmt: skip

    def score(self, task, examples, answers, config):
        return task.metric([a["label_id"] for a in answers], [ex.label for ex in examples])

    def majority_baseline(self, task, examples, config):
        return _majority(task, [ex.label for ex in examples])

    def row(self, ex, answer, config):
        best = answer["label_id"]
        return {"label": best, "option": ex.options[best], "score": float(answer["probs"][best]),
                "probabilities": [float(q) for q in answer["probs"]]}  # fmt: skip

    def parse(self, obj, where):
        if not isinstance(obj, dict) or not isinstance(obj.get("options"), list) or len(obj["options"]) < 2:
            raise DataError(f'{where}: multiple choice needs JSON with "options" (2 or more), "context", "question"')
        if not all(isinstance(o, str) for o in obj["options"]):
            raise DataError(f'{where}: every item of "options" must be a string')
        context, question = obj.get("context", ""), obj.get("question", "")
        if not isinstance(context, str) or not isinstance(question, str):
            raise DataError(f'{where}: "context" and "question" must be strings')
        return ChoiceExample(context, question, list(obj["options"]), source=where)


KINDS: dict[str, TaskKind] = {k.name: k for k in (Classification(), Regression(), Tagging(), SpanQA(), SpanQAv2(),
                                                  MultipleChoice())}  # fmt: skip


def get_kind(name: str) -> TaskKind:
    if name not in KINDS:
        raise DataError(f"unknown task kind {name!r}; choose one of: {', '.join(KINDS)}")
    return KINDS[name]


def kind_of(task: Any) -> TaskKind:
    return get_kind(task.kind)


def _majority(task: Any, gold: list) -> float | None:
    if not gold:
        return None
    most = Counter(gold).most_common(1)[0][0]
    scores = task.metric([most] * len(gold), gold)
    return float(scores[task.main_metric]) if task.main_metric in scores else None


def kind_for_architecture(arch: str | None, config: Any) -> TaskKind:
    matches = [k for k in KINDS.values() if k.architecture == arch]
    if not matches:
        raise DataError(f"{with_article(arch or 'headless')} model answers no task; give a fine-tuned model "
                        f"({', '.join(sorted({k.architecture for k in KINDS.values()}))})")  # fmt: skip
    if len(matches) > 1:  # sequence classification: one output and problem_type regression -> regression
        regression = config.problem_type == "regression" or config.num_labels == 1
        return KINDS["regression" if regression else "classification"]
    return matches[0]

