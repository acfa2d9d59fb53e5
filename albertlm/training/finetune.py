"""Fine-tuning for every registered task (``albertlm.tasks``); evaluation and prediction go through
``albertlm.deploy.inference.Predictor``, the same path the server uses.

    albertlm finetune --task sst2 --data shared/data/glue_sst2 --model albert-tiny --tokenizer runs/tok/en \\
        --out runs/ft/sst2 --max-steps 300 --batch-size 32 --lr 1e-4
    albertlm evaluate --data shared/data/glue_sst2 --model runs/ft/sst2
    echo '{"text": "a charming film"}' | albertlm predict --model runs/ft/sst2

One device, or torchrun's processes (DDP, or FSDP2 with ``--fsdp``); AdamW with linear warmup and decay
(spec section 7), gradient clipping at 1.0. The output directory is self-contained: HF-layout weights +
config.json (with ``id2label`` and the task settings under ``albertlm_task``: for your own data also its
columns and format) + the tokenizer files, so
``evaluate`` / ``predict`` / ``export`` / ``serve`` need only ``--model``. The model kept there is the one
with the best dev score of all evaluations (each save replaces files atomically). With ``--train-exits-only``
the full-depth score cannot move (only the exits learn), so the newest heads are kept, or, when an exit rule
is given (``--exit-patience`` ...), the heads with the best score under that rule (ties: the newer).

Your own data (a generic task: ``--task classification --data reviews.csv --text-column review ...``) has
no paper hyperparameters; ``auto_defaults`` chooses the ones not given from the model and the data:

- learning rate 5e-5 x sqrt(768 / H) (2.2e-5 at xxlarge's H=4096, 1.2e-4 at H=128), x4 from a random init
  (a preset: nothing pretrained to preserve), within [1e-5, 1e-3];
- batch size 32, smaller for small data: the power of two nearest n / 50, at least 8;
- epochs 10 under 1,000 training examples, 5 under 10,000, 3 under 100,000, else 2;
- max_seq_length: the 95th percentile of the encoded training lengths, rounded up to a multiple of 32,
  within [32, the model's position limit];
- warmup 10 %, and an evaluation at the end of every epoch (the best is kept).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from albertlm.card import update_card
from albertlm.config import EXIT_HEADS, PRESETS, AlbertConfig
from albertlm.deploy.early_exit import EXIT_KINDS
from albertlm.deploy.inference import TASK_KEY, Predictor
from albertlm.devices import DEVICE_HELP, parse_device
from albertlm.errors import SEED_BOUNDS, DataError, TrainingError, UserError
from albertlm.files import no_such_folder, write_text_atomic
from albertlm.heads import HEADS
from albertlm.tasks import features as F
from albertlm.tasks import metrics
from albertlm.tasks.kinds import NULL_THRESHOLD_KEY, InferenceSettings, kind_of
from albertlm.tasks.registry import Task
from albertlm.tokenizer import Tokenizer, load_tokenizer
from albertlm.training.distributed import DistInfo, all_reduce_sum, cleanup, init_distributed, same_settings
from albertlm.training.finetune_data import Data
from albertlm.training.optim import build_optimizer, build_scheduler
from albertlm.training.precision import TRAINING_PRECISIONS
from albertlm.training.rundir import FINAL_FILES, remove_checkpoints
from albertlm.training.steps import Stepper, to_device
from albertlm.training.tracking import Tracker

_log = logging.getLogger(__name__)


@dataclass
class Settings:
    """Fine-tuning hyperparameters: None means "the task's default" (registry / paper Table 14)."""

    lr: float | None = field(default=None, metadata={"help": "peak learning rate (default: the task's)", "above": 0})
    batch_size: int | None = field(default=None, metadata={"help": "training batch size (default: the task's)",
                                                          "min": 1})
    max_steps: int | None = field(default=None, metadata={"help": "optimizer steps (default: the task's)", "min": 1})
    epochs: float | None = field(default=None, metadata={"help": "passes over the training set, instead of steps",
                                                         "above": 0})
    warmup: float | None = field(default=None, metadata={"help": "warmup steps, or a fraction of all steps if < 1",
                                                         "min": 0})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay", "min": 0})
    seed: int = field(default=0, metadata={"help": "seed for initialisation, shuffling and dropout", **SEED_BOUNDS})
    eval_every: int = field(default=0, metadata={"help": "evaluate every N steps (0: at the end only)", "min": 0})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})
    precision: str = field(default="auto", metadata={
        "help": "auto (bf16 autocast on a GPU or CPU that has bf16; else fp16 on a GPU, fp32 on a CPU), fp32, bf16 "
                "(autocast) or fp16 (autocast + grad scaler); weights stay fp32", "choices": TRAINING_PRECISIONS})
    device: str = field(default="auto", metadata={"help": DEVICE_HELP, "parse": parse_device})
    micro_batch_size: int | None = field(default=None, metadata={
        "help": "examples per forward on one process (default: the batch split over the processes); smaller "
                "accumulates gradients over several forwards, the update staying the batch's", "min": 1})
    fsdp: bool = field(default=False, metadata={
        "help": "FSDP2 (fully_shard) instead of DDP under torchrun: weights, gradients and optimizer state sharded "
                "over the processes; checkpoints sharded (torch.distributed.checkpoint)"})
    clip_norm: float = field(default=1.0, metadata={"help": "global gradient-norm clip", "above": 0})
    compile: bool | None = field(default=None, metadata={"help": "torch.compile the model (default: on for CUDA, "
                                                                  "off on CPU)"})
    max_nonfinite: int = field(default=3, metadata={
        "help": "steps with a non-finite loss or gradient (each skipped) before the run stops", "min": 1})
    save_every: int = field(default=1000, metadata={"help": "steps between checkpoints for --resume (0: none)",
                                                    "min": 0})
    keep_last: int = field(default=1, metadata={"help": "checkpoints kept (0: all)", "min": 0})
    exits: str | None = field(default=None, metadata={
        "help": "early exits: per-layer (PABEE: a classifier after every layer), shared (the one classifier reads "
                "every layer; no new parameters) or none (default: the model's own)", "choices": EXIT_HEADS})
    train_exits_only: bool = field(default=False, metadata={
        "help": "train only the per-layer exit classifiers, the encoder and final classifier frozen (a model "
                "already fine-tuned gains exits and keeps its full-depth answers); the last heads evaluated are "
                "kept, or with an --exit-* rule the heads that score best under it"})
    report_to: str = field(default="jsonl", metadata={
        "help": "where metrics go besides metrics.jsonl: a comma-separated list of none, jsonl, tensorboard, mlflow, "
                "wandb (see albertlm.training.tracking)", "metavar": "LIST"})
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
def check_model(model: str) -> None:
    """--model names a preset or a folder: checked before the tokenizer or the data is read, so a typo in a path
    is one line naming it, never taken for a preset."""
    if model in PRESETS or Path(model).is_dir():
        return
    what = f"{model} is a file, not a model folder" if Path(model).exists() else no_such_folder(model)
    raise UserError(f"--model: {what}; give a model folder (config.json + weights) or a preset (random weights): "
                    f"{', '.join(PRESETS)}")


def resolve_tokenizer(model: str, tokenizer: str | None) -> Tokenizer:
    check_model(model)
    if tokenizer:
        return load_tokenizer(tokenizer)
    if model in PRESETS:
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


def save(model: Any, tokenizer: Tokenizer | None, out: Path, task: Task, s: Settings, **extra: Any) -> None:
    """Weights, config.json (with the task and its inference settings; a generic task's columns, kind and
    metric) and the tokenizer (unless None: already there) into ``out``. The weights and config.json are
    each written to a temporary name and renamed."""
    info: dict[str, Any] = {"name": task.name, **asdict(s.inference), **extra}
    if task.generic:
        info.update(kind=task.kind, main_metric=task.main_metric, data=asdict(task.columns))
    model.config.extra[TASK_KEY] = info
    model.save_pretrained(out)
    if tokenizer is not None:  # HF's pipelines then truncate where predict does
        length = s.inference.max_seq_length or task.max_seq_length
        tokenizer.save(out, model_max_length=min(length, model.config.max_position_embeddings))


def auto_defaults(task: Task, train: list, model: Any, tok: Tokenizer, random_init: bool) -> tuple[Task, dict]:
    """A generic task with lr, batch size, epochs and max_seq_length chosen from the model and the data (the
    rule is in this module's docstring); returns it and the chosen values with the reason for each."""
    n, hidden = len(train), model.config.hidden_size
    lr = 5e-5 * math.sqrt(768 / hidden) * (4 if random_init else 1)
    lr = float(f"{min(max(lr, 1e-5), 1e-3):.2g}")
    batch = 32 if n >= 1600 else max(8, 2 ** round(math.log2(max(n / 50, 1))))
    epochs = 10.0 if n < 1000 else 5.0 if n < 10_000 else 3.0 if n < 100_000 else 2.0
    limit = model.config.max_position_embeddings
    kind = kind_of(task)
    sample = random.Random(0).sample(train, min(n, 2000))
    feats = kind.encode(task, sample, tok, model.config.label2id, InferenceSettings(max_seq_length=limit)).features
    p95 = float(np.percentile([F.length(f) for f in feats], 95)) if feats else limit
    length = int(min(max(32, math.ceil(p95 / 32) * 32), limit))
    chosen = {
        "lr": (lr, f"H={hidden}" + (", random init" if random_init else "")),
        "batch_size": (batch, f"{n} training examples"),
        "epochs": (epochs, f"{n} training examples"),
        "max_seq_length": (length, f"95th percentile of {len(feats)} encoded lengths: {p95:.0f}"),
    }
    return replace(task, lr=lr, batch_size=batch, epochs=epochs, steps=None, warmup=0.1, max_seq_length=length), chosen


# --- training ---------------------------------------------------------------------------------------
# What fine-tuning writes into --out: the kept model (rundir's list of a final model's files) and the metrics.
# A directory holding any of them is another run's or a model's; ``overwrite`` removes these, nothing else.
OUTPUT_FILES = (*FINAL_FILES, "metrics.json", "metrics.jsonl", "tracking.json")


def check_out(out: Path, model_arg: str, overwrite: bool, resume: bool = False) -> None:
    """Refuse an ``out`` that would mix this run with another's model, or replace the model it starts from;
    only reads the folder (so the CLI calls it before the data is read). ``resume`` continues the run there."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a directory; pick another --out")
    if Path(model_arg).exists() and out.exists() and out.resolve() == Path(model_arg).resolve():
        raise UserError(f"--out {out} is the --model directory: the fine-tuned model would replace the one it "
                        "starts from; choose another --out")
    if resume:
        if overwrite:
            raise UserError("--resume continues the run in --out and --overwrite replaces it; give one of them")
        return
    found = [n for n in (*OUTPUT_FILES, CHECKPOINTS) if (out / n).exists()]
    if found and not overwrite:
        hint = "continue it with --resume, " if CHECKPOINTS in found else ""
        raise UserError(f"--out {out} already holds a model or a run ({', '.join(found)}); {hint}replace them with "
                        "--overwrite, or choose another --out")


def train(
    task: Task,
    data: Data,
    model_arg: str,
    tok: Tokenizer,
    out: Path,
    s: Settings,
    overwrite: bool = False,
    on_eval: Callable[[int, float | None, float], None] | None = None,
    resume: bool = False,
) -> dict:
    """Fine-tune, evaluating every ``eval_every`` steps (a generic task: every epoch) and at the end; keep
    the model with the best dev score in ``out`` with metrics.jsonl and metrics.json. Returns the metrics of
    the kept model. ``out`` must not hold a model or a run already, unless ``overwrite`` (see check_out), or
    ``resume``: continue from the newest checkpoint under ``out/checkpoints`` (bitwise exact on the CPU).
    ``on_eval(step, score, train_loss)`` runs after every evaluation (a search prunes a trial by raising).
    Under torchrun each process takes its share of every batch (DDP, or FSDP2 with ``s.fsdp``); rank 0
    evaluates and writes."""
    check_out(out, model_arg, overwrite, resume)
    info = init_distributed(s.device)
    try:
        same_settings(info, {"model": model_arg, "out": str(out), **{k: v for k, v in asdict(s).items()
                                                                    if k != "progress"}})  # fmt: skip
        return FineTuning(task, data, model_arg, tok, out, s, info, on_eval).start(resume, overwrite)
    finally:
        cleanup(info)


CHECKPOINTS = "checkpoints"  # in --out: the training state for --resume (never part of the model)


class FineTuning:
    """One fine-tuning run: the model, its features, the step machinery, the kept best; ``train()`` loops.
    A subclass (distillation) trains the model inside another module (``trained_module``) and names itself
    (``verb``, ``summary_extra``, ``write_card``); what is evaluated and kept is always the model itself."""

    verb = "finetune"

    def __init__(self, task: Task, data: Data, model_arg: str, tok: Tokenizer, out: Path, s: Settings,
                 info: DistInfo, on_eval: Callable | None = None):  # fmt: skip
        self.data, self.model_arg, self.tok, self.out, self.info = data, model_arg, tok, out, info
        self.on_eval = on_eval
        task = data.task or task
        _seed_everything(s.seed)
        check_exit_settings(task, s)
        overrides = {**s.config_overrides, **({"exit_heads": s.exits} if s.exits is not None else {})}
        model = build_model(task, model_arg, tok, data.labels, overrides)
        if s.train_exits_only:
            freeze_all_but_exits(model)
        self.chosen: dict = {}
        if task.generic:
            task, self.chosen = auto_defaults(task, data.train, model, tok, random_init=model_arg in PRESETS)
        given = {"lr": s.lr, "batch_size": s.batch_size, "epochs": s.epochs if s.max_steps is None else s.max_steps,
                 "max_seq_length": s.inference.max_seq_length}  # fmt: skip
        self.s = s = s.resolve(task)
        self.task = task
        if self.chosen:
            named = {k for k, v in given.items() if v is not None}
            _log.info("settings for your data: %s", _describe(s, self.chosen, named))
        self.feats = kind_of(task).encode(task, data.train, tok, model.config.label2id, s.inference,
                                          training=True).features  # fmt: skip
        self.per_epoch = math.ceil(len(self.feats) / s.batch_size)
        self.total = s.max_steps if s.max_steps else max(1, math.ceil(s.epochs * self.per_epoch))
        self.warmup = int(s.warmup * self.total) if s.warmup < 1 else int(min(s.warmup, self.total))
        self.eval_every = s.eval_every or (self.per_epoch if task.generic else 0)
        self.micro = s.micro_batch_size or math.ceil(s.batch_size / info.world_size)

        def optimizer(m: torch.nn.Module) -> tuple[Any, Any]:
            opt = build_optimizer(m, "adamw", s.lr, s.weight_decay)  # frozen parameters (requires_grad off) stay
            return opt, build_scheduler(opt, self.warmup, self.total)

        # Under FSDP rank 0 evaluates and keeps the best model on a whole copy, the sharded weights gathered
        # into it before each evaluation (a forward of the sharded model would need every rank).
        self.whole = copy.deepcopy(model) if s.fsdp and info.enabled and info.is_main else None
        self.stepper = Stepper(self.trained_module(model), info, s.precision, optimizer, s.clip_norm,
                               s.max_nonfinite, fsdp=s.fsdp, compile=s.compile,
                               advice=f"lower --lr (now {s.lr:g}) or lengthen --warmup (now {self.warmup} steps); "
                               "for a model you converted, check its config.json "
                               "(layer_norm_eps) and weights")  # fmt: skip
        self.model = self.stepper.model
        if self.whole is not None:
            self.whole.to(info.device)
        self.kept = self.whole if self.whole is not None else model  # what rank 0 evaluates and saves
        self.evaluator = (Predictor.from_model(self.kept, tok, task, s.inference, precision=self.stepper.precision)
                          if info.is_main else None)  # (only rank 0 evaluates)  # fmt: skip
        self.order = random.Random(s.seed)  # the batches' order, epoch after epoch
        self.step, self.epoch, self.in_epoch, self.elapsed = 0, 0, 0, 0.0
        self.losses: list[float] = []
        self.best: dict = {}  # the kept model's score, step and metrics

    def trained_module(self, model: torch.nn.Module) -> torch.nn.Module:
        """What the optimizer trains and each step calls (``forward(**batch).loss``): here the model itself."""
        return model

    def summary_extra(self) -> dict[str, Any]:
        """What metrics.json adds to fine-tuning's summary."""
        return {}

    def write_card(self, final: dict) -> None:
        _card(self.out, self.task, self.data, self.s, self.model_arg, final)

    # -------------------------------------------------------------- the loop
    def start(self, resume: bool, overwrite: bool) -> dict:
        """Train from the newest checkpoint (``resume``) or afresh; with ``overwrite`` the previous run's files
        go only now, when this run writes its own. Returns the summary (metrics.json)."""
        if resume:
            self.resume()
        elif overwrite and self.info.is_main:
            for name in OUTPUT_FILES:
                (self.out / name).unlink(missing_ok=True)
            remove_checkpoints(self.out / CHECKPOINTS)
        return self.train()

    def train(self) -> dict:
        s, info = self.s, self.info
        self.out.mkdir(parents=True, exist_ok=True)
        tracker = Tracker(self.out, s.report_to, name=f"{self.task.name}-{self.out.name}",
                          params={**asdict(s), **self.summary_extra()},
                          resumed_step=self.step or None, enabled=info.is_main)  # fmt: skip
        t0 = time.time() - self.elapsed
        try:
            bar = _progress(s.progress and info.is_main, f"{self.verb} {self.task.name}", self.step, self.total)
            while self.step < self.total:
                epoch_start = self.order.getstate()
                batches = F.batches(self.feats, s.batch_size, self.order, s.inference.bucketing)
                for idx in batches[self.in_epoch:]:
                    self.losses = [*self.losses[-49:], self._step(idx)]
                    self.step, self.in_epoch = self.step + 1, self.in_epoch + 1
                    bar.update(1)
                    bar.set_postfix(loss=f"{np.mean(self.losses[-20:]):.4f}", lr=f"{self.stepper.lr():.2e}")
                    if self.step == self.total:
                        self.stepper.check_trained(self.step, "the model was not kept")
                    if self.step == self.total or (self.eval_every and self.step % self.eval_every == 0):
                        self._evaluate(tracker, time.time() - t0)
                    if self.step == self.total:
                        break
                    if s.save_every and self.step % s.save_every == 0:
                        self.elapsed = time.time() - t0
                        self.save(epoch_start)
                else:
                    self.epoch, self.in_epoch = self.epoch + 1, 0
            bar.close()
        except BaseException:
            tracker.finish(failed=True)
            raise
        final = _summary(self.task, self.model_arg, self.data, s, self.model, self.feats, self.total, self.per_epoch,
                         self.warmup, self.stepper.precision, time.time() - t0, self.losses,
                         self.best or {"step": None, "metrics": {}}, self.chosen)  # (other ranks do not evaluate)
        final["world_size"] = info.world_size
        final.update(self.summary_extra())
        if info.is_main:
            text = json.dumps({**final, "metrics": metrics.json_ready(final["metrics"])}, indent=2,
                              ensure_ascii=False)  # NaN -> null
            write_text_atomic(self.out / "metrics.json", text + "\n")
            self.write_card(final)
        tracker.finish(final["metrics"], self.best.get("step"))
        return final

    def _step(self, idx: list[int]) -> float:
        """One update on the global batch ``idx``: this process's share, in micro-batches weighted so that
        the gradient is the batch mean's whatever the processes and accumulation; returns the batch's loss."""
        info, stepper = self.info, self.stepper
        mine = idx[info.rank :: info.world_size]
        scale = info.world_size / len(idx)  # DDP averages over the processes: their sum is the batch mean
        if not mine:  # a last batch smaller than the processes: this one still joins the all-reduce
            mine, scale = idx[:1], 0.0
        chunks = [mine[i : i + self.micro] for i in range(0, len(mine), self.micro)]
        self.model.train()
        loss_sum = 0.0
        for i, chunk in enumerate(chunks):
            batch = to_device(F.collate([self.feats[j] for j in chunk], self.tok.pad_id), info.device)
            with stepper.sync(i, len(chunks)):
                with stepper.autocast():
                    loss = stepper.forward(**batch).loss
                stepper.backward(loss, len(chunk) * scale)
            loss_sum += float(loss.detach()) * len(chunk) * scale / info.world_size
        loss_sum = all_reduce_sum(info, [loss_sum])[0]
        stepper.apply(loss_sum)
        return loss_sum

    def _evaluate(self, tracker: Tracker, elapsed: float) -> None:
        """Score on the dev set (rank 0), log, keep the model if it is the best so far."""
        step, s = self.step, self.s
        if self.stepper.fsdp:  # a collective: every rank gives its shards, rank 0 loads them whole
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            full = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            if self.whole is not None:
                self.whole.load_state_dict(full)
        if self.info.is_main:
            result = self.evaluator.evaluate(self.data.eval)[0] if self.data.eval else {}
            row = {"step": step, "epoch": step / self.per_epoch, "train_loss": float(np.mean(self.losses[-50:])),
                   "lr": self.stepper.lr(), "elapsed_s": elapsed, **result}  # fmt: skip
            tracker.log(row, split="eval")
            _log.info("step %d: %s", step, ", ".join(f"{k}={v:.4f}" for k, v in row.items() if k != "step"))
            score = _main_score(self.task, result)
            if self._better(score, result):
                # the tokenizer once; a better model later replaces only config.json and the weights
                _save_best(self.kept, None if self.best else self.tok, self.out, self.task, s, step, result)
                self.best = {"score": score, "step": step, "metrics": result}
            if self.on_eval is not None:
                self.on_eval(step, score, row["train_loss"])
        if self.info.enabled:
            torch.distributed.barrier()

    def _better(self, score: float | None, result: dict) -> bool:
        """Whether the model just evaluated replaces the kept one. Training only the exits leaves the full-depth
        score where it was: the newest heads win, or under an exit rule (its score moves) the best, ties newer."""
        best = self.best
        if not best or score is None or best["score"] is None:
            return True
        if self.s.train_exits_only:
            return "mean_layers" not in result or score >= best["score"]  # mean_layers: scored under a rule
        return score > best["score"]

    # -------------------------------------------------------------- checkpoints
    def settings(self) -> dict[str, Any]:
        """What a resumed run must share with the one it continues (the progress bar and trackers may change)."""
        settings = json.loads(json.dumps(asdict(self.s), default=str))
        for name in ("progress", "report_to", "save_every", "keep_last", "device"):
            settings.pop(name, None)
        return {"task": self.task.name, "model": self.model_arg, "train_file": self.data.train_path, **settings}

    def save(self, epoch_start: tuple) -> None:
        from albertlm.training import checkpoint as ckpt

        st = self.stepper
        sharded = ckpt.sharded_state(self.model, st.optimizer) if self.s.fsdp else None  # (any world size reads it)
        state = {"model": None if sharded else self.model.state_dict(), "sharded": sharded,
                 "model_config": self.model.config, "architecture": type(self.model).__name__,
                 "optimizer": None if sharded else st.optimizer.state_dict(),
                 "scheduler": st.scheduler.state_dict(), "scaler": st.scaler.state_dict() if st.scaler.is_enabled()
                 else None, "rng": ckpt.rng_state(), "host_rng": ckpt.host_rng_state(),
                 "order_rng": [epoch_start[0], list(epoch_start[1]), epoch_start[2]],
                 "step": self.step, "epoch": self.epoch, "step_in_epoch": self.in_epoch, "nonfinite": st.nonfinite,
                 "tokens_seen": 0, "world_size": self.info.world_size, "global_batch_size": self.s.batch_size,
                 "losses": self.losses, "best": self.best, "elapsed": self.elapsed, "config": self.settings()}
        ckpt.save_training_state(self.out / CHECKPOINTS, state, self.info, self.s.keep_last)  # fmt: skip

    def resume(self) -> None:
        """Continue from the newest valid checkpoint in ``out/checkpoints``; one line when there is none or
        it was written with other settings."""
        from albertlm.training import checkpoint as ckpt

        root = self.out / CHECKPOINTS
        state = ckpt.load_training_state(root, self.info, None)
        if state is None:
            raise TrainingError(f"--resume: no valid checkpoint under {root}; start afresh with --overwrite "
                                "(checkpoints are written every --save-every steps)")  # fmt: skip
        where, now = state["path"], self.settings()
        changed = sorted(k for k in {*now, *state["config"]} if now.get(k) != state["config"].get(k))
        if changed:
            raise TrainingError(f"--resume: {where} was written with other settings ({', '.join(changed)}); resume "
                                "with the same ones, or start afresh with --overwrite")  # fmt: skip
        st = self.stepper
        ckpt.restore(state, st.wrapped, self.model, st.optimizer, st.scheduler, st.scaler, self.info, self.s.fsdp)
        st.nonfinite = state["nonfinite"]
        self.step, self.epoch, self.in_epoch = state["step"], state["epoch"], state["step_in_epoch"]
        self.losses, self.best, self.elapsed = state["losses"], state["best"], state["elapsed"]
        v, internal, gauss = state["order_rng"]
        self.order.setstate((v, tuple(internal), gauss))
        ckpt.set_host_rng_state(state["host_rng"])
        if state["rng"] is not None:
            ckpt.set_rng_state(state["rng"])
        if self.info.is_main:
            _log.info("resumed from %s at step %d", where, self.step)


def _progress(enabled: bool, name: str, initial: int, total: int):  # noqa: ANN202
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=name, disable=not enabled, unit="step")


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _card(out: Path, task: Task, data: Data, s: Settings, model_arg: str, final: dict) -> None:
    """The model card of the kept model (a fresh one: ``out`` holds a new model)."""
    facts = {"train file": data.train_path, "eval file": data.eval_path, "lr": s.lr, "batch size": s.batch_size,
             "max_seq_length": s.inference.max_seq_length, "seed": s.seed,
             "train seconds": f"{final['train_seconds']:.0f}"}  # fmt: skip
    update_card(out, f"fine-tuned on {task.name} for {final['steps']} steps, the model of step {final['best_step']} "
                "kept", datasets=(task.name,), base_model=model_arg if model_arg not in PRESETS else None,
                scores=final["metrics"], task=task.name, fresh=True, facts=facts)  # fmt: skip


