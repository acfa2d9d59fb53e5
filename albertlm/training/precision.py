"""Which arithmetic a PyTorch run uses: fp32, or bf16 autocast (fp32 master weights) where the hardware has it.

``auto`` (the default of pretraining, fine-tuning and the torch inference engine) resolves to ``bf16`` on a
CPU with AVX-512 BF16 or AMX (there bf16 matrix products run several times faster than fp32 ones) and on a
GPU that supports bf16, to ``fp16`` on a GPU without bf16 (training then scales the loss with a grad scaler),
and to ``fp32`` everywhere else. ``--precision fp32`` opts out. Parameters,
optimizer state and checkpoints stay fp32 in every case: autocast only changes the matmuls' inputs.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import torch

from albertlm.errors import UserError

TRAINING_PRECISIONS = ("auto", "fp32", "bf16", "fp16")


@functools.cache
def cpu_bf16() -> str | None:
    """The CPU's bf16 matrix instructions ("amx", "avx512_bf16"), or None when it has neither."""
    probes = {"amx": "_is_amx_tile_supported", "avx512_bf16": "_is_avx512_bf16_supported"}
    for name, probe in probes.items():
        check = getattr(torch.cpu, probe, None)
        if check is not None:
            if check():
                return name
            continue
        try:  # an older torch without the probe: the kernel's flags
            flags = Path("/proc/cpuinfo").read_text().split()
        except OSError:
            return None
        if ("amx_bf16" if name == "amx" else "avx512_bf16") in flags:
            return name
    return None


def resolve(precision: str, device: torch.device | str = "cpu") -> str:
    """``auto`` -> bf16 where the device multiplies bf16 natively, else fp32; other values are checked."""
    if precision not in TRAINING_PRECISIONS:
        raise UserError(f"--precision must be one of {', '.join(TRAINING_PRECISIONS)}, not {precision!r}")
    if precision != "auto":
        return precision
    kind = torch.device(device).type
    if kind == "cuda":  # fp16 (training adds a grad scaler) on GPUs older than bf16 (V100, T4)
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if kind == "cpu":
        return "bf16" if cpu_bf16() else "fp32"
    return "fp32"


def autocast(precision: str, device: torch.device | str = "cpu") -> contextlib.AbstractContextManager:
    """The context a forward runs under for a resolved ``precision``."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(torch.device(device).type, dtype=dtype)
