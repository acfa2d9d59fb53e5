"""Training checkpoints: atomic, checksummed, keep-last-N, enough state for a bitwise-exact resume; the
training loop asks ``save_training_state`` / ``load_training_state`` for them.

Layout of ``RUN/checkpoints/step_00001200/``:
    config.json, model.safetensors   the model in the HF layout (``transformers`` loads it as is)
    optimizer.pt                     optimizer + scheduler (+ grad scaler) state, tensors only
    rng_rank{r}.pt                   each rank's torch (and CUDA) generator state
    state.json                       step, data position, counters, numpy/python RNG, run settings
    checksums.json                   sha256 of every file above, written last

A checkpoint is written into ``.step_00001200.tmp`` and renamed when complete, so a run killed while
saving leaves only a temp folder, which the next save or resume removes. Resume takes the newest folder
whose checksums verify (every file above present, ``checksums.json`` included) and that belongs to this
run; any other is skipped with a warning naming it. ``keep_last`` prunes only checkpoints at or before
the step just saved, so stale higher-step folders never push out the new ones (they are replaced when
the run reaches their step).
"""

from __future__ import annotations

import json
import logging
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from albertlm.errors import CheckpointCorrupt, TrainingError
from albertlm.files import publish, sha256, staging_dir
from albertlm.training.distributed import print0

_log = logging.getLogger(__name__)

CHECKSUMS = "checksums.json"
# Files every checkpoint has (besides rng_rank{r}.pt per rank); a manifest that omits one is damaged.
REQUIRED = ("config.json", "model.safetensors", "optimizer.pt", "state.json", "rng_rank0.pt")


def step_dir(root: Path, step: int) -> Path:
    return root / f"step_{step:08d}"


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def host_rng_state() -> dict[str, Any]:
    """Python and numpy global generators, as JSON (the data pipeline has its own seeded generators)."""
    py = random.getstate()
    return {"python": [py[0], list(py[1]), py[2]], "numpy": _np_state_to_json(np.random.get_state())}


