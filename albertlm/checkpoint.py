"""Training checkpoints: atomic, checksummed, keep-last-N, enough state for a bitwise-exact resume.

Layout of ``RUN/checkpoints/step_00001200/``:
    config.json, model.safetensors   the model in the HF layout (``transformers`` loads it as is)
    optimizer.pt                     optimizer + scheduler (+ grad scaler) state, tensors only
    rng_rank{r}.pt                   each rank's torch (and CUDA) generator state
    state.json                       step, data position, counters, numpy/python RNG, run settings
    checksums.json                   sha256 of every file above, written last

A checkpoint is written into ``.step_00001200.tmp`` and renamed when complete, so a run killed while
saving leaves only a temp folder, which the next save or resume removes. Resume takes the newest folder
whose checksums verify.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from albertlm.errors import CheckpointCorrupt

_log = logging.getLogger(__name__)

CHECKSUMS = "checksums.json"




def step_dir(root: Path, step: int) -> Path:
    return root / f"step_{step:08d}"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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
    tmp = root / f".step_{step:08d}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def write_rank_rng(tmp: Path, rank: int) -> None:
    torch.save(rng_state(), tmp / f"rng_rank{rank}.pt")


def finalize(root: Path, tmp: Path, step: int, state: dict[str, Any], keep_last: int) -> Path:
    """Write state.json and checksums, fsync, rename into place, then drop the oldest beyond keep_last."""
    (tmp / "state.json").write_text(json.dumps(state, indent=1))
    sums = {p.name: sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()}
    (tmp / CHECKSUMS).write_text(json.dumps(sums, indent=1))
    for p in tmp.iterdir():
        with open(p, "rb") as f:
            os.fsync(f.fileno())
    final = step_dir(root, step)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    if keep_last > 0:
        for old in list_checkpoints(root)[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(root: Path) -> list[Path]:
    if not root.exists():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_"))


def verify(path: Path) -> None:
    sums_file = path / CHECKSUMS
    if not sums_file.exists():
        raise CheckpointCorrupt(f"{path}: no {CHECKSUMS} (the save did not complete)")
    sums = json.loads(sums_file.read_text())
    for name, digest in sums.items():
        f = path / name
        if not f.exists() or sha256(f) != digest:
            raise CheckpointCorrupt(f"{path / name}: checksum mismatch or missing")


def latest_valid(root: Path, log=_log.warning) -> Path | None:
    """The newest checkpoint that verifies; corrupt ones are reported and skipped, temp folders removed."""
    for tmp in root.glob(".step_*.tmp") if root.exists() else []:
        shutil.rmtree(tmp, ignore_errors=True)
    for path in reversed(list_checkpoints(root)):
        try:
            verify(path)
            return path
        except CheckpointCorrupt as e:
            log(f"skipping checkpoint {e}")
    return None


def load_tensors(path: Path) -> Any:
    """Tensor-only files of our own checkpoints (``weights_only``: nothing is unpickled unsafely)."""
    return torch.load(path, map_location="cpu", weights_only=True)
