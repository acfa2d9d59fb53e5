"""A pretraining run directory: one run's settings, identity and outputs, never mixed with another's.

    RUN/run_config.json   the settings (paths inside RUN stored relative to it) and the run's id
    RUN/metrics.jsonl     one JSON line per log / validation
    RUN/checkpoints/      step_<8-digit step>/ folders and written.json, the record of them (see
                          ``albertlm.training.checkpoint``)
    RUN/final/            the trained model (HF layout) and its tokenizer
    RUN/tensorboard/      with ``--report-to tensorboard`` (mlflow.db, wandb/ and tracking.json: see tracking.py)

Nothing in these files depends on where RUN lives: a copied or moved run resumes from its own checkpoints
and writes only into itself. A fresh run refuses a directory that already holds a run's outputs unless
``overwrite`` is set, and then removes only the files a run writes (listed below) and the checkpoint
folders its record names, never anything else.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from albertlm.data.remote import is_remote
from albertlm.errors import UserError
from albertlm.files import write_text_atomic

_log = logging.getLogger(__name__)

RUN_CONFIG = "run_config.json"
METRICS = "metrics.jsonl"
# Settings that name files or folders: stored relative to the run directory when they lie inside it.
PATH_FIELDS = ("data", "valid_data", "init_from")
# What a run writes into its directory; ``remove_previous_run`` deletes these and nothing else.
RUN_FILES = (RUN_CONFIG, METRICS)
RUN_DIRS = ("checkpoints", "final", "tensorboard")
FINAL_FILES = ("config.json", "model.safetensors", ".model.safetensors.tmp", "spiece.model", "vocab.txt",
               "tokenizer_config.json")


def settings_json(cfg: Any, run_dir: Path) -> dict[str, Any]:
    """``cfg`` as JSON without its own location, paths inside ``run_dir`` made relative to it."""
    settings = asdict(cfg)
    settings.pop("out", None)
    settings.pop("overwrite", None)
    base = Path(os.path.abspath(run_dir))
    for name in PATH_FIELDS:
        value = settings.get(name)
        if value and not is_remote(value):  # (an s3:// URL stays as it is)
            p = Path(os.path.abspath(value))
            settings[name] = os.path.relpath(p, base) if p.is_relative_to(base) else str(p)
    return settings


def write_config(cfg: Any, run_dir: Path, run_id: str, data_identity: dict[str, str | None] | None = None) -> None:
    """run_config.json, written to a temp name and renamed; under torchrun with an ``--rdzv-id`` of the user's,
    that job id too (``elastic_job``: a worker of the same job that finds the run here continues it), and the
    identity of the data it trains on (``data_identity``: its manifests' checksums, which --resume compares)."""
    job = elastic_job()
    record = {"run_id": run_id, **({"elastic_job": job} if job else {}),
              **({"data_identity": data_identity} if data_identity else {}), **settings_json(cfg, run_dir)}
    write_text_atomic(run_dir / RUN_CONFIG, json.dumps(record, indent=1))


def elastic_job() -> str | None:
    """torchrun's job id (``--rdzv-id``, as TORCHELASTIC_RUN_ID) when the user named one; None otherwise
    (not under torchrun, or its default id "none", which every unnamed job shares)."""
    job = os.environ.get("TORCHELASTIC_RUN_ID")
    return job if job and job != "none" else None


def of_this_job(run_dir: Path) -> bool:
    """The run in ``run_dir`` was written by this torchrun job (the same user-given ``--rdzv-id``)."""
    job = elastic_job()
    try:
        return job is not None and json.loads((run_dir / RUN_CONFIG).read_text(encoding="utf-8")).get(
            "elastic_job") == job
    except (OSError, ValueError, AttributeError):
        return False


def read_config(run_dir: str | Path) -> tuple[dict[str, Any], str | None]:
    """(settings with paths resolved against ``run_dir``, run id) from ``run_dir/run_config.json``."""
    run_dir = Path(run_dir)
    path = run_dir / RUN_CONFIG
    if not path.is_file():
        raise UserError(f"--resume: {run_dir} holds no {RUN_CONFIG}, so it is not a run to resume; "
                        "start a run there without --resume")
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(saved, dict):
            raise ValueError("not a JSON object")
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(f"--resume: {path} is unreadable ({e}); restore it from a copy, or start afresh with "
                        "--overwrite") from None
    run_id = saved.pop("run_id", None)
    saved.pop("data_identity", None)  # (a record, not a setting: recorded_data_identity reads it)
    for name in PATH_FIELDS:
        value = saved.get(name)
        if value and not is_remote(value) and not Path(value).is_absolute():
            saved[name] = str(run_dir / value)
    return saved, run_id


def recorded_data_identity(run_dir: Path) -> dict[str, Any]:
    """The data identity run_config.json records ({} for a run from before it was recorded)."""
    try:
        found = json.loads((Path(run_dir) / RUN_CONFIG).read_text(encoding="utf-8")).get("data_identity")
    except (OSError, ValueError, AttributeError):
        return {}
    return found if isinstance(found, dict) else {}


def holds_run(run_dir: Path) -> list[str]:
    """The names of a run's outputs already in ``run_dir``."""
    if not run_dir.is_dir():
        return []
    return [n for n in (*RUN_FILES, *RUN_DIRS) if (run_dir / n).exists()]


def prepare(run_dir: Path, resume: bool, overwrite: bool) -> str:
    """Check (and with ``overwrite`` clear) ``run_dir`` for this run; returns the run's id. Only reads the
    directory unless ``overwrite`` is set and a previous run is found: every rank can call it first."""
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"--out {run_dir} is a file, not a directory; pick another --out")
    if resume:
        if overwrite:
            raise UserError("--resume continues the run in --out and --overwrite replaces it; give one of them")
        return read_config(run_dir)[1] or uuid.uuid4().hex
    found = holds_run(run_dir)
    if found and not overwrite:
        raise UserError(f"--out {run_dir} already holds a run ({', '.join(found)}); continue it with --resume, "
                        "replace it with --overwrite, or choose another --out")
    return uuid.uuid4().hex


def remove_checkpoints(ckpts: Path) -> None:
    """Delete the checkpoint folders runs recorded writing under ``ckpts`` (and their temp folders), nothing
    else; the folder itself goes only when that leaves it empty."""
    if not ckpts.is_dir():
        return
    from albertlm.training import checkpoint

    ours = checkpoint.written(ckpts)  # the folders runs here recorded writing, and nothing else
    for p in list(ckpts.iterdir()):  # (discard renames inside this folder)
        if p.is_dir() and checkpoint.LEFTOVER_NAME.fullmatch(p.name):
            shutil.rmtree(p)
        elif p.is_dir() and p.name in ours:
            checkpoint.discard(p)
    (ckpts / checkpoint.WRITTEN).unlink(missing_ok=True)
    try:
        ckpts.rmdir()
    except OSError:
        pass


def remove_previous_run(run_dir: Path) -> None:
    """Delete what a previous run wrote into ``run_dir`` (and nothing else: other files stay, and so do the
    folders holding them)."""
    for name in RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)
    remove_checkpoints(run_dir / "checkpoints")
    final = run_dir / "final"
    for name in FINAL_FILES:
        if final.is_dir():
            (final / name).unlink(missing_ok=True)
    tb = run_dir / "tensorboard"
    if tb.is_dir():
        for p in tb.glob("events.out.tfevents.*"):
            p.unlink()
    for d in RUN_DIRS:
        try:
            (run_dir / d).rmdir()  # only when empty: a folder still holding the user's files stays
        except OSError:
            pass
    _log.info(f"removed the previous run's outputs from {run_dir}")