def _summary(task: Task, model_arg: str, data: Data, s: Settings, model: torch.nn.Module, feats: list, total: int,
             per_epoch: int, warmup: int, precision: str, train_s: float, losses: list[float], best: dict,
             chosen: dict) -> dict:  # fmt: skip
    """What a fine-tuning run reports (and writes as metrics.json): the data, the settings that ran, the
    time, and the kept model's step and metrics."""
    result = best["metrics"]
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
        "precision": precision,
        "train_seconds": train_s,
        "final_train_loss": float(np.mean(losses[-50:])),
        "newly_initialized_keys": getattr(model, "newly_initialized_keys", []),
        "main_metric": task.main_metric,
        "best_step": best["step"],  # the step whose model is kept in ``out``
        "metrics": result,
    }
    if chosen:
        final["auto_defaults"] = {k: why for k, (_, why) in chosen.items()}
    if data.label_counts:
        final["train_label_counts"] = data.label_counts
    return final


def check_exit_settings(task: Task, s: Settings) -> None:
    """Early exit is for the kinds whose heads have exits; --train-exits-only needs per-layer ones."""
    kind = kind_of(task).name
    if s.exits not in (None, "none") and kind not in EXIT_KINDS:
        raise UserError(f"--exits: early exit is for {', '.join(EXIT_KINDS)} tasks; {task.name} is {kind}, whose "
                        "answer is one decision per token or span position, with no exit rule here (see README)")
    if s.train_exits_only and s.exits == "shared":
        raise UserError("--train-exits-only trains the per-layer exit classifiers; --exits shared has none (its one "
                        "classifier is the model's own): use --exits per-layer")  # fmt: skip


