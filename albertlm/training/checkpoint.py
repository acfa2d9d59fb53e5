"""Training checkpoints: atomic, checksummed, keep-last-N, enough state for a bitwise-exact resume; the
training run hands its ``state_dict()`` to ``save_training_state`` and takes ``load_training_state``'s back.

Layout of ``RUN/checkpoints/step_00001200/``:
    config.json, model.safetensors   the model in the HF layout (``transformers`` loads it as is)
    optimizer.pt                     optimizer + scheduler (+ grad scaler) state, tensors only
    rng_rank{r}.pt                   each rank's torch (and CUDA) generator state
    state.json                       step, data position, counters, numpy/python RNG, run settings
    checksums.json                   sha256 of every file above, written last

Under ``--fsdp`` the model and optimizer go through ``torch.distributed.checkpoint`` instead: each rank
writes its own shards (``__<rank>_0.distcp``; ``.metadata`` says which slice of which tensor each holds) and
a run of any world size reads back the slices it needs, so a save by 2 processes resumes on 1 or 4:
    config.json, .metadata, __<r>_0.distcp    the model config; the sharded model and optimizer state
    schedule.pt                               scheduler (+ grad scaler) state
    rng_rank{r}.pt, state.json, checksums.json    as above (state.json says ``"format": "dcp"``)

A checkpoint is written into ``.step_00001200.tmp`` and renamed when complete, so a run killed while
saving leaves only a temp folder, which the next save or resume removes. Resume takes the newest folder
whose checksums verify (every file above present, ``checksums.json`` included) and that belongs to this
run; any other is skipped with a warning naming it. ``keep_last`` prunes only checkpoints at or before
the step just saved, so stale higher-step folders never push out the new ones (they are replaced when
the run reaches their step).

A run owns only the folders it made: ``RUN/checkpoints/written.json`` records every checkpoint folder a run
in RUN wrote (updated atomically, before each rename), and pruning, ``--overwrite`` and a save over an
existing step touch only recorded names. A user's ``step_00000004_good`` or ``step_notes/`` stays; a folder
named exactly like the next checkpoint but not recorded stops the run with one line. Runs written before the
record existed own the folders named ``step_<digits>`` that hold a ``checksums.json``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from albertlm.errors import CheckpointCorrupt, CheckpointError, TrainingError
from albertlm.files import publish, sha256, staging_dir, write_text_atomic
from albertlm.training.distributed import DistInfo

_log = logging.getLogger(__name__)

CHECKSUMS = "checksums.json"
# Files every checkpoint has (besides rng_rank{r}.pt per rank); a manifest that omits one is damaged.
REQUIRED = ("config.json", "model.safetensors", "optimizer.pt", "state.json", "rng_rank0.pt")
DCP_REQUIRED = ("config.json", ".metadata", "__0_0.distcp", "schedule.pt", "state.json", "rng_rank0.pt")


WRITTEN = "written.json"  # in RUN/checkpoints/: the checkpoint folders runs in RUN wrote
CHECKPOINT_NAME = re.compile(r"step_\d{8,}")  # step_dir's names, and nothing a user adds to them
TMP_NAME = re.compile(r"\.step_\d{8,}\.tmp")
LEFTOVER_NAME = re.compile(r"\.step_\d{8,}\.(tmp|old)")  # a save or a deletion (see discard) a kill cut short


def step_dir(root: Path, step: int) -> Path:
    return root / f"step_{step:08d}"


def written(root: Path) -> set[str]:
    """The checkpoint folder names under ``root`` that runs wrote (``root/written.json``); without a record
    (runs before it existed), the folders named like a checkpoint that hold a checksums.json."""
    path = root / WRITTEN
    if not path.is_file():
        if not root.is_dir():
            return set()
        return {p.name for p in root.iterdir()
                if p.is_dir() and CHECKPOINT_NAME.fullmatch(p.name) and (p / CHECKSUMS).is_file()}  # fmt: skip
    try:
        names = json.loads(path.read_text(encoding="utf-8"))["written"]
        if not isinstance(names, list) or not all(isinstance(n, str) and CHECKPOINT_NAME.fullmatch(n) for n in names):
            raise ValueError("not a list of checkpoint names")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise TrainingError(f"{path} is damaged ({e}); delete it (the run then owns the step_<digits> folders "
                            "holding checksums.json) and run again") from None
    return set(names)


def record(root: Path, names: set[str]) -> None:
    """Replace ``root/written.json`` with ``names`` (atomically and durably: it decides what may be deleted)."""
    write_text_atomic(root / WRITTEN, json.dumps({"written": sorted(names)}, indent=1) + "\n", durable=True)


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
    final = step_dir(root, step)
    if final.exists() and final.name not in written(root):
        raise TrainingError(f"{final} exists but no run wrote it (it is not in {root / WRITTEN}); move it out of "
                            f"{root}, it would be replaced by this run's checkpoint")
    return staging_dir(root, f".step_{step:08d}.tmp")


def finalize(root: Path, tmp: Path, step: int, state: dict[str, Any], keep_last: int) -> Path:
    """Write state.json and checksums, fsync, rename into place, then drop the oldest beyond keep_last."""
    (tmp / "state.json").write_text(json.dumps(state, indent=1))
    sums = {p.name: sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()}
    (tmp / CHECKSUMS).write_text(json.dumps(sums, indent=1))
    owned = written(root) | {step_dir(root, step).name}
    record(root, owned)  # before the rename: a crash in between leaves a recorded name without a folder, harmless
    if step_dir(root, step).exists():  # this run's own (prepare refused one it does not own)
        discard(step_dir(root, step))
    final = publish(tmp, step_dir(root, step))
    if keep_last > 0:
        upto = [p for p in list_checkpoints(root) if p.name <= final.name and p.name in owned]
        for old in upto[:-keep_last]:
            discard(old)
            owned.discard(old.name)
        record(root, owned)
    return final


def discard(path: Path) -> None:
    """Delete the checkpoint folder ``path`` without ever leaving part of it under its name: it is renamed to
    ``.step_N.old`` first (a deletion a kill interrupts is finished by the next save, resume or --overwrite)."""
    trash = path.with_name(f".{path.name}.old")
    shutil.rmtree(trash, ignore_errors=True)
    os.replace(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def list_checkpoints(root: Path) -> list[Path]:
    if not root.exists():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and CHECKPOINT_NAME.fullmatch(p.name))


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
    if not ok or not (set(REQUIRED) <= set(sums) or set(DCP_REQUIRED) <= set(sums)):
        raise CheckpointCorrupt(f"{sums_file} is damaged (not the manifest of a complete checkpoint)")
    for name, digest in sums.items():
        f = path / name
        if not f.is_file() or sha256(f) != digest:
            raise CheckpointCorrupt(f"{f} is missing or fails its checksum")


def valid_checkpoints(root: Path, log=_log.warning):
    """Checkpoints that verify, newest first; corrupt ones are reported and skipped, temp folders removed."""
    for tmp in root.glob(".step_*") if root.is_dir() else []:
        if LEFTOVER_NAME.fullmatch(tmp.name):
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
    per_rank = ["rng_rank{}.pt"] + (["__{}_0.distcp"] if state.get("format") == "dcp" else [])
    missing = [f.format(r) for r in range(int(state["world_size"])) for f in per_rank
               if not (path / f.format(r)).is_file()]  # fmt: skip
    if missing:  # a save some rank never finished (the checksums only cover what rank 0 found)
        log(f"skipping checkpoint {path.name}: written by {state['world_size']} processes but {missing[0]} is missing")
        return None
    if run_id is not None and state.get("run_id") not in (None, run_id):
        log(f"skipping checkpoint {path.name}: it belongs to another run (run id {state.get('run_id')})")
        return None
    return state


@contextlib.contextmanager
def one_process_quiet():
    """torch.distributed.checkpoint without a process group, minus its warning that it assumes one process
    (that is what a single-process --fsdp run means)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is (disabled, )?unavailable or uninitialized")
        yield


