"""Which device a command runs on: ``--device auto|cpu|cuda|cuda:N``, the same for training and inference.

``auto`` (the default everywhere) takes the GPU when torch sees one and the CPU otherwise; ``cuda`` is GPU
0 in one process and ``cuda:LOCAL_RANK`` in each process torchrun starts; ``cuda:N`` names one GPU (one
process only: under torchrun every process takes its own). A device that is not there is one line naming
the flag, never a CUDA traceback from deep inside the first forward.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from albertlm.errors import UserError

DEVICE_HELP = ("auto (the GPU when there is one, else the CPU), cpu, cuda (GPU 0; under torchrun each process's "
               "own) or cuda:N")  # fmt: skip
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


def parse_device(text: str) -> str:
    """A --device value, checked for its form only (``cuda:1``, not ``gpu``); ValueError otherwise."""
    if not isinstance(text, str) or not _DEVICE.fullmatch(text):
        raise ValueError(f"--device must be auto, cpu, cuda or cuda:N, not {text!r}")
    return text


def resolve_device(name: str | None, local_rank: int | None = None) -> torch.device:
    """``name`` (None: auto) as a torch device that exists here. ``local_rank`` is given under torchrun:
    ``cuda`` then means that process's GPU, and ``cuda:N`` is refused (the processes would share one GPU)."""
    try:
        name = parse_device(name or "auto")
    except ValueError as e:
        raise UserError(str(e)) from None
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UserError(f"--device {name}: torch sees no CUDA GPU here (torch {torch.__version__}"
                        f"{', a CPU-only build' if torch.version.cuda is None else ''}); use --device cpu or auto")
    count = torch.cuda.device_count()
    if ":" in name:
        if local_rank is not None:
            raise UserError(f"--device {name} names one GPU, but torchrun started several processes; pass --device "
                            "cuda (each process takes the GPU of its LOCAL_RANK)")  # fmt: skip
        index = int(name.split(":")[1])
    else:
        index = local_rank or 0
    if index >= count:
        raise UserError(f"--device {name}: this machine has {count} GPU(s) (cuda:0 to cuda:{count - 1})"
                        + (f"; torchrun's LOCAL_RANK {local_rank} has none" if local_rank is not None else ""))
    return torch.device("cuda", index)


@dataclass
class Placement:
    """The device of a command that has no other settings to hold it (``analyze``)."""

    device: str = field(default="auto", metadata={"help": DEVICE_HELP, "parse": parse_device})
