"""Training checkpoints: atomic, checksummed, keep-last-N, enough state for a bitwise-exact resume; the
training run hands its ``state_dict()`` to ``save_training_state`` and takes ``load_training_state``'s back.

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

from albertlm.errors import CheckpointCorrupt
from albertlm.files import publish, sha256, staging_dir
from albertlm.training.distributed import DistInfo

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
# The parts of a run's state_dict() written as tensors (the rest is state.json); "rng" is each rank's own.
TENSOR_STATE = ("model", "model_config", "architecture", "optimizer", "scheduler", "scaler", "rng")


def load_training_state(root: Path, info: DistInfo, run_id: str | None) -> dict[str, Any] | None:
    """The newest checkpoint under ``root`` that verifies and belongs to run ``run_id``, as the state a
    run's ``load_state_dict`` takes (``model`` in the HF layout it was saved in, ``path`` where it was read;
    ``rng`` this rank's, None if the checkpoint has no file for it); None when there is none."""
    def warn(message: str) -> None:
        if info.is_main:
            _log.warning(message)

    for path in valid_checkpoints(root, log=warn):
        state = _read_state(path, run_id, warn)
        if state is not None:
            break
    else:
        return None
    from albertlm.hf import read_state_dict

    opt = load_tensors(path / "optimizer.pt")
    rng_file = path / f"rng_rank{info.rank}.pt"
    return {**state, "path": path, "model": read_state_dict(path), "optimizer": opt["optimizer"],
            "scheduler": opt["scheduler"], "scaler": opt.get("scaler"),
            "rng": load_tensors(rng_file) if rng_file.is_file() else None}  # fmt: skip


def save_training_state(root: Path, state: dict[str, Any], info: DistInfo, keep_last: int) -> Path | None:
    """Write ``state`` (a run's ``state_dict()``) as the checkpoint of its step; every rank calls this (each
    writes its own RNG state), rank 0 writes the rest."""
    if info.enabled:
        torch.distributed.barrier()
    step = state["step"]
    tmp = root / f".step_{step:08d}.tmp"
    if info.is_main:
        tmp = prepare(root, step)
    if info.enabled:
        torch.distributed.barrier()
    torch.save(state["rng"], tmp / f"rng_rank{info.rank}.pt")
    path = None
    if info.is_main:
        from albertlm.hf import save_state_dict

        save_state_dict(state["model_config"], state["architecture"], state["model"], tmp)
        extra = {"scaler": state["scaler"]} if state["scaler"] is not None else {}
        torch.save({"optimizer": state["optimizer"], "scheduler": state["scheduler"], **extra}, tmp / "optimizer.pt")
        meta = {k: v for k, v in state.items() if k not in TENSOR_STATE}
        path = finalize(root, tmp, step, meta, keep_last)
    if info.enabled:
        torch.distributed.barrier()
    return path