def load_tensors(path: Path) -> Any:
    """Tensor-only files of our own checkpoints (``weights_only``: nothing is unpickled unsafely)."""
    return torch.load(path, map_location="cpu", weights_only=True)


# --------------------------------------------------------------------------- a training run's state
# The parts of a run's state_dict() written as tensors (the rest is state.json); "rng" is each rank's own.
TENSOR_STATE = ("model", "model_config", "architecture", "optimizer", "scheduler", "scaler", "rng", "sharded")


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
    rng_file = path / f"rng_rank{info.rank}.pt"
    rng = load_tensors(rng_file) if rng_file.is_file() else None
    if state.get("format") == "dcp":  # the run reads its own slices of the shards (Run.load_state_dict)
        sched = load_tensors(path / "schedule.pt")
        return {**state, "path": path, "sharded": path, "model": None, "optimizer": None,
                "scheduler": sched["scheduler"], "scaler": sched.get("scaler"), "rng": rng}  # fmt: skip
    from albertlm.hf import read_state_dict

    opt = load_tensors(path / "optimizer.pt")
    return {**state, "path": path, "model": read_state_dict(path), "optimizer": opt["optimizer"],
            "scheduler": opt["scheduler"], "scaler": opt.get("scaler"), "rng": rng}  # fmt: skip


