"""Fine-tuning, evaluation and prediction for every registered task (``albertlm.tasks``).

    albertlm finetune --task sst2 --data shared/data/glue_sst2 --model albert-tiny --tokenizer runs/tok/en \\
        --out runs/ft/sst2 --max-steps 300 --batch-size 32 --lr 1e-4
    albertlm evaluate --task sst2 --data shared/data/glue_sst2 --model runs/ft/sst2
    echo '{"text": "a charming film"}' | albertlm predict --model runs/ft/sst2

Single device; AdamW with linear warmup and decay (spec section 7), gradient clipping at 1.0. The output
directory is self-contained: HF-layout weights + config.json (with ``id2label`` and the task settings
under ``albertlm_task``) + the tokenizer files, so ``evaluate`` / ``predict`` need only ``--model``.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from albertlm.config import PRESETS, AlbertConfig
from albertlm.heads import (
    AlbertForMultipleChoice,
    AlbertForQuestionAnswering,
    AlbertForQuestionAnsweringV2,
    AlbertForSequenceClassification,
    AlbertForTokenClassification,
)
from albertlm.model import AlbertPreTrainedModel
from albertlm.optim import build_optimizer, build_scheduler
from albertlm.tasks import features as F
from albertlm.tasks import metrics, squad
from albertlm.tasks.examples import DataError, QAExample
from albertlm.tasks.registry import Task, get_task
from albertlm.tokenizer import Tokenizer, load_tokenizer

HEADS: dict[str, type[AlbertPreTrainedModel]] = {
    "classification": AlbertForSequenceClassification,
    "regression": AlbertForSequenceClassification,
    "tagging": AlbertForTokenClassification,
    "qa": AlbertForQuestionAnswering,
    "qa_v2": AlbertForQuestionAnsweringV2,
    "choice": AlbertForMultipleChoice,
}
TASK_KEY = "albertlm_task"  # config.json entry holding the task name and its settings


@dataclass
class Settings:
    """Hyperparameters: None means "the task's default" (registry / paper Table 14)."""

    lr: float | None = None
    batch_size: int | None = None
    max_steps: int | None = None
    epochs: float | None = None
    warmup: float | None = None  # steps, or a fraction of all steps when < 1
    max_seq_length: int | None = None
    weight_decay: float = 0.01
    seed: int = 0
    eval_every: int = 0  # 0: evaluate at the end only
    eval_batch_size: int = 64
    bucketing: bool = True
    doc_stride: int = 128
    max_query_length: int = 64
    max_answer_length: int = 30
    n_best: int = 20
    progress: bool = True
    config_overrides: dict[str, Any] = field(default_factory=dict)

    def resolve(self, task: Task) -> Settings:
        s = Settings(**{**self.__dict__})
        s.lr = s.lr if s.lr is not None else task.lr
        s.batch_size = s.batch_size or task.batch_size
        s.max_seq_length = s.max_seq_length or task.max_seq_length
        if s.max_steps is None and s.epochs is None:
            s.max_steps, s.epochs = task.steps, task.epochs
        s.warmup = s.warmup if s.warmup is not None else (task.warmup if s.max_steps == task.steps else 0.1)
        return s


# --- models and tokenizers --------------------------------------------------------------------------
def resolve_tokenizer(model: str, tokenizer: str | None) -> Tokenizer:
    if tokenizer:
        return load_tokenizer(tokenizer)
    if model in PRESETS or not Path(model).is_dir():
        raise DataError(f"--model {model} is a preset (random weights): pass --tokenizer DIR (spiece.model/vocab.txt)")
    try:
        return load_tokenizer(model)
    except FileNotFoundError:
        raise DataError(f"{model} holds no spiece.model or vocab.txt; pass --tokenizer DIR") from None


def build_model(task: Task, model: str, tokenizer: Tokenizer, labels: list[str] | None, overrides: dict) -> Any:
    """A preset name (random init) or an HF-layout directory (ours, transformers', or a pretraining
    checkpoint: missing task-head weights are freshly initialised and listed in newly_initialized_keys)."""
    cls = HEADS[task.kind]
    head: dict[str, Any] = dict(overrides)
    if task.kind in ("classification", "tagging") and labels is not None:
        head["id2label"] = dict(enumerate(labels))
    if task.kind == "regression":
        head.update(id2label={0: "score"}, problem_type="regression")
    elif task.kind == "classification":
        head["problem_type"] = "single_label_classification"
    if model in PRESETS:
        config = AlbertConfig.from_preset(model, vocab_size=tokenizer.vocab_size, **head)
        torch_model = cls(config)
        torch_model.newly_initialized_keys = ["(all: random init from preset)"]
    elif Path(model).is_dir():
        torch_model = _load_dir(cls, Path(model), head)
    else:
        raise DataError(f"--model {model}: neither a preset ({', '.join(PRESETS)}) nor a model directory")
    if torch_model.config.vocab_size < tokenizer.vocab_size:
        raise DataError(
            f"tokenizer has {tokenizer.vocab_size} tokens but the model's vocab_size is "
            f"{torch_model.config.vocab_size}; use the tokenizer the model was trained with"
        )
    return torch_model


def _load_dir(cls: type, directory: Path, overrides: dict) -> Any:
    """``from_pretrained`` in training mode (a checkpoint's missing head is freshly initialised)."""
    return cls.from_pretrained(directory, **overrides).train()


def save(model: AlbertPreTrainedModel, tokenizer: Tokenizer, out: Path, task: Task, s: Settings, **extra) -> None:
    model.config.extra[TASK_KEY] = {
        "name": task.name,
        "max_seq_length": s.max_seq_length,
        "doc_stride": s.doc_stride,
        "max_query_length": s.max_query_length,
        "max_answer_length": s.max_answer_length,
        **extra,
    }
    model.save_pretrained(out)
    tokenizer.save(out)


def load_finetuned(model_dir: str, tokenizer: str | None = None, task_name: str | None = None,
                   engine: str = "torch", threads: int | None = None):
    """(task, model, tokenizer, saved task settings) from a directory written by ``finetune``.

    ``engine="onnx"`` reads a folder written by ``albertlm export`` instead and runs the graph through
    onnxruntime behind the same call interface as the torch model."""
    config = AlbertConfig.load(model_dir)
    info = dict(config.extra.get(TASK_KEY) or {})
    name = task_name or info.get("name")
    if not name:
        raise DataError(f"{model_dir}/config.json names no task ({TASK_KEY}); pass --task")
    task = get_task(name)
    tok = resolve_tokenizer(model_dir, tokenizer)
    if engine == "onnx":
        from albertlm.export import OnnxModel

        model = OnnxModel(model_dir, threads=threads).as_torch_module()
    else:
        model = _load_dir(HEADS[task.kind], Path(model_dir), {}).eval()
    if task.kind in ("classification", "tagging") and not config.id2label:
        raise DataError(f"{model_dir}/config.json has no id2label; was it fine-tuned for {task.name}?")
    return task, model, tok, info


# --- one pass over data -----------------------------------------------------------------------------
@torch.no_grad()
def run_model(model: Any, feats: list[dict], tok: Tokenizer, batch_size: int, bucketing: bool = True) -> dict:
    """Raw outputs in feature order: ``logits`` (list of arrays) or the QA fields."""
    model.eval()
    out: dict[str, list] = {}
    order: list[int] = []
    for idx in F.batches(feats, batch_size, None, bucketing):
        batch = F.collate([feats[i] for i in idx], tok.pad_id)
        batch = {k: v for k, v in batch.items() if k in ("input_ids", "token_type_ids", "attention_mask", "p_mask")}
        res = model(**batch)
        order.extend(idx)
        for name in ("logits", "start_logits", "end_logits", "start_top_log_probs", "start_top_index",
                     "end_top_log_probs", "end_top_index", "cls_logits"):  # fmt: skip
            v = getattr(res, name, None)
            if v is not None:
                out.setdefault(name, []).extend(v.float().numpy() if v.is_floating_point() else v.numpy())
    inverse = np.argsort(order)
    return {k: [v[i] for i in inverse] for k, v in out.items()}


def predictions(task: Task, model: Any, examples: list, feats: list, qa: list | None, raw: dict, s: Settings):
    """Per-example predictions in task terms (label ids, tag lists, answer text) + extra outputs."""
    if task.kind == "regression":
        return [float(x[0]) for x in raw["logits"]], {}
    if task.kind in ("classification", "choice"):
        probs = [_softmax(x) for x in raw["logits"]]
        return [int(p.argmax()) for p in probs], {"probs": probs}
    if task.kind == "tagging":
        id2label = model.config.id2label
        out = []
        for ex, f, logits in zip(examples, feats, raw["logits"], strict=True):
            tags = ["O"] * len(ex.words)
            for pos, w in enumerate(f["word_index"]):
                if w >= 0:
                    tags[w] = id2label[int(logits[pos].argmax())]
            out.append(tags)
        return out, {}
    if task.kind == "qa":
        texts = squad.best_spans_v1(examples, qa, raw["start_logits"], raw["end_logits"], s.n_best, s.max_answer_length)
        return texts, {}
    arr = {k: np.stack(raw[k]) for k in ("start_top_log_probs", "start_top_index", "end_top_log_probs",
                                         "end_top_index", "cls_logits")}  # fmt: skip
    texts, null = squad.best_spans_v2(examples, qa, **arr, max_answer_length=s.max_answer_length)
    return texts, {"null_scores": null}


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def score(task: Task, model: Any, examples: list, preds: list | dict, extra: dict) -> dict[str, float]:
    if task.kind in ("qa", "qa_v2"):
        answers = {ex.qid: ex.answers for ex in examples}
        if task.name == "cmrc2018":
            return metrics.cmrc2018(preds, answers)
        if task.kind == "qa_v2":
            return metrics.squad_v2(preds, answers, extra["null_scores"])
        return metrics.squad_v1(preds, answers)
    if task.kind == "tagging":
        return task.metric(preds, [ex.tags for ex in examples])
    if task.kind == "choice":
        return metrics.accuracy(preds, [ex.label for ex in examples])
    label2id = model.config.label2id
    gold = [F._label_id(task, label2id, ex) for ex in examples]
    return task.metric(preds, gold)


def evaluate(task: Task, model: Any, tok: Tokenizer, examples: list, s: Settings) -> tuple[dict, list, dict]:
    if task.kind in ("classification", "regression", "tagging", "choice"):
        unlabeled = [ex.source for ex in examples if getattr(ex, "label" if task.kind != "tagging" else "tags") is None]
        if unlabeled:
            raise DataError(f"{unlabeled[0]}: no label; evaluation needs a labeled file (use predict for test sets)")
    if task.kind in ("qa", "qa_v2"):
        no_gold = [ex.source for ex in examples if not ex.answers and not ex.is_impossible]
        if no_gold:
            raise DataError(f"{no_gold[0]}: question without answers; evaluation needs gold answers")
    feats, qa = F.encode(task, examples, tok, model.config.label2id, s.max_seq_length, False,
                         s.doc_stride, s.max_query_length)  # fmt: skip
    raw = run_model(model, feats, tok, s.eval_batch_size, s.bucketing)
    preds, extra = predictions(task, model, examples, feats, qa, raw, s)
    result = score(task, model, examples, preds, extra)
    result["examples"] = float(len(examples))
    return result, preds, extra


# --- training ---------------------------------------------------------------------------------------
@dataclass
class Data:
    train: list
    eval: list
    train_path: str
    eval_path: str
    labels: list[str] | None


def train(
    task: Task,
    data: Data,
    model_arg: str,
    tok: Tokenizer,
    out: Path,
    s: Settings,
    log=print,  # noqa: ANN001 - a print-like callable
) -> dict:
    """Fine-tune, evaluating every ``eval_every`` steps and at the end; write the model, metrics.jsonl
    and metrics.json into ``out``. Returns the final metrics."""
    from tqdm import tqdm

    s = s.resolve(task)
    random.seed(s.seed)
    np.random.seed(s.seed)
    torch.manual_seed(s.seed)
    model = build_model(task, model_arg, tok, data.labels, s.config_overrides)
    label2id = model.config.label2id
    feats, _ = F.encode(task, data.train, tok, label2id, s.max_seq_length, True, s.doc_stride, s.max_query_length)
    per_epoch = math.ceil(len(feats) / s.batch_size)
    total = s.max_steps if s.max_steps else max(1, math.ceil(s.epochs * per_epoch))
    warmup = int(s.warmup * total) if s.warmup < 1 else int(min(s.warmup, total))
    opt = build_optimizer(model, "adamw", s.lr, s.weight_decay)
    sched = build_scheduler(opt, warmup, total)
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "metrics.jsonl"
    log_path.write_text("")
    rng = random.Random(s.seed)
    step, t0, losses = 0, time.time(), []
    result: dict = {}
    bar = tqdm(total=total, desc=f"finetune {task.name}", disable=not s.progress, unit="step")
    while step < total:
        for idx in F.batches(feats, s.batch_size, rng, s.bucketing):
            model.train()
            batch = F.collate([feats[i] for i in idx], tok.pad_id)
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            losses.append(loss.item())
            bar.update(1)
            bar.set_postfix(loss=f"{np.mean(losses[-20:]):.4f}", lr=f"{sched.get_last_lr()[0]:.2e}")
            if step == total or (s.eval_every and step % s.eval_every == 0):
                result = evaluate(task, model, tok, data.eval, s)[0] if data.eval else {}
                row = {"step": step, "epoch": step / per_epoch, "train_loss": float(np.mean(losses[-50:])),
                       "lr": sched.get_last_lr()[0], "elapsed_s": time.time() - t0, **result}  # fmt: skip
                with open(log_path, "a") as f:
                    f.write(json.dumps(metrics.json_ready(row)) + "\n")  # NaN (undefined) -> null
                bar.write(f"step {step}: " + ", ".join(f"{k}={v:.4f}" for k, v in row.items() if k != "step"))
            if step == total:
                break
    bar.close()
    train_s = time.time() - t0
    extra = {}
    if task.kind == "qa_v2" and "best_f1_thresh" in result:
        extra["null_threshold"] = result["best_f1_thresh"]  # predict answers "" above this null score
    save(model, tok, out, task, s, **extra)
    final = {
        "task": task.name,
        "model": model_arg,
        "train_file": data.train_path,
        "eval_file": data.eval_path,
        "train_examples": len(data.train),
        "train_features": len(feats),
        "eval_examples": len(data.eval),
        "steps": total,
        "epochs": total / per_epoch,
        "batch_size": s.batch_size,
        "lr": s.lr,
        "warmup_steps": warmup,
        "max_seq_length": s.max_seq_length,
        "seed": s.seed,
        "train_seconds": train_s,
        "final_train_loss": float(np.mean(losses[-50:])),
        "newly_initialized_keys": getattr(model, "newly_initialized_keys", []),
        "metrics": result,
    }
    text = json.dumps({**final, "metrics": metrics.json_ready(result)}, indent=2, ensure_ascii=False)  # NaN -> null
    (out / "metrics.json").write_text(text + "\n")
    return final


# --- prediction -------------------------------------------------------------------------------------
def parse_input(task: Task, line: str, n: int) -> Any:
    """One input line -> an unlabeled example. JSON objects use the reader field names (``text``/
    ``text_b``, ``question``/``context``, ``tokens``, ``options``); a plain line is the text (tab: a pair)."""
    from albertlm.tasks.examples import ChoiceExample, TaggingExample, TextExample

    row: Any = line
    if line.lstrip().startswith("{"):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"input line {n}: not valid JSON ({e.msg})") from None
    src = f"input:{n}"
    if task.kind in ("qa", "qa_v2"):
        if not isinstance(row, dict) or "question" not in row or "context" not in row:
            raise DataError(f'input line {n}: QA needs a JSON object with "question" and "context"')
        return QAExample(str(row.get("id", n)), row["question"], row["context"], source=src)
    if task.kind == "choice":
        if not isinstance(row, dict) or "options" not in row:
            raise DataError(f'input line {n}: multiple choice needs JSON with "context", "question", "options"')
        return ChoiceExample(row.get("context", ""), row.get("question", ""), list(row["options"]), source=src)
    if task.kind == "tagging":
        words = row.get("tokens") if isinstance(row, dict) else None
        if words is None:
            text = row.get("text", "") if isinstance(row, dict) else row
            words = text.split() if " " in text.strip() else list(text.strip())
        return TaggingExample(list(words), None, src)
    if isinstance(row, dict):
        a = next((row[k] for k in ("text", "text_a", "sentence", "sentence1") if k in row), None)
        b = next((row[k] for k in ("text_b", "sentence2") if k in row), None)
        if a is None:
            raise DataError(f'input line {n}: no "text" field (has {sorted(row)})')
        return TextExample(str(a), None if b is None else str(b), None, src)
    a, _, b = row.partition("\t")
    return TextExample(a, b or None, None, src)


