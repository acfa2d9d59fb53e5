"""Process-group set-up for torchrun, rank helpers, and DDP / FSDP2 wrapping.

Single process:            albertlm pretrain ...
One machine, N processes:  torchrun --nproc_per_node N -m albertlm pretrain ...
Several machines:          torchrun --nnodes MIN:MAX --nproc_per_node N --rdzv-backend c10d \
                               --rdzv-endpoint HOST:PORT -m albertlm pretrain ...
                           (the rendezvous store on a machine outside the job, so that any host may
                           die: `albertlm rendezvous` there, `--rdzv-conf is_host=false` on every host)

torchrun sets RANK / WORLD_SIZE / LOCAL_RANK; without them everything here degrades to one process.
When one rank fails, torchrun's agent stops the others; collectives also carry a timeout, so a rank
waiting on a dead peer exits with an error instead of hanging.
"""

from __future__ import annotations

import datetime
import logging
import os
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

_log = logging.getLogger(__name__)


@dataclass
class StoreSettings:
    """Where ``albertlm rendezvous`` serves the store torchrun's c10d rendezvous keeps its state in."""

    port: int = field(default=29400, metadata={"help": "the port to listen on, on every interface (torchrun's "
                                               "--rdzv-endpoint THIS_HOST:PORT)", "min": 1, "max": 65535})  # fmt: skip


def rendezvous_store(s: StoreSettings) -> dist.TCPStore:
    """A TCPStore server on port ``s.port`` (every interface: torch's store binds them all) for the c10d
    rendezvous of torchrun agents started with ``--rdzv-backend c10d --rdzv-endpoint THIS_HOST:PORT
    --rdzv-conf is_host=false``. Run on a machine outside the job (a login node), it outlives any host of the
    job; it serves until this process ends (keep the returned store referenced)."""
    try:
        return dist.TCPStore("0.0.0.0", s.port, is_master=True, wait_for_workers=False, multi_tenant=True)
    except (RuntimeError, OSError) as e:
        from albertlm.errors import UserError

        reason = "address already in use" if "EADDRINUSE" in str(e) else str(e).splitlines()[0][:160]
        raise UserError(f"--port {s.port}: cannot listen there ({reason}); choose a free port") from None


@dataclass
class DistInfo:
    enabled: bool  # a process group exists (WORLD_SIZE > 1 under torchrun)
    rank: int
    local_rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str | None = None, timeout_s: int = 300) -> DistInfo:
    """Start the process group when launched by torchrun; pick the device (``albertlm.devices``: auto, cpu,
    cuda, which is cuda:LOCAL_RANK under torchrun, or cuda:N in one process)."""
    from albertlm.devices import resolve_device

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    enabled = world > 1
    dev = resolve_device(device, local if enabled else None)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if enabled and not dist.is_initialized():
        backend = "nccl" if dev.type == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    return DistInfo(enabled, rank, local, world, dev)


def same_settings(info: DistInfo, settings: dict) -> None:
    """Stop every rank with the same one line when the processes of one job were started with other settings
    (each torchrun agent runs its own command line: a host started with another --lr would train with it
    while rank 0 records its own, or the ranks' collectives would stop disagreeing mid-run). Each rank's
    settings' sha256 is exchanged right after the process group starts, before anything is written; where
    they differ, the settings themselves are gathered to name what differs."""
    if not info.enabled:
        return
    import hashlib
    import json

    from albertlm.errors import UserError

    text = json.dumps(settings, sort_keys=True, default=str)
    digests: list = [None] * info.world_size
    dist.all_gather_object(digests, hashlib.sha256(text.encode()).hexdigest())
    if len(set(digests)) == 1:
        return
    every: list = [None] * info.world_size
    dist.all_gather_object(every, json.loads(text))
    differ = sorted({k for theirs in every for k in {*theirs, *every[0]} if theirs.get(k) != every[0].get(k)})
    shown = "; ".join("--" + k.replace("_", "-") + " " + ", ".join(
        f"{every[r].get(k)!r} on rank {r}" for r in range(info.world_size)) for k in differ[:3])  # fmt: skip
    raise UserError(f"the processes of this job were started with other settings ({shown}); start the command "
                    "with the same flags on every host (nothing was written)")


def cleanup(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()


def print0(info: DistInfo, message: str) -> None:
    """Log ``message`` on rank 0 only (the CLI shows the ``albertlm`` logger's INFO lines)."""
    if info.is_main:
        _log.info(message)


def all_reduce_sum(info: DistInfo, values: list[float]) -> list[float]:
    """Sum a few scalars over ranks (float64 on the training device)."""
    if not info.enabled:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=info.device)
    dist.all_reduce(t)
    return t.tolist()


def any_rank(info: DistInfo, flag: bool) -> bool:
    """True on every rank if ``flag`` is true on any (e.g. a non-finite loss somewhere)."""
    return bool(all_reduce_sum(info, [float(flag)])[0] > 0)


def wrap_model(model: torch.nn.Module, info: DistInfo, fsdp: bool = False) -> torch.nn.Module:
    """DDP (replicated weights) or FSDP2 ``fully_shard`` (sharded weights, grads and optimizer state).

    FSDP2 shards the whole model as one unit: ALBERT's shared group is applied L times per forward, and
    one unit keeps that reuse trivially correct while still sharding the optimizer state, which is where
    a large ALBERT's memory goes.
    """
    if not info.enabled:
        return model
    if fsdp:
        from torch.distributed.fsdp import fully_shard

        fully_shard(model)
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [info.local_rank] if info.device.type == "cuda" else None
    # Every head's loss reaches every trainable parameter (checked for each head in HEADS), so DDP need not
    # search the graph for unused ones each step.
    return DistributedDataParallel(model, device_ids=ids)


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if hasattr(model, "module") else model