def sharded_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """This rank's shards of the model and optimizer state (FSDP2; in one process, the whole of each), as
    ``state["sharded"]`` of ``save_training_state`` writes them."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    return dict(zip(("model", "optimizer"), get_state_dict(model, optimizer), strict=True))


def load_sharded(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, info: DistInfo) -> None:
    """This rank's slices of the model and optimizer from the shards at ``path``, at any world size (every
    rank takes part). A checkpoint that lacks what this model or optimizer holds stops the run in one line."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    target = sharded_state(model, optimizer)
    try:
        with one_process_quiet():
            dcp.load(target, storage_reader=dcp.FileSystemReader(path), no_dist=not info.enabled)
    except Exception as e:  # noqa: BLE001 - DCP wraps every rank's failure in one exception type or another
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TrainingError(f"{path}: its shards do not fit this run's model and optimizer ({first[:200]}); "
                            "resume with the settings it was written with (--preset, --set, --optimizer)") from None
    set_state_dict(model, optimizer, model_state_dict=target["model"], optim_state_dict=target["optimizer"])


def restore(state: dict[str, Any], wrapped: torch.nn.Module, model: torch.nn.Module, optimizer: Any, scheduler: Any,
            scaler: Any, info: DistInfo, fsdp: bool) -> None:  # fmt: skip
    """A training state's model and optimizer (this rank's slices of the DCP shards, or the full state, loaded
    into FSDP's sharded parameters when ``fsdp``), then its schedule and grad scaler. ``wrapped`` is the
    model as the run wraps it (DDP, FSDP2, or ``model`` itself)."""
    from albertlm.hf import hf_to_ours, load_into
    from albertlm.model import AlbertPreTrainedModel

    if state.get("sharded") is not None:
        load_sharded(Path(state["sharded"]), wrapped, optimizer, info)
    elif fsdp:  # a full state (checkpoints written before the sharded layout)
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        set_state_dict(wrapped, optimizer, model_state_dict=hf_to_ours(state["model"], model),
                       optim_state_dict=state["optimizer"], options=StateDictOptions(full_state_dict=True))
    elif isinstance(model, AlbertPreTrainedModel):
        load_into(model, state["model"], source=str(state.get("path", "the checkpoint")))
        optimizer.load_state_dict(state["optimizer"])
    else:  # a module around the model (distillation's student and projection): its own keys, every one
        missing, unexpected = model.load_state_dict(state["model"], strict=False)
        unexpected = [k for k in unexpected if "embedding_hidden_mapping_in" not in k]  # (ours_to_hf's identity)
        if missing or unexpected:
            raise CheckpointError(f"{state.get('path', 'the checkpoint')}: its weights are not this run's (missing "
                                  f"{missing[:3]}, unexpected {unexpected[:3]}); start afresh with --overwrite")
        optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if state.get("scaler") is not None:
        scaler.load_state_dict(state["scaler"])


def save_training_state(root: Path, state: dict[str, Any], info: DistInfo, keep_last: int) -> Path | None:
    """Write ``state`` (a run's ``state_dict()``) as the checkpoint of its step; every rank calls this (each
    writes its own RNG state), rank 0 writes the rest. With ``state["sharded"]`` (model and optimizer state
    dicts of ``torch.distributed.checkpoint.state_dict.get_state_dict``) every rank writes its own shards."""
    if info.enabled:
        torch.distributed.barrier()
    step = state["step"]
    tmp = root / f".step_{step:08d}.tmp"
    if info.is_main:
        tmp = prepare(root, step)
    if info.enabled:
        torch.distributed.barrier()
    torch.save(state["rng"], tmp / f"rng_rank{info.rank}.pt")
    sharded = state.get("sharded") is not None
    if sharded:  # a collective: rank 0 writes .metadata once every rank's shards are written
        import torch.distributed.checkpoint as dcp

        writer = dcp.FileSystemWriter(tmp, single_file_per_rank=True, sync_files=True)
        with one_process_quiet():
            dcp.save(state["sharded"], storage_writer=writer, no_dist=not info.enabled)
    if info.enabled:  # every rank's files are in before rank 0 checksums and renames the folder
        torch.distributed.barrier()
    path = None
    if info.is_main:
        extra = {"scaler": state["scaler"]} if state["scaler"] is not None else {}
        if sharded:
            state["model_config"].save(tmp, architectures=[state["architecture"]])
            torch.save({"scheduler": state["scheduler"], **extra}, tmp / "schedule.pt")
        else:
            from albertlm.hf import save_state_dict

            save_state_dict(state["model_config"], state["architecture"], state["model"], tmp)
            torch.save({"optimizer": state["optimizer"], "scheduler": state["scheduler"], **extra},
                       tmp / "optimizer.pt")
        meta = {k: v for k, v in state.items() if k not in TENSOR_STATE} | ({"format": "dcp"} if sharded else {})
        path = finalize(root, tmp, step, meta, keep_last)
    if info.enabled:
        torch.distributed.barrier()
    return path