def freeze_all_but_exits(model: Any) -> None:
    """Only the per-layer exit classifiers learn: the encoder, pooler and final classifier keep their weights."""
    if getattr(model.config, "exit_heads", "none") != "per-layer":
        raise UserError("--train-exits-only needs a model with per-layer exits: add --exits per-layer")
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith("exit_classifiers."))


def _describe(s: Settings, chosen: dict, given: set[str]) -> str:
    """``lr 0.00049 (chosen: H=128, random init); batch_size 32 (given); ...``: what runs, and why."""
    used = {"lr": s.lr, "batch_size": s.batch_size, "epochs": s.epochs, "max_seq_length": s.inference.max_seq_length}
    parts = []
    for name, (_, why) in chosen.items():
        if name == "epochs" and s.max_steps:
            parts.append(f"max_steps {s.max_steps} (given)")
            continue
        parts.append(f"{name} {used[name]:g} " + ("(given)" if name in given else f"(chosen: {why})"))
    return "; ".join(parts) + f"; warmup {s.warmup:g}"


def _main_score(task: Task, result: dict) -> float | None:
    """The number the best checkpoint is chosen by (higher is better for every task's main metric)."""
    if task.main_metric in result:
        return float(result[task.main_metric])
    return None


def _save_best(model: Any, tok: Tokenizer | None, out: Path, task: Task, s: Settings, step: int, result: dict) -> None:
    extra: dict[str, Any] = {"best_step": step}
    if "best_f1_thresh" in result:  # SQuAD 2.0: predict answers "" above this null score
        extra[NULL_THRESHOLD_KEY] = result["best_f1_thresh"]
    save(model, tok, out, task, s, **extra)
    _log.debug("kept the model of step %d in %s", step, out)
