"""Fine-tuning for every registered task (``albertlm.tasks``); evaluation and prediction go through
``albertlm.inference.Predictor``, the same path the server uses.

    albertlm finetune --task sst2 --data shared/data/glue_sst2 --model albert-tiny --tokenizer runs/tok/en \\
        --out runs/ft/sst2 --max-steps 300 --batch-size 32 --lr 1e-4
    albertlm evaluate --data shared/data/glue_sst2 --model runs/ft/sst2
    echo '{"text": "a charming film"}' | albertlm predict --model runs/ft/sst2

Single device; AdamW with linear warmup and decay (spec section 7), gradient clipping at 1.0. The output
directory is self-contained: HF-layout weights + config.json (with ``id2label`` and the task settings
under ``albertlm_task``) + the tokenizer files, so ``evaluate`` / ``predict`` need only ``--model``.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from albertlm.config import PRESETS, AlbertConfig
from albertlm.errors import DataError, UserError
from albertlm.heads import HEADS
from albertlm.inference import TASK_KEY, Predictor
from albertlm.optim import build_optimizer, build_scheduler
from albertlm.tasks import features as F
from albertlm.tasks import metrics
from albertlm.tasks.examples import RowPolicy
from albertlm.tasks.kinds import NULL_THRESHOLD_KEY, InferenceSettings, kind_of
from albertlm.tasks.registry import Task, read_split
from albertlm.tokenizer import Tokenizer, load_tokenizer

_log = logging.getLogger(__name__)


@dataclass
class Settings:
    """Fine-tuning hyperparameters: None means "the task's default" (registry / paper Table 14)."""

    lr: float | None = field(default=None, metadata={"help": "peak learning rate (default: the task's)"})
    batch_size: int | None = field(default=None, metadata={"help": "training batch size (default: the task's)"})
    max_steps: int | None = field(default=None, metadata={"help": "optimizer steps (default: the task's)"})
    epochs: float | None = field(default=None, metadata={"help": "passes over the training set, instead of steps"})
    warmup: float | None = field(default=None, metadata={"help": "warmup steps, or a fraction of all steps if < 1"})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay"})
    seed: int = field(default=0, metadata={"help": "seed for initialisation, shuffling and dropout"})
    eval_every: int = field(default=0, metadata={"help": "evaluate every N steps (0: at the end only)"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})
    config_overrides: dict[str, Any] = field(default_factory=dict)  # --set FIELD=VALUE
    inference: InferenceSettings = field(default_factory=InferenceSettings)  # evaluation and the saved settings

    def resolve(self, task: Task) -> Settings:
        s = replace(self, inference=replace(self.inference))
        s.lr = s.lr if s.lr is not None else task.lr
        s.batch_size = s.batch_size or task.batch_size
        s.inference.max_seq_length = s.inference.max_seq_length or task.max_seq_length
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
    kind = kind_of(task)
    cls = HEADS[kind.architecture].cls
    head: dict[str, Any] = {**kind.head_config(labels), **overrides}
    if model in PRESETS:
        config = AlbertConfig.from_preset(model, vocab_size=tokenizer.vocab_size, **head)
        torch_model = cls(config)
        torch_model.newly_initialized_keys = ["(all: random init from preset)"]
    elif Path(model).is_dir():
        torch_model = cls.from_pretrained(Path(model), **head).train()  # a checkpoint's missing head: fresh
    else:
        raise DataError(f"--model {model}: neither a preset ({', '.join(PRESETS)}) nor a model directory")
    if torch_model.config.vocab_size < tokenizer.vocab_size:
        raise DataError(
            f"tokenizer has {tokenizer.vocab_size} tokens but the model's vocab_size is "
            f"{torch_model.config.vocab_size}; use the tokenizer the model was trained with"
        )
    return torch_model


def save(model: Any, tokenizer: Tokenizer, out: Path, task: Task, s: Settings, **extra: Any) -> None:
    """Weights, config.json (with the task and its inference settings) and the tokenizer into ``out``."""
    model.config.extra[TASK_KEY] = {"name": task.name, **asdict(s.inference), **extra}
    model.save_pretrained(out)
    tokenizer.save(out)


# --- data -------------------------------------------------------------------------------------------
@dataclass
class Data:
    train: list
    eval: list
    train_path: str
    eval_path: str
    labels: list[str] | None


def load_data(task: Task, data: str | Path, policy: RowPolicy | None = None, train_file: Path | None = None,
              eval_file: Path | None = None, holdout: int = 0, limit_train: int = 0, limit_eval: int = 0) -> Data:
    """The training and evaluation examples of ``task`` under ``data`` (a dataset folder or a file).

    Labels come from the whole training file (a ``limit_train`` slice may miss rare classes). With no dev
    split the labelled test split is used (MRPC's MSR release), or the last ``holdout`` training examples."""
    policy = policy or RowPolicy()
    data = Path(data)
    train_ex, train_path = read_split(task, data, "train", policy, train_file)
    _require_labels(train_ex, train_path, "fine-tuning needs a label on every training example")
    labels = kind_of(task).label_set(task, train_ex)
    if limit_train:
        train_ex = train_ex[:limit_train]
    if holdout:
        if holdout >= len(train_ex):
            raise UserError(f"--holdout {holdout} leaves no training examples (have {len(train_ex)})")
        eval_ex, eval_path = train_ex[-holdout:], f"{train_path} (last {holdout} examples)"
        train_ex = train_ex[:-holdout]
    elif eval_file is not None:
        eval_ex, eval_path = read_split(task, data, "dev", policy, eval_file)
    else:
        eval_ex, eval_path = _dev_or_test(task, data, policy, train_path)
    if limit_eval:
        eval_ex = eval_ex[:limit_eval]
    _require_labels(eval_ex, eval_path, "evaluation needs labels; pass a labelled --eval-file or --holdout N")
    return Data(train_ex, eval_ex, str(train_path), str(eval_path), labels)


def _require_labels(examples: list, path: str | Path, why: str) -> None:
    """One line naming the first unlabelled example (a file without a label column, say)."""
    for ex in examples:
        if getattr(ex, "label", 0) is None:
            where = getattr(ex, "source", None) or str(path)
            raise DataError(f"{where}: no label (does {Path(str(path).split(' (')[0]).name} have a label column?); "
                            f"{why}")


def _dev_or_test(task: Task, data: Path, policy: RowPolicy, train_path: Path) -> tuple[list, Path]:
    try:
        return read_split(task, data, "dev", policy)
    except DataError as e:
        if "no dev file" not in str(e):
            raise
    ex, path = read_split(task, data, "test", policy)  # e.g. MRPC's MSR release has no dev split
    if path == train_path or (ex and getattr(ex[0], "label", 0) is None):
        raise DataError(f"{data}: no labeled dev file for {task.name}; pass --eval-file or --holdout N") from None
    _log.info("note: no dev split in %s; evaluating on %s", data, path)
    return ex, path


# --- training ---------------------------------------------------------------------------------------


def train(
    task: Task,
    data: Data,
    model_arg: str,
    tok: Tokenizer,
    out: Path,
    s: Settings,
) -> dict:
    """Fine-tune, evaluating every ``eval_every`` steps and at the end; write the model, metrics.jsonl
    and metrics.json into ``out``. Returns the final metrics."""
    from tqdm import tqdm

    s = s.resolve(task)
    random.seed(s.seed)
    np.random.seed(s.seed)
    torch.manual_seed(s.seed)
    model = build_model(task, model_arg, tok, data.labels, s.config_overrides)
    kind = kind_of(task)
    feats = kind.encode(task, data.train, tok, model.config.label2id, s.inference, training=True).features
    evaluator = Predictor.from_model(model, tok, task, s.inference)
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
        for idx in F.batches(feats, s.batch_size, rng, s.inference.bucketing):
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
                result = evaluator.evaluate(data.eval)[0] if data.eval else {}
                row = {"step": step, "epoch": step / per_epoch, "train_loss": float(np.mean(losses[-50:])),
                       "lr": sched.get_last_lr()[0], "elapsed_s": time.time() - t0, **result}  # fmt: skip
                with open(log_path, "a") as f:
                    f.write(json.dumps(metrics.json_ready(row)) + "\n")  # NaN (undefined) -> null
                _log.info("step %d: %s", step, ", ".join(f"{k}={v:.4f}" for k, v in row.items() if k != "step"))
            if step == total:
                break
    bar.close()
    train_s = time.time() - t0
    extra = {}
    if "best_f1_thresh" in result:  # SQuAD 2.0: predict answers "" above this null score
        extra[NULL_THRESHOLD_KEY] = result["best_f1_thresh"]
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
        "max_seq_length": s.inference.max_seq_length,
        "seed": s.seed,
        "train_seconds": train_s,
        "final_train_loss": float(np.mean(losses[-50:])),
        "newly_initialized_keys": getattr(model, "newly_initialized_keys", []),
        "metrics": result,
    }
    text = json.dumps({**final, "metrics": metrics.json_ready(result)}, indent=2, ensure_ascii=False)  # NaN -> null
    (out / "metrics.json").write_text(text + "\n")
    return final
