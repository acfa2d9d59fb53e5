"""One optimizer step, the same machinery for pretraining and fine-tuning.

``Stepper`` holds what a step needs besides the data and the loss: the device's precision (bf16 autocast, or
fp16 with a grad scaler, or fp32), the model wrapped for torchrun (DDP, or FSDP2 with --fsdp), the
compiled forward, the optimizer and schedule, gradient accumulation over micro-batches, clipping, and the
guard against non-finite losses and gradients with its accounting:

    stepper = Stepper(model, info, "auto", lambda m: (opt, sched), clip_norm=1.0, max_nonfinite=20)
    for i, (batch, weight) in enumerate(micro_batches):
        with stepper.sync(i, len(micro_batches)):
            with stepper.autocast():
                loss = stepper.forward(**batch).loss
            stepper.backward(loss, weight)
    applied, grad_norm = stepper.apply(loss_sum)

A step whose loss or gradient is not finite on any rank is skipped on every rank (the weights stay as
they were); ``max_nonfinite`` skipped steps stop the run with a ``TrainingError`` that says what to change.
Under fp16 the grad scaler decides instead (it skips the overflowing steps and lowers its scale).
"""

from __future__ import annotations

import contextlib
import logging
import math
import warnings
from collections.abc import Callable
from typing import Any

import torch

from albertlm.errors import TrainingError
from albertlm.training.distributed import DistInfo, any_rank, wrap_model
from albertlm.training.precision import autocast as precision_autocast
from albertlm.training.precision import resolve as resolve_precision

_log = logging.getLogger(__name__)

DEFAULT_ADVICE = "lower --lr, use --precision fp32 or bf16, or check the data"


class Stepper:
    """The model on its device, wrapped, compiled, with its optimizer, scaler and non-finite accounting."""

    def __init__(self, model: torch.nn.Module, info: DistInfo, precision: str,
                 optimizer: Callable[[torch.nn.Module], tuple[Any, Any]], clip_norm: float = 1.0,
                 max_nonfinite: int = 20, fsdp: bool = False, compile: bool | None = None,
                 advice: str = DEFAULT_ADVICE):  # fmt: skip
        self.info, self.clip_norm, self.max_nonfinite, self.advice = info, clip_norm, max_nonfinite, advice
        self.precision = resolve_precision(precision, info.device)
        self.model = model.to(info.device)
        self.fsdp = fsdp and info.enabled
        # Wrap before building the optimizer: fully_shard replaces the parameters with sharded ones.
        self.wrapped = wrap_model(self.model, info, fsdp)
        self.optimizer, self.scheduler = optimizer(self.model)
        self.scaler = torch.amp.GradScaler(info.device.type, enabled=self.precision == "fp16")
        self.compiled = compile if compile is not None else info.device.type == "cuda"
        self.forward = torch.compile(self.wrapped) if self.compiled else self.wrapped
        self.nonfinite = 0  # steps skipped in the whole run (saved with the checkpoints)
        self.skipped_in_a_row = 0  # since the last applied update (a resume restarts it)

    def autocast(self) -> contextlib.AbstractContextManager:
        return precision_autocast(self.precision, self.info.device)

    def sync(self, i: int, n: int) -> contextlib.AbstractContextManager:
        """DDP all-reduces the gradients once per step: on the last of the ``n`` micro-batches only."""
        if self.info.enabled and not self.fsdp and i < n - 1:
            return self.wrapped.no_sync()
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor, weight: float = 1.0) -> None:
        """Accumulate ``weight * loss``'s gradient (the weights of a step's micro-batches make their mean)."""
        self.scaler.scale(loss * weight).backward()

    def apply(self, loss: float) -> tuple[bool, float]:
        """End the step: unscale, clip, then update unless the loss or gradient is non-finite on some rank;
        the schedule advances either way. Returns (applied, the gradient norm before clipping)."""
        self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(
            [p for p in self.model.parameters() if p.grad is not None], self.clip_norm)
        if hasattr(grad_norm, "full_tensor"):  # FSDP2: a DTensor
            grad_norm = grad_norm.full_tensor()
        bad = any_rank(self.info, not (math.isfinite(loss) and torch.isfinite(grad_norm).item()))
        if bad and not self.scaler.is_enabled():
            self.nonfinite += 1
            self.skipped_in_a_row += 1
            self.optimizer.zero_grad(set_to_none=True)
            if self.info.is_main:
                step = self.scheduler.last_epoch + 1  # (the schedule counts every step, skipped ones too)
                _log.info(f"step {step}: non-finite loss or gradient (loss {loss}), update skipped "
                          f"({self.nonfinite}/{self.max_nonfinite})")
            if self.nonfinite >= self.max_nonfinite:
                raise TrainingError(f"{self.nonfinite} steps with a non-finite loss or gradient (the last loss: "
                                    f"{loss}); stopping without saving. {self.advice[0].upper()}{self.advice[1:]}")
        else:
            self.skipped_in_a_row = 0
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad(set_to_none=True)
        with warnings.catch_warnings():  # a skipped first update is meant: the schedule still counts the step
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step\\(\\)` before")
            self.scheduler.step()
        return not bad, float(grad_norm)

    def check_trained(self, steps: int, what: str = "final/ was not written") -> None:
        """Refuse to keep a model whose last updates were all skipped (it did not train)."""
        if self.skipped_in_a_row and self.skipped_in_a_row >= min(self.max_nonfinite, steps):
            raise TrainingError(f"the last {self.skipped_in_a_row} updates were all skipped (non-finite loss or "
                                f"gradient), so the model did not train; {what}. {self.advice[0].upper()}"
                                f"{self.advice[1:]}")

    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """A collated CPU batch on ``device``: through pinned memory and a non-blocking copy to a GPU."""
    if device.type != "cuda":
        return {k: v.to(device) for k, v in batch.items()}
    return {k: v.pin_memory().to(device, non_blocking=True) for k, v in batch.items()}