def predict(task: Task, model: Any, tok: Tokenizer, examples: list, s: Settings, info: dict) -> list[dict]:
    feats, qa = F.encode(task, examples, tok, model.config.label2id, s.max_seq_length, False,
                         s.doc_stride, s.max_query_length)  # fmt: skip
    raw = run_model(model, feats, tok, s.eval_batch_size, s.bucketing)
    preds, extra = predictions(task, model, examples, feats, qa, raw, s)
    rows = []
    id2label = model.config.id2label or {}
    for i, (ex, p) in enumerate(zip(examples, preds, strict=True)):
        if task.kind == "regression":
            rows.append({"score": p})
        elif task.kind == "classification":
            probs = extra["probs"][i]
            rows.append({"label": id2label[p], "probabilities": {id2label[j]: float(q) for j, q in enumerate(probs)}})
        elif task.kind == "choice":
            rows.append({"label": p, "option": ex.options[p], "probabilities": [float(q) for q in extra["probs"][i]]})
        elif task.kind == "tagging":
            rows.append({"tokens": ex.words, "tags": p})
        elif task.kind == "qa":
            rows.append({"id": ex.qid, "answer": p})
        else:
            null = extra["null_scores"][ex.qid]
            no_answer = null > float(info.get("null_threshold", 0.0))
            rows.append({"id": ex.qid, "answer": "" if no_answer else p, "span": p, "null_score": null})
    return rows
