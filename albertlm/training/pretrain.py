"""Pretraining: MLM + SOP (or NSP / none) from built shards, one loop for CPU, one GPU and torchrun.

    albertlm pretrain --preset albert-tiny --data shards/en --valid-data shards/en-heldout --out runs/en
    torchrun --nproc_per_node 8 -m albertlm pretrain --preset albert-base-v2 --data shards/en --out runs/base
    albertlm pretrain --out runs/en --resume          # continue exactly where the last checkpoint left off

Batching: a step consumes one global batch of ``global_batch_size`` instances, taken in order from a
per-epoch permutation seeded by (seed, epoch). It is cut into ``world_size x accumulation`` micro-batches;
rank r runs micro-batches [r*acc, (r+1)*acc). The gradient is the mean over micro-batches, so N ranks
compute the same update as one process with N times the accumulation. The data position is (epoch,
step within epoch), which with the saved RNG states makes ``--resume`` bitwise exact on CPU in fp32.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from albertlm.card import update_card
from albertlm.config import AlbertConfig
from albertlm.devices import DEVICE_HELP, parse_device
from albertlm.errors import SEED_BOUNDS, TrainingError, check_settings
from albertlm.heads import AlbertForPreTraining
from albertlm.model import flops_per_token
from albertlm.training import checkpoint as ckpt
from albertlm.training import rundir
from albertlm.training.data_order import StepBatches
from albertlm.training.distributed import (
    DistInfo,
    all_reduce_sum,
    cleanup,
    init_distributed,
    print0,
    same_settings,
)
from albertlm.training.optim import SCHEDULES, build_optimizer, build_scheduler
from albertlm.training.precision import TRAINING_PRECISIONS
from albertlm.training.precision import resolve as resolve_precision
from albertlm.training.steps import Stepper, to_device
from albertlm.training.tracking import Tracker, check_reachable, parse_report_to

_log = logging.getLogger(__name__)


def _opt(default: Any, help: str, **kw: Any) -> Any:
    """A setting with its command-line help (``albertlm pretrain`` derives its flags from these)."""
    return field(default=default, metadata={"help": help, **kw})


LR_DEFAULTS = {"lamb": 1.76e-3, "adamw": 5e-4}  # the paper's LAMB rate for batch 4096; a common AdamW one


@dataclass
class PretrainConfig:
    out: str = _opt("runs/pretrain", "run directory: metrics.jsonl, checkpoints/, final/")
    overwrite: bool = _opt(False, "replace the run already in --out (removes only the files a run writes there)")
    data: str | None = _opt(None, "shards from `albertlm data build` (a folder, or s3://bucket/prefix); omit for "
                            "the embedded demo corpus")
    valid_data: str | None = _opt(None, "held-out shards for periodic validation (a folder or a URL)")
    verify_data: bool = _opt(True, "check every shard's sha256 before training (--no-verify-data skips the read)")
    cache_dir: str | None = _opt(None, "where shards from object storage are cached (default: $ALBERTLM_CACHE or "
                                 "~/.cache/albertlm)")
    cache_gb: float = _opt(50.0, "the cache's size limit; least recently used builds go first", above=0)
    preset: str = _opt("albert-tiny", "model preset (see `albertlm params`); V and special ids come from the data")
    model_overrides: dict[str, Any] = field(default_factory=dict)  # --set FIELD=VALUE, e.g. {"sharing": "none"}
    init_from: str | None = _opt(None, "start from these weights (HF-layout model directory)")
    optimizer: str = _opt("lamb", "lamb as the paper, or adamw", choices=("lamb", "adamw"))
    lr: float | None = _opt(None, "peak learning rate (default: 1.76e-3 for LAMB, 5e-4 for AdamW)", above=0)
    weight_decay: float = _opt(0.01, "decoupled weight decay", min=0)
    warmup_steps: int | None = _opt(None, "linear warmup steps (default: max-steps / 10)", min=0)
    max_steps: int = _opt(1000, "optimizer steps", min=1)
    lr_schedule: str = _opt("original", "original: s/W warmup then 1 - s/T over the whole run (google-research/"
                            "albert); linear: decay from the peak at the end of warmup", choices=tuple(SCHEDULES))
    global_batch_size: int = _opt(128, "instances per optimizer step, over all ranks and micro-batches", min=1)
    micro_batch_size: int = _opt(32, "instances per forward on one process", min=1)
    clip_norm: float = _opt(1.0, "global gradient-norm clip (spec section 7; inf: none)", above=0)
    precision: str = _opt("auto", "auto (bf16 autocast where the CPU has AVX-512 BF16 / AMX or the GPU has bf16; "
                          "else fp16 on a GPU, fp32 on a CPU), fp32, bf16 (autocast) or fp16 (autocast + grad "
                          "scaler); weights stay fp32",
                          choices=TRAINING_PRECISIONS)
    compile: bool | None = _opt(None, "torch.compile the model (default: on for CUDA, off on CPU)")
    activation_checkpointing: bool = _opt(False, "recompute blocks in backward")
    fsdp: bool = _opt(False, "FSDP2 (fully_shard) instead of DDP under torchrun")
    pack: bool = _opt(False, "pack several instances per row (no padding)")
    seed: int = _opt(0, "seed for weights and data order", **SEED_BOUNDS)
    log_every: int = _opt(10, "steps between metric lines", min=1)
    eval_every: int = _opt(100, "steps between validations", min=1)
    eval_batches: int = _opt(20, "micro-batches per validation", min=1)
    save_every: int = _opt(100, "steps between checkpoints", min=1)
    keep_last: int = _opt(2, "checkpoints kept (0: all)", min=0)
    max_nonfinite: int = _opt(20, "skipped steps with a non-finite loss or gradient before the run stops; a run "
                                  "whose last min(N, steps) updates were all skipped fails", min=1)
    device: str = _opt("auto", DEVICE_HELP, parse=parse_device)
    peak_tflops: float | None = _opt(None, "peak TFLOP/s for MFU (default: the GPU's from a table; no MFU on CPU)",
                                     above=0)
    report_to: str = _opt("jsonl", "where metrics go besides metrics.jsonl: a comma-separated list of none, jsonl, "
                          "tensorboard, mlflow, wandb (see albertlm.training.tracking)", metavar="LIST")
    progress: bool = _opt(True, "show a progress bar")

    @property
    def peak_lr(self) -> float:
        return self.lr if self.lr is not None else LR_DEFAULTS[self.optimizer]

    @property
    def warmup(self) -> int:
        return self.warmup_steps if self.warmup_steps is not None else self.max_steps // 10

    def check_flags(self) -> None:
        """What the settings alone can get wrong (no data, no processes needed), so a typo stops a run
        before it builds, opens or replaces anything."""
        if self.precision not in TRAINING_PRECISIONS:
            raise TrainingError(f"--precision must be one of {', '.join(TRAINING_PRECISIONS)}, not {self.precision!r}")
        if self.lr_schedule not in SCHEDULES:
            raise TrainingError(f"--lr-schedule must be one of {', '.join(SCHEDULES)}, not {self.lr_schedule!r}")
        if self.optimizer not in LR_DEFAULTS:
            raise TrainingError(f"--optimizer must be one of {', '.join(LR_DEFAULTS)}, not {self.optimizer!r}")
        parse_report_to(self.report_to)  # a tracker that is not installed: one line before anything runs
        check_settings(self)  # every flag field as its flag checks it (a run_config.json or Python gets it too)
        if self.warmup > self.max_steps:
            raise TrainingError(f"--warmup-steps must be from 0 to --max-steps ({self.max_steps}), not {self.warmup}")
        if not self.init_from:
            AlbertConfig.from_preset(self.preset, **self.model_overrides)  # unknown preset or field, bad shape

    def validate(self, world: int) -> int:
        """Checks the settings and the batch arithmetic; returns the accumulation steps per rank."""
        self.check_flags()
        per_step = self.micro_batch_size * world
        if self.global_batch_size % per_step:
            raise TrainingError(
                f"--global-batch-size {self.global_batch_size} is not a multiple of --micro-batch-size "
                f"{self.micro_batch_size} x {world} processes; pick a multiple of {per_step}"
            )
        if self.data is None:
            raise TrainingError("no --data: build shards with `albertlm data build`, or run the demo without --data")
        return self.global_batch_size // per_step


def make_collator(cfg: PretrainConfig, dataset, max_len: int):
    from albertlm.data import PackingCollator, PretrainingCollator

    if cfg.pack:
        return PackingCollator(max_len, pad_id=dataset.pad_id)
    cuda = cfg.device.startswith("cuda")
    return PretrainingCollator(pad_id=dataset.pad_id, pad_to_multiple_of=8 if cuda else None)


# ------------------------------------------------------------------------------------------ measuring
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L4": 121.0, "A10": 125.0, "4090": 165.0}


def peak_flops(cfg: PretrainConfig, info: DistInfo) -> tuple[float, str]:
    """Peak FLOP/s for MFU: the flag, or a table of GPUs (dense bf16); 0 (no MFU) where neither knows."""
    if cfg.peak_tflops:
        return cfg.peak_tflops * 1e12, "--peak-tflops"
    if info.device.type == "cuda":
        name = torch.cuda.get_device_name(info.device)
        for key, tf in PEAK_BF16_TFLOPS.items():
            if key in name:
                return tf * 1e12, f"{name} dense bf16"
        return 0.0, f"{name} unknown"
    # No CPU peak is honest without knowing the core count, vector width and clock the job really gets (a
    # short matmul timing gave MFUs of 98-291%): on CPU, MFU is reported only against --peak-tflops.
    return 0.0, "unknown on CPU (give --peak-tflops for MFU)"


def useful_flops(config: AlbertConfig, batch: dict[str, torch.Tensor]) -> float:
    """Training FLOPs of one micro-batch: real tokens only, MLM head at masked positions only."""
    mask = batch.get("attention_mask")
    seq = batch["input_ids"].shape[1]
    real = int(batch["input_ids"].numel() if mask is None or mask.dim() == 3 else mask.sum())
    masked = int((batch["labels"] != -100).sum())
    return real * flops_per_token(config, seq, scored_positions=masked * seq / max(real, 1))


# ------------------------------------------------------------------------------------------ one step
def micro_step(
    model, batch: dict[str, torch.Tensor], autocast, mask_id: int | None = None
) -> tuple[torch.Tensor, dict[str, float]]:
    """Forward one micro-batch; loss and the counts behind the logged accuracies.

    ``mlm_acc`` scores every labelled position, including the 10% left unchanged, which a model gets
    right by copying its input; with ``mask_id``, ``mlm_mask_*`` count the [MASK]ed positions alone,
    the part only context can predict (a model stuck at unigram statistics scores ~0.06 there).
    """
    with autocast():
        out = model(**batch)
    stats = {"mlm_loss": float(out.mlm_loss.detach()), "mlm_correct": 0.0, "mlm_total": 0.0,
             "mlm_mask_correct": 0.0, "mlm_mask_total": 0.0, "sop_loss": 0.0, "sop_correct": 0.0, "sop_total": 0.0}
    if out.mlm_labels is not None and out.mlm_labels.numel():
        hit = out.prediction_logits.argmax(-1) == out.mlm_labels
        stats["mlm_correct"] = float(hit.sum())
        stats["mlm_total"] = float(out.mlm_labels.numel())
        if mask_id is not None:
            at_mask = batch["input_ids"][batch["labels"] != -100] == mask_id  # same order as mlm_labels
            stats["mlm_mask_correct"] = float((hit & at_mask).sum())
            stats["mlm_mask_total"] = float(at_mask.sum())
    if out.sop_loss is not None:
        labels = batch["sentence_order_label"]
        valid = labels != -100
        stats["sop_loss"] = float(out.sop_loss.detach())
        stats["sop_correct"] = float(((out.sop_logits.argmax(-1) == labels) & valid).sum())
        stats["sop_total"] = float(valid.sum())
    return out.loss, stats


@torch.no_grad()
def evaluate(model, dataset, cfg: PretrainConfig, info: DistInfo, collate, autocast) -> dict[str, float]:
    """Held-out MLM / SOP loss and accuracy on a fixed slice (epoch 0 masks), split over ranks."""
    model.eval()
    n = min(len(dataset), cfg.eval_batches * cfg.micro_batch_size)
    mine = list(range(info.rank * cfg.micro_batch_size, n, cfg.micro_batch_size * info.world_size))
    sums = np.zeros(9)
    for start in mine:
        batch = collate([dataset[i] for i in range(start, min(start + cfg.micro_batch_size, n))])
        batch = {k: v.to(info.device) for k, v in batch.items()}
        _, s = micro_step(model, batch, autocast, dataset.special.mask_id)
        sums += [s["mlm_loss"] * s["mlm_total"], s["mlm_correct"], s["mlm_total"],
                 s["sop_loss"] * s["sop_total"], s["sop_correct"], s["sop_total"],
                 float((batch["sentence_order_label"] == 1).sum()) if "sentence_order_label" in batch else 0.0,
                 s["mlm_mask_correct"], s["mlm_mask_total"]]
    t = all_reduce_sum(info, sums.tolist())
    model.train()
    return {
        "valid_mlm_loss": t[0] / max(t[2], 1), "valid_mlm_acc": t[1] / max(t[2], 1),
        "valid_mlm_acc_at_mask": t[7] / max(t[8], 1),
        "valid_sop_loss": t[3] / max(t[5], 1), "valid_sop_acc": t[4] / max(t[5], 1) if t[5] else float("nan"),
        # accuracy of always answering the held-out majority label: the bar SOP accuracy must clear
        "valid_sop_majority": max(t[6], t[5] - t[6]) / t[5] if t[5] else float("nan"),
    }


def _check_same_vocabulary(model_dir: str, data: str, tok: dict[str, Any]) -> None:
    """Refuse weights whose tokenizer gives the data's ids other meanings (same size is not enough)."""
    from albertlm.data import vocab_fingerprint
    from albertlm.tokenizer import SPM_FILE, VOCAB_FILE, load_tokenizer

    d = Path(model_dir)
    if not any((d / f).is_file() for f in (SPM_FILE, VOCAB_FILE)):
        _log.warning(f"--init-from {model_dir} holds no tokenizer ({SPM_FILE} or {VOCAB_FILE}), so its vocabulary "
                     f"cannot be checked against {data}'s")
        return
    theirs = load_tokenizer(d)
    expected = tok.get("fingerprint")
    if expected is None and tok.get("path") and Path(tok["path"]).exists():
        expected = vocab_fingerprint(load_tokenizer(tok["path"]))  # shards built before fingerprints
    if expected is not None and vocab_fingerprint(theirs) != expected:
        raise TrainingError(f"--init-from {model_dir}: its vocabulary ({theirs.kind}, {theirs.vocab_size} pieces) is "
                            f"not the one {data} was built with ({tok['kind']}, {tok['vocab_size']} pieces), so every "
                            f"id would mean another token; build the shards with {model_dir}'s tokenizer")


