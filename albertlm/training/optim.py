"""Optimizers and schedules: LAMB exactly as the original ALBERT release, AdamW, warmup + linear decay.

Schedules (a multiplier of the peak lr at step s, the number of updates done; W warmup, T total steps):
    original  s/W while s < W, then (1 - s/T): the original's optimization.py, polynomial decay over the
              whole run that warmup overrides, so the lr is 0 at step 0 and (1 - W/T) of the peak at W
    linear    (s+1)/W while s < W, then (T - s)/(T - W): decay from the peak at W (albertlm before issue 22)

LAMB (spec section 7; google-research/albert lamb_optimizer.py): no bias correction,
    m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2
    u = m / (sqrt(v) + eps) + wd * w                    (wd only for decayed parameters)
    r = ||w|| / ||u||   (1.0 where either norm is 0; never clipped; only for decayed parameters)
    w = w - lr * r * u
LayerNorm and bias parameters are excluded from weight decay and from the trust ratio.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from albertlm.errors import UserError


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: decayed weights (with the trust ratio under LAMB) and the excluded ones.

    Excluded, as the original's ["LayerNorm", "layer_norm", "bias"] name list: every LayerNorm parameter
    and every bias. Shared weights appear once (``named_parameters`` de-duplicates), so a weight used by
    every layer is updated once with the sum of its gradients, as in the original.
    """
    norm_params = {id(p) for m in model.modules() if isinstance(m, nn.LayerNorm) for p in m.parameters()}
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            excluded = id(p) in norm_params or name.endswith("bias")
            (no_decay if excluded else decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay, "trust_ratio": True},
        {"params": no_decay, "weight_decay": 0.0, "trust_ratio": False},
    ]


class Lamb(torch.optim.Optimizer):
    """LAMB of the original ALBERT release (see module docstring); state kept in float32."""

    def __init__(
        self,
        params: Iterable,
        lr: float = 1.76e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
    ):
        if lr < 0 or eps <= 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise UserError(f"invalid LAMB settings lr={lr} betas={betas} eps={eps}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, trust_ratio=True)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001 - torch's signature
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad.float()
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                w = p.float()
                update = m / (v.sqrt() + group["eps"])
                if group["weight_decay"]:
                    update.add_(w, alpha=group["weight_decay"])
                ratio = 1.0
                if group["trust_ratio"]:
                    w_norm, u_norm = w.norm(), update.norm()
                    ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                p.copy_(w - group["lr"] * ratio * update)
        return loss


def build_optimizer(model: nn.Module, name: str, lr: float, weight_decay: float = 0.01) -> torch.optim.Optimizer:
    """``lamb`` (pretraining, the paper's choice) or ``adamw`` (fine-tuning; torch's fused kernel)."""
    groups = parameter_groups(model, weight_decay)
    if name == "lamb":
        return Lamb(groups, lr=lr, weight_decay=weight_decay)
    if name == "adamw":
        for g in groups:
            g.pop("trust_ratio")
        # One fused kernel per step on CPU and CUDA; foreach elsewhere.
        fused = next(model.parameters()).device.type in ("cpu", "cuda")
        kwargs = {"fused": True} if fused else {"foreach": True}
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-6, **kwargs)
    raise UserError(f"unknown optimizer {name!r}; choose lamb or adamw")


SCHEDULES = ("original", "linear")


def original_schedule(warmup_steps: int, total_steps: int, power: float = 1.0):
    """lr multiplier of the original's ``create_optimizer`` (optimization.py lines 34-64): polynomial decay
    ``(1 - min(s, T)/T)^power`` to 0 at T, replaced by ``s/W`` while ``s < W``."""

    def factor(step: int) -> float:
        if warmup_steps > 0 and step < warmup_steps:
            return step / warmup_steps
        return (1.0 - min(step, total_steps) / total_steps) ** power

    return factor


def warmup_linear(warmup_steps: int, total_steps: int, power: float = 1.0):
    """lr multiplier: linear warmup to 1, then polynomial (linear by default) decay to 0 at total_steps."""

    def factor(step: int) -> float:
        if warmup_steps > 0 and step < warmup_steps:
            return (step + 1) / warmup_steps
        remaining = max(0, total_steps - step) / max(1, total_steps - warmup_steps)
        return remaining**power

    return factor


def build_scheduler(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int, schedule: str = "linear"
) -> torch.optim.lr_scheduler.LambdaLR:
    """``schedule`` is one of ``SCHEDULES`` (see the module docstring); the lr of update s (0-based) is
    the peak times factor(s), as the original's global_step counts the updates already applied."""
    if total_steps <= 0 or warmup_steps < 0 or warmup_steps > total_steps:
        raise UserError(f"need 0 <= warmup ({warmup_steps}) <= total steps ({total_steps}) and total > 0")
    if schedule not in SCHEDULES:
        raise UserError(f"unknown lr schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    factor = original_schedule if schedule == "original" else warmup_linear
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor(warmup_steps, total_steps))


__all__ = [
    "SCHEDULES",
    "Lamb",
    "build_optimizer",
    "build_scheduler",
    "original_schedule",
    "parameter_groups",
    "warmup_linear",
]