def set_host_rng_state(state: dict[str, Any]) -> None:
    v, internal, gauss = state["python"]
    random.setstate((v, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def _np_state_to_json(s: tuple) -> list:
    return [s[0], s[1].tolist(), int(s[2]), int(s[3]), float(s[4])]


def prepare(root: Path, step: int) -> Path:
    """Create (fresh) the temp folder for ``step``; called by rank 0 before the ranks write into it."""
    return staging_dir(root, f".step_{step:08d}.tmp")


def write_rank_rng(tmp: Path, rank: int) -> None:
    torch.save(rng_state(), tmp / f"rng_rank{rank}.pt")


def finalize(root: Path, tmp: Path, step: int, state: dict[str, Any], keep_last: int) -> Path:
    """Write state.json and checksums, fsync, rename into place, then drop the oldest beyond keep_last."""
    (tmp / "state.json").write_text(json.dumps(state, indent=1))
    sums = {p.name: sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()}
    (tmp / CHECKSUMS).write_text(json.dumps(sums, indent=1))
    final = publish(tmp, step_dir(root, step), replace=True)
    if keep_last > 0:
        upto = [p for p in list_checkpoints(root) if p.name <= final.name]
        for old in upto[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(root: Path) -> list[Path]:
    if not root.exists():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_"))


def verify(path: Path) -> None:
    """Raise ``CheckpointCorrupt`` naming the first damaged file of the checkpoint at ``path``."""
    sums_file = path / CHECKSUMS
    if not sums_file.is_file():
        raise CheckpointCorrupt(f"{sums_file} is missing (the save did not complete)")
    try:
        sums = json.loads(sums_file.read_text(encoding="utf-8"))
        ok = isinstance(sums, dict) and all(isinstance(v, str) and "/" not in k for k, v in sums.items())
    except (ValueError, UnicodeDecodeError):
        ok = False
    if not ok or not set(REQUIRED) <= set(sums):
        raise CheckpointCorrupt(f"{sums_file} is damaged (not the manifest of a complete checkpoint)")
    for name, digest in sums.items():
        f = path / name
        if not f.is_file() or sha256(f) != digest:
            raise CheckpointCorrupt(f"{f} is missing or fails its checksum")


def valid_checkpoints(root: Path, log=_log.warning):
    """Checkpoints that verify, newest first; corrupt ones are reported and skipped, temp folders removed."""
    for tmp in root.glob(".step_*.tmp") if root.is_dir() else []:
        shutil.rmtree(tmp, ignore_errors=True)
    for path in reversed(list_checkpoints(root)):
        try:
            verify(path)
        except CheckpointCorrupt as e:
            log(f"skipping checkpoint {path.name}: {e}")
            continue
        yield path


def latest_valid(root: Path, log=_log.warning) -> Path | None:
    """The newest checkpoint that verifies (see ``valid_checkpoints``)."""
    return next(valid_checkpoints(root, log), None)


def _read_state(path: Path, run_id: str | None, log) -> dict | None:
    """state.json of a verified checkpoint, or None (with a warning) when it is another run's or unreadable."""
    try:
        state = json.loads((path / "state.json").read_text(encoding="utf-8"))
        keys = ("step", "epoch", "step_in_epoch", "nonfinite", "tokens_seen", "world_size", "global_batch_size",
                "host_rng", "config")
        if not isinstance(state, dict) or any(k not in state for k in keys):
            raise ValueError("fields are missing")
    except (ValueError, UnicodeDecodeError) as e:
        log(f"skipping checkpoint {path.name}: {path / 'state.json'} is unreadable ({e})")
        return None
    if run_id is not None and state.get("run_id") not in (None, run_id):
        log(f"skipping checkpoint {path.name}: it belongs to another run (run id {state.get('run_id')})")
        return None
    return state


def load_tensors(path: Path) -> Any:
    """Tensor-only files of our own checkpoints (``weights_only``: nothing is unpickled unsafely)."""
    return torch.load(path, map_location="cpu", weights_only=True)


# --------------------------------------------------------------------------- a training run's state
def load_training_state(run: Any) -> bool:
    """Restore a ``train.Run`` (model, optimizer, scheduler, scaler, counters, data position and every RNG)
    from the newest checkpoint that verifies under ``run.ckpt_root``; False when there is none."""
    def warn(message: str) -> None:
        if run.info.is_main:
            _log.warning(message)

    for path in valid_checkpoints(run.ckpt_root, log=warn):
        state = _read_state(path, getattr(run, "run_id", None), warn)
        if state is not None:
            break
    else:
        return False
    from albertlm.hf import hf_to_ours, load_into, read_state_dict

    if (state["world_size"], state["global_batch_size"], state["config"].get("fsdp", False)) != (
            run.info.world_size, run.cfg.global_batch_size, run.cfg.fsdp):
        raise TrainingError(f"{path} was written by {state['world_size']} processes, global batch "
                            f"{state['global_batch_size']}, fsdp={state['config'].get('fsdp', False)}; "
                            "resume with the same settings")
    opt = load_tensors(path / "optimizer.pt")
    if run.cfg.fsdp and run.info.enabled:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        model_sd = hf_to_ours(read_state_dict(path), run.model)
        set_state_dict(run.wrapped, run.optimizer, model_state_dict=model_sd,
                       optim_state_dict=opt["optimizer"], options=StateDictOptions(full_state_dict=True))
    else:
        load_into(run.model, read_state_dict(path), source=str(path))
        run.optimizer.load_state_dict(opt["optimizer"])
    run.scheduler.load_state_dict(opt["scheduler"])
    if "scaler" in opt:
        run.scaler.load_state_dict(opt["scaler"])
    run.step, run.nonfinite, run.tokens_seen = state["step"], state["nonfinite"], state["tokens_seen"]
    run.batches.epoch, run.batches.step_in_epoch = state["epoch"], state["step_in_epoch"]
    set_host_rng_state(state["host_rng"])
    rng_file = path / f"rng_rank{run.info.rank}.pt"
    set_rng_state(load_tensors(rng_file))
    print0(run.info, f"resumed from {path} at step {run.step}")
    return True

def save_training_state(run: Any) -> Path | None:
    """Write a checkpoint of ``run`` at its current step (every rank calls this; rank 0 writes the model)."""
    info = run.info
    if info.enabled:
        torch.distributed.barrier()
    tmp = run.ckpt_root / f".step_{run.step:08d}.tmp"
    if info.is_main:
        tmp = prepare(run.ckpt_root, run.step)
    if info.enabled:
        torch.distributed.barrier()
    write_rank_rng(tmp, info.rank)
    model_sd, opt_sd = full_state(run)
    path = None
    if info.is_main:
        from albertlm.hf import save_state_dict
        from albertlm.training.rundir import settings_json

        save_state_dict(run.config, "AlbertForPreTraining", model_sd, tmp)
        extra = {"scaler": run.scaler.state_dict()} if run.scaler.is_enabled() else {}
        torch.save({"optimizer": opt_sd, "scheduler": run.scheduler.state_dict(), **extra}, tmp / "optimizer.pt")
        state = {"step": run.step, "epoch": run.batches.epoch, "step_in_epoch": run.batches.step_in_epoch,
                 "nonfinite": run.nonfinite, "tokens_seen": run.tokens_seen,
                 "world_size": info.world_size, "global_batch_size": run.cfg.global_batch_size,
                 "host_rng": host_rng_state(), "config": settings_json(run.cfg, run.out),
                 "run_id": getattr(run, "run_id", None)}
        path = finalize(run.ckpt_root, tmp, run.step, state, run.cfg.keep_last)
    if info.enabled:
        torch.distributed.barrier()
    return path

def full_state(run: Any) -> tuple[dict, dict]:
    """Full (unsharded) model and optimizer state; under FSDP a collective, complete on rank 0."""
    if run.cfg.fsdp and run.info.enabled:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_state_dict(run.wrapped, run.optimizer, options=opts)
    return run.model.state_dict(), run.optimizer.state_dict()