# ------------------------------------------------------------------------------------------ the run
class Run:
    """Everything a run holds; ``train()`` is the loop."""

    def __init__(self, cfg: PretrainConfig, resume: bool = False, allow_data_change: bool = False):
        from albertlm.data import PretrainingDataset, load_manifest
        from albertlm.files import local_path

        for name in ("out", "data", "valid_data", "init_from", "cache_dir"):  # file:// URLs: the paths they name
            setattr(cfg, name, local_path(getattr(cfg, name), "--" + name.replace("_", "-")))
        self.cfg = cfg
        self.info = info = init_distributed(cfg.device)
        same_settings(info, {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("progress", "cache_dir")})
        cfg.device = info.device.type if info.enabled else str(info.device)  # (each rank's own GPU under torchrun)
        cfg.precision = resolve_precision(cfg.precision, info.device)  # run_config.json records what ran
        self.acc = cfg.validate(info.world_size)
        check_reachable(cfg.report_to)  # a tracking server down: one line now, not retries in mid-run
        self.out = Path(cfg.out)
        self.ckpt_root = self.out / "checkpoints"
        # Every rank checks the folder before rank 0 changes it, so all reach the same verdict.
        self.run_id = rundir.prepare(self.out, resume, cfg.overwrite)
        if info.enabled:
            torch.distributed.barrier()
        if cfg.overwrite and info.is_main and rundir.holds_run(self.out):
            rundir.remove_previous_run(self.out)
        data, valid = self._local(cfg.data), self._local(cfg.valid_data)
        manifest = load_manifest(data, verify=cfg.verify_data)
        self.dataset = PretrainingDataset(data)
        self.valid = PretrainingDataset(valid, verify=cfg.verify_data) if valid else None
        self.data_identity = {"data": data_identity(manifest),
                              "valid_data": data_identity(self.valid.manifest) if self.valid else None}
        if resume:
            self._check_same_data(allow_data_change)
        self.task = manifest["settings"].get("task", "sop")
        tok = manifest["tokenizer"]
        self.tokenizer_path = tok.get("path")
        max_len = int(manifest["settings"].get("max_seq_length", 512))
        overrides = dict(vocab_size=tok["vocab_size"], pad_token_id=tok["pad_id"], bos_token_id=tok["cls_id"],
                         eos_token_id=tok["sep_id"], **cfg.model_overrides)
        torch.manual_seed(cfg.seed)  # identical initial weights on every rank
        if cfg.init_from:
            self.model = AlbertForPreTraining.from_pretrained(cfg.init_from)
            if self.model.config.vocab_size < tok["vocab_size"]:
                raise TrainingError(f"--init-from {cfg.init_from} has {self.model.config.vocab_size} tokens but the "
                                    f"data's tokenizer has {tok['vocab_size']}; build the shards with its tokenizer")
            _check_same_vocabulary(cfg.init_from, cfg.data, tok)
        else:
            config = AlbertConfig.from_preset(cfg.preset, **overrides)
            if max_len > config.max_position_embeddings:
                raise TrainingError(f"{cfg.data}: max_seq_length {max_len} > the model's "
                                    f"{config.max_position_embeddings} positions")
            self.model = AlbertForPreTraining(config)
        self.config = self.model.config
        self.model.albert.encoder.gradient_checkpointing = cfg.activation_checkpointing
        self.model.train()

        def optimizer(model):
            opt = build_optimizer(model, cfg.optimizer, cfg.peak_lr, cfg.weight_decay)
            return opt, build_scheduler(opt, cfg.warmup, cfg.max_steps, cfg.lr_schedule)

        self.stepper = Stepper(self.model, info, cfg.precision, optimizer, cfg.clip_norm, cfg.max_nonfinite,
                               cfg.fsdp, cfg.compile)  # fmt: skip
        self.wrapped, self.optimizer, self.scheduler = (self.stepper.wrapped, self.stepper.optimizer,
                                                        self.stepper.scheduler)  # (the state's parts)
        self.collate = make_collator(cfg, self.dataset, max_len)
        self.step, self.tokens_seen = 0, 0
        self.resumed_from: tuple[str, int] | None = None  # (checkpoint, its world size) after resume()
        self.batches = StepBatches(self.dataset, cfg, info, self.acc)

    def _check_same_data(self, allow: bool) -> None:
        """--resume goes on with the data the run started with: the data position (epoch, step in epoch) and
        the per-epoch order index its instances, so a rebuilt folder (other text, another count) would silently
        continue on other data. Refused in one line unless ``allow`` (--allow-data-change)."""
        recorded = rundir.recorded_data_identity(self.out)
        for name, now in self.data_identity.items():
            then = recorded.get(name)
            if then is None or then == now:  # (a run recorded before identities were: nothing to compare)
                continue
            flag = "--" + name.replace("_", "-")
            if not allow:
                raise TrainingError(f"--resume: {flag} {getattr(self.cfg, name)} changed since the run started (its "
                                    f"manifest's sha256 {then[:12]} is now {now[:12]}: rebuilt?), so the saved data "
                                    "position would index other instances; restore that data, or continue on it on "
                                    "purpose with --allow-data-change")  # fmt: skip
            print0(self.info, f"--allow-data-change: {flag} {getattr(self.cfg, name)} changed since the run started; "
                              "continuing on it (the data position now indexes other instances)")  # fmt: skip

    def _local(self, path: str | None) -> str | None:
        """A local folder for ``path``: itself, or for object storage its copy in the cache (albertlm.data.remote;
        the ranks of one host share it, one of them downloading)."""
        from albertlm.data.remote import fetch, is_remote

        if not is_remote(path):
            return path
        local = str(fetch(path, self.cfg.cache_dir, self.cfg.cache_gb))
        print0(self.info, f"{path}: read from its cached copy {local}")
        return local

    # -------------------------------------------------------------- state
    def autocast(self):
        return self.stepper.autocast()

    @property
    def scaler(self) -> torch.amp.GradScaler:
        return self.stepper.scaler

    @property
    def nonfinite(self) -> int:
        return self.stepper.nonfinite

    @nonfinite.setter
    def nonfinite(self, n: int) -> None:
        self.stepper.nonfinite = n

    def resume(self) -> bool:
        """Load the newest valid checkpoint's state into this run; False when there is none."""
        state = ckpt.load_training_state(self.ckpt_root, self.info, self.run_id)
        if state is None:
            return False
        self.load_state_dict(state)
        self.resumed_from = (Path(state["path"]).name, int(state["world_size"]))  # (records never name the run's place)
        print0(self.info, f"resumed from {state['path']} at step {self.step}")
        return True

    def save(self) -> Path | None:
        return ckpt.save_training_state(self.ckpt_root, self.state_dict(), self.info, self.cfg.keep_last)

    def state_dict(self) -> dict[str, Any]:
        """Everything a bitwise-exact resume needs: the model and optimizer state (full; under --fsdp each
        rank's shards, as ``sharded``), scheduler, grad scaler, counters, data position, this rank's and the
        host's RNG state, and the settings it ran with."""
        from albertlm.training.rundir import settings_json

        cfg, info = self.cfg, self.info
        model_sd, opt_sd, sharded = None, None, None
        if cfg.fsdp:  # (also in one process: the checkpoint keeps the layout FSDP runs of any size read)
            sharded = ckpt.sharded_state(self.wrapped, self.optimizer)
        else:
            model_sd, opt_sd = self.full_state()
        return {"model": model_sd, "model_config": self.config, "architecture": type(self.model).__name__,
                "optimizer": opt_sd, "sharded": sharded, "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None, "rng": ckpt.rng_state(),
                "step": self.step, "epoch": self.batches.epoch, "step_in_epoch": self.batches.step_in_epoch,
                "nonfinite": self.nonfinite, "tokens_seen": self.tokens_seen,
                "world_size": info.world_size, "global_batch_size": cfg.global_batch_size,
                "host_rng": ckpt.host_rng_state(), "config": settings_json(cfg, self.out),
                "run_id": self.run_id}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` (or ``checkpoint.load_training_state``) gives; the model weights in our
        layout or the HF one. A checkpoint of other distribution settings is refused before anything loads."""

        cfg, info = self.cfg, self.info
        where = state.get("path", "the checkpoint")
        if (state["global_batch_size"], state["config"].get("fsdp", False)) != (cfg.global_batch_size, cfg.fsdp):
            raise TrainingError(f"{where} was written with global batch {state['global_batch_size']} and "
                                f"fsdp={state['config'].get('fsdp', False)}: the data position counts global batches "
                                "and the optimizer state's layout follows --fsdp, so resume with the same two "
                                "(the number of processes and hosts may change)")  # fmt: skip
        saved_opt = state["config"].get("optimizer", cfg.optimizer)
        if saved_opt != cfg.optimizer:
            raise TrainingError(f"{where} holds {saved_opt} state, this run uses --optimizer {cfg.optimizer}: the "
                                f"moments do not carry over; resume with --optimizer {saved_opt}")
        if state["world_size"] != info.world_size:
            print0(info, f"{where}: written by {state['world_size']} process(es), resumed by {info.world_size}: "
                         "the full model and optimizer state reshard, the data position is the global step's")
        ckpt.restore(state, self.wrapped, self.model, self.optimizer, self.scheduler, self.scaler, info, cfg.fsdp)
        self.step, self.nonfinite, self.tokens_seen = state["step"], state["nonfinite"], state["tokens_seen"]
        self.batches.epoch, self.batches.step_in_epoch = state["epoch"], state["step_in_epoch"]
        ckpt.set_host_rng_state(state["host_rng"])
        if state["rng"] is not None:
            ckpt.set_rng_state(state["rng"])
        else:  # a rank the writing run did not have (more processes now): dropout seeded from the step
            torch.manual_seed(cfg.seed * 1_000_003 + self.step * 1_009 + info.rank)

    def full_state(self) -> tuple[dict, dict]:
        """Full (unsharded) model and optimizer state; under FSDP a collective, complete on rank 0."""
        if self.cfg.fsdp:  # (also in one process: the state keeps the layout FSDP runs of any size read)
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

            opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
            return get_state_dict(self.wrapped, self.optimizer, options=opts)
        return self.model.state_dict(), self.optimizer.state_dict()

    # -------------------------------------------------------------- loop
    def train(self) -> dict[str, Any]:
        cfg, info = self.cfg, self.info
        self.out.mkdir(parents=True, exist_ok=True)
        if info.is_main:
            rundir.write_config(cfg, self.out, self.run_id, self.data_identity)
        model = self.stepper.forward
        metrics = Tracker(self.out, cfg.report_to, name=self.out.name, params=dataclasses.asdict(cfg),
                          resumed_step=self.step if self.step else None, enabled=info.is_main)
        if self.resumed_from is not None:  # the restart in the run's own record
            path, before = self.resumed_from
            metrics.log({"step": self.step, "event": "resumed", "checkpoint": path, "world_size_before": before,
                         "world_size": info.world_size, "time": time.time()})  # fmt: skip
        peak, peak_src = peak_flops(cfg, info)
        print0(info, f"model: {self.model.num_parameters():,} parameters ({cfg.preset}, sharing="
                     f"{self.config.sharing}); data: {len(self.dataset):,} instances, task {self.task}; "
                     f"{info.world_size} process(es) x {self.acc} accumulation x micro-batch {cfg.micro_batch_size}")
        bar = _progress(cfg.progress and info.is_main, self.step, cfg.max_steps)
        window: dict[str, float] = {}
        t_window = time.perf_counter()
        last_valid: dict[str, float] = {}
        while self.step < cfg.max_steps:
            stats, flops, tokens, finite = self._one_step(model)
            for k, v in stats.items():
                window[k] = window.get(k, 0.0) + v
            window["flops"] = window.get("flops", 0.0) + flops
            window["tokens"] = window.get("tokens", 0.0) + tokens
            window["steps"] = window.get("steps", 0.0) + 1
            self.step += 1
            bar.update(1)
            if self.step % cfg.log_every == 0 or self.step == cfg.max_steps:
                row = self._summarize(window, time.perf_counter() - t_window, peak)
                metrics.log(row)
                bar.set_postfix_str(f"loss {row['loss']:.3f} mlm {row['mlm_acc']:.3f} sop {row['sop_acc']:.3f} "
                                    f"lr {row['lr']:.2e} {row['tokens_per_s']:,.0f} tok/s"
                                    + (f" mfu {row['mfu']:.1%}" if row["mfu"] is not None else ""))
                window, t_window = {}, time.perf_counter()
            if self.valid is not None and (self.step % cfg.eval_every == 0 or self.step == cfg.max_steps):
                last_valid = evaluate(model, self.valid, cfg, info, self.collate, self.autocast)
                metrics.log({"step": self.step, "split": "valid", **last_valid})
            if self.step % cfg.save_every == 0 or self.step == cfg.max_steps:
                self.save()
        bar.close()
        self.stepper.check_trained(self.step)
        final = self.out / "final"
        model_sd, _ = self.full_state()  # a collective under FSDP: every rank takes part
        if info.is_main:
            from albertlm.hf import save_state_dict

            save_state_dict(self.config, "AlbertForPreTraining", model_sd, final)
            self._copy_tokenizer(final)
            update_card(final, f"pretrained with MLM + {self.task} for {self.step} steps, {self.tokens_seen:,} "
                        f"tokens", datasets=(Path(cfg.data).name,) if cfg.data else (), scores=last_valid,
                        task=f"pretraining ({self.task})", split="held-out", fresh=True, facts={
                            "optimizer": cfg.optimizer, "peak lr": cfg.peak_lr, "global batch": cfg.global_batch_size,
                            "preset": cfg.preset, "overrides": cfg.model_overrides or "none"})  # fmt: skip
        metrics.finish({**last_valid, "split": "valid"} if last_valid else {}, self.step)
        return {"steps": self.step, "tokens": self.tokens_seen, "final": str(final),
                "metrics": str(metrics.path), "nonfinite_steps": self.nonfinite, **last_valid}

    def _one_step(self, model) -> tuple[dict[str, float], float, int, bool]:
        info, stepper = self.info, self.stepper
        micro = self.batches.next()
        sums: dict[str, float] = {}
        flops, tokens = 0.0, 0
        for i, indices in enumerate(micro):
            cpu_batch = self.collate([self.dataset[j] for j in indices])
            batch = to_device(cpu_batch, info.device)
            with stepper.sync(i, len(micro)):
                loss, s = micro_step(model, batch, self.autocast, self.dataset.special.mask_id)
                stepper.backward(loss, 1 / len(micro))  # the step's gradient: the mean over its micro-batches
            for k, v in s.items():
                sums[k] = sums.get(k, 0.0) + v
            sums["loss"] = sums.get("loss", 0.0) + float(loss.detach()) / len(micro)
            flops += useful_flops(self.config, batch)
            am = batch.get("attention_mask")
            real = am.sum() if am is not None and am.dim() == 2 else (batch["input_ids"] != self.dataset.pad_id).sum()
            tokens += int(real)
        applied, sums["grad_norm"] = stepper.apply(sums["loss"])
        self.tokens_seen += tokens * info.world_size
        return sums, flops * info.world_size, tokens * info.world_size, applied

    def _summarize(self, w: dict[str, float], seconds: float, peak: float) -> dict[str, Any]:
        steps = w["steps"]
        t = all_reduce_sum(self.info, [w.get("mlm_correct", 0), w.get("mlm_total", 0),
                                       w.get("sop_correct", 0), w.get("sop_total", 0),
                                       w.get("mlm_mask_correct", 0), w.get("mlm_mask_total", 0)])
        return {
            "step": self.step, "loss": w["loss"] / steps, "mlm_loss": w["mlm_loss"] / steps / self.acc,
            "sop_loss": w["sop_loss"] / steps / self.acc, "mlm_acc": t[0] / max(t[1], 1),
            "mlm_acc_at_mask": t[4] / max(t[5], 1),
            "sop_acc": t[2] / max(t[3], 1) if t[3] else float("nan"),
            "lr": self.scheduler.get_last_lr()[0], "grad_norm": w["grad_norm"] / steps,
            "tokens_per_s": w["tokens"] / seconds, "mfu": w["flops"] / seconds / peak if peak else None,
            "tokens_seen": self.tokens_seen, "nonfinite_steps": self.nonfinite, "time": time.time(),
        }

    def _copy_tokenizer(self, final: Path) -> None:
        if self.tokenizer_path and Path(self.tokenizer_path).exists():
            from albertlm.tokenizer import load_tokenizer

            load_tokenizer(self.tokenizer_path).save(final)


def _progress(enabled: bool, initial: int, total: int):
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, disable=not enabled, desc="pretrain", dynamic_ncols=True)


def load_run_config(out: str | Path) -> PretrainConfig:
    """The settings of the run in ``out`` (for ``--resume``), its paths resolved against ``out`` itself."""
    import dataclasses

    saved, _ = rundir.read_config(out)
    saved.setdefault("lr_schedule", "linear")  # runs saved before the field existed used this one
    if saved.get("device") is None:  # runs saved before --device auto
        saved["device"] = "auto"
    if saved.pop("tensorboard", False):  # runs saved before --report-to
        saved.setdefault("report_to", "tensorboard")
    fields = {f.name for f in dataclasses.fields(PretrainConfig)}
    return PretrainConfig(**{k: v for k, v in saved.items() if k in fields}, out=str(out))


def data_identity(manifest: dict) -> str:
    """A build's identity: the sha256 of what its manifest says the instances are made of (every shard file's
    checksum, the mode, settings and vocabulary), not where or when it was built: a build of the same text
    with the same settings (builds are deterministic) is the same data, here or on an object store."""
    import hashlib
    import json

    what = {"mode": manifest["mode"], "token_dtype": manifest["token_dtype"], "settings": manifest["settings"],
            "vocabulary": manifest["tokenizer"].get("fingerprint"), "word_start": manifest["word_start"]["sha256"],
            "shards": [{k: f["sha256"] for k, f in s["files"].items()} for s in manifest["shards"]]}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def pretrain(cfg: PretrainConfig, resume: bool | str = False, allow_data_change: bool = False) -> dict[str, Any]:
    """Run (or resume) a pretraining run; returns the final summary. Cleans up the process group.
    ``allow_data_change``: resume although the data was rebuilt since the run started (refused otherwise).

    ``resume="auto"`` is a restart by torchrun's elastic agent (a host failed, left or joined): the run goes on
    from its newest valid checkpoint at the new world size, or from step 0 when none was written yet."""
    run = Run(cfg, bool(resume), allow_data_change)
    try:
        if resume and not run.resume():
            if resume != "auto":
                raise TrainingError(f"--resume: no valid checkpoint under {run.ckpt_root} (see the warnings above); "
                                    f"start afresh with --overwrite, or restore a checkpoint there")
            print0(run.info, f"restarted by torchrun before any checkpoint in {run.ckpt_root}: from step 0")
        result = run.train()
        result["world_size"] = run.info.world_size
        return result
    finally:
        cleanup(run.info)
