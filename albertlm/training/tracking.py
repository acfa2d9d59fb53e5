"""Where a run's metrics go: ``--report-to``, as transformers' Trainer spells it.

metrics.jsonl in the run folder is the run's own record and is always written (``albertlm plot`` and
``--resume`` read it); ``--report-to`` adds the trackers users already run, each offline-capable:

  jsonl         metrics.jsonl only (the default; ``none`` says the same in the Trainer's words)
  tensorboard   event files in RUN/tensorboard/ (torch.utils.tensorboard; needs the ``tensorboard`` package)
  mlflow        a run in the store at $MLFLOW_TRACKING_URI, else a local SQLite store RUN/mlflow.db
  wandb         a run in W&B's offline mode in RUN/wandb/ (``wandb sync`` uploads it), unless $WANDB_MODE says
                otherwise

Each tracker gets the hyperparameters once, every metric row at its step (``train/loss``, ``valid/mlm_acc``,
``eval/accuracy``, ...) and the final scores. A resumed run reopens the same MLflow and W&B runs (their ids
are kept in RUN/tracking.json) and TensorBoard drops the events past the resumed step.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import socket
import time
import urllib.parse
from pathlib import Path
from typing import Any

from albertlm.errors import DataError, UserError
from albertlm.files import write_text_atomic

_log = logging.getLogger(__name__)

REPORT_TO = ("none", "jsonl", "tensorboard", "mlflow", "wandb")
TRACKERS = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb"}  # tracker -> module it needs
IDS_FILE = "tracking.json"


def parse_report_to(text: str) -> tuple[str, ...]:
    """``"jsonl,mlflow"`` -> ("mlflow",): the trackers beyond metrics.jsonl, each installed, or one line."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in REPORT_TO]
    if bad or not names:
        raise UserError(f"--report-to {text!r}: use a comma-separated list of {', '.join(REPORT_TO)}")
    if "none" in names and len(names) > 1:
        raise UserError(f"--report-to {text!r}: none cannot be combined with other trackers")
    chosen = tuple(dict.fromkeys(n for n in names if n in TRACKERS))
    for name in chosen:
        if importlib.util.find_spec(TRACKERS[name]) is None:
            raise UserError(f"--report-to {name}: the {TRACKERS[name]} package is not installed; "
                            "pip install 'albertlm[tracking]' (or drop it from --report-to)")  # fmt: skip
    return chosen


REACH_TIMEOUT_S = 5.0  # how long a tracking server may take to accept a connection at start


def check_reachable(report_to: str) -> None:
    """Each tracker of ``report_to`` that sends to a server (MLflow at an http(s) $MLFLOW_TRACKING_URI, W&B
    online) accepts a connection within seconds, or one line naming the URL and the fix: found at start,
    before anything is trained or written, where their clients would retry for minutes in the middle of a run."""
    for name in parse_report_to(report_to):
        url, fix = _server(name)
        if url is None:
            continue
        parts = urllib.parse.urlsplit(url)
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            if not parts.hostname:
                raise OSError("no host in the URL")
            socket.create_connection((parts.hostname, port), timeout=REACH_TIMEOUT_S).close()
        except (OSError, ValueError) as e:  # refused, no route, unknown name, timed out; a bad port number
            reason = str(e) if not isinstance(e, TimeoutError) else f"no answer in {REACH_TIMEOUT_S:g} s"
            raise UserError(f"--report-to {name}: the tracking server {url} cannot be reached ({reason}); {fix}") \
                from None  # fmt: skip


def _server(tracker: str) -> tuple[str | None, str]:
    """(the URL a tracker sends to, or None when it writes locally; how to fix an unreachable one)."""
    if tracker == "mlflow":
        uri = os.environ.get("MLFLOW_TRACKING_URI", "")
        if urllib.parse.urlsplit(uri).scheme in ("http", "https"):
            return uri, ("start the server or correct MLFLOW_TRACKING_URI, or unset it to log to RUN/mlflow.db "
                         "(mlflow ui --backend-store-uri sqlite:///RUN/mlflow.db shows it)")  # fmt: skip
    if tracker == "wandb" and os.environ.get("WANDB_MODE", "offline") in ("online", "run", "shared"):
        return os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai"), (
            "check the network and WANDB_BASE_URL, or set WANDB_MODE=offline (`wandb sync` uploads the run later)")
    return None, ""


def flatten(params: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"inference": {"max_seq_length": 128}} -> {"inference.max_seq_length": 128}."""
    out: dict[str, Any] = {}
    for k, v in params.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def scalars(row: dict[str, Any], split: str | None = None) -> dict[str, float]:
    """The finite numbers of a metric row, named ``<split>/<key>`` (split: given, else the row's own, else train)."""
    split = split or row.get("split", "train")
    out = {}
    for k, v in row.items():
        if k in ("step", "time", "split") or isinstance(v, bool) or not isinstance(v, int | float):
            continue
        if math.isfinite(v):
            out[f"{split}/{k}"] = float(v)
    return out


class Tracker:
    """metrics.jsonl plus the trackers of ``report_to``; ``enabled=False`` (ranks other than 0) writes nothing.

    ``resumed_step`` None starts metrics.jsonl afresh; a step keeps its rows up to that step."""

    def __init__(self, out: Path, report_to: str = "jsonl", *, name: str, params: dict[str, Any],
                 resumed_step: int | None = None, enabled: bool = True):  # fmt: skip
        self.out = Path(out)
        self.path = self.out / "metrics.jsonl"
        self.enabled = enabled
        self.backends: list[Any] = []
        if not enabled:
            return
        chosen = parse_report_to(report_to)
        self._start_jsonl(resumed_step)
        ids = self._read_ids() if resumed_step is not None else {}
        flat = flatten(params)
        for tracker in chosen:
            backend = _BACKENDS[tracker](self.out, name, ids.get(tracker), resumed_step)
            backend.params(flat)
            self.backends.append(backend)
        if self.backends:
            write_text_atomic(self.out / IDS_FILE, json.dumps({b.name: b.run_id for b in self.backends}) + "\n")

    def _start_jsonl(self, resumed_step: int | None) -> None:
        keep = []
        if resumed_step is not None and self.path.exists():
            keep = [ln for ln, row in _rows(self.path) if row["step"] <= resumed_step]
        self.path.write_text("".join(ln + "\n" for ln in keep))

    def _read_ids(self) -> dict[str, str]:
        try:
            return json.loads((self.out / IDS_FILE).read_text())
        except (OSError, ValueError):
            return {}

    def log(self, row: dict[str, Any], split: str | None = None) -> None:
        """One metric row (it names its ``step``): a line of metrics.jsonl, and its numbers to every tracker
        (named ``<split>/<key>``, see ``scalars``)."""
        if not self.enabled:
            return
        from albertlm.tasks.metrics import json_ready

        with open(self.path, "a") as f:
            f.write(json.dumps(json_ready(row)) + "\n")  # NaN (undefined) -> null
        values = scalars(row, split)
        for backend in self.backends:
            backend.log(values, int(row["step"]))

    def finish(self, summary: dict[str, Any] | None = None, step: int = 0, failed: bool = False) -> None:
        """The final scores (``final/<key>``) to every tracker, then closes them."""
        if not self.enabled:
            return
        values = {k.replace("train/", "final/", 1): v for k, v in scalars(summary or {}).items()}
        for backend in self.backends:
            backend.finish(values, step, failed)
        self.backends = []


def _rows(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(line, row) of each line of a run's metrics.jsonl. A last line a kill cut short (no newline, or not
    JSON) is dropped with a warning: the rows it held are written again as the resumed run passes their step.
    A line unreadable anywhere else is damage, not a kill: one line naming it."""
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict) or isinstance(row.get("step"), bool) or not isinstance(row.get("step"), int):
                raise ValueError("no integer step")
        except ValueError as e:
            if not any(x.strip() for x in lines[i:]):  # the last line
                _log.warning("%s: dropped its last line (line %d), cut short when the run was stopped", path, i)
                continue
            raise DataError(f"{path}:{i}: not a metric row ({e}); delete or fix that line, then --resume") from None
        out.append((line, row))
    return out


# --- the trackers: params(flat), log(values, step), finish(values, step, failed); name and run_id ------------
class _TensorBoard:
    name = "tensorboard"

    def __init__(self, out: Path, run_name: str, run_id: str | None, resumed_step: int | None):
        from torch.utils.tensorboard import SummaryWriter

        purge = resumed_step + 1 if resumed_step is not None else None  # events past the resumed step go
        self.writer = SummaryWriter(str(out / "tensorboard"), purge_step=purge)
        self.run_id = str(out / "tensorboard")

    def params(self, flat: dict[str, Any]) -> None:
        self.writer.add_text("params", "\n".join(f"    {k} = {v!r}" for k, v in sorted(flat.items())), 0)

    def log(self, values: dict[str, float], step: int) -> None:
        for k, v in values.items():
            self.writer.add_scalar(k, v, step)

    def finish(self, values: dict[str, float], step: int, failed: bool) -> None:
        for k, v in values.items():
            self.writer.add_scalar(k, v, step)
        self.writer.close()


class _MLflow:
    name = "mlflow"
    EXPERIMENT = "albertlm"

    def __init__(self, out: Path, run_name: str, run_id: str | None, resumed_step: int | None):
        from mlflow import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(out / 'mlflow.db').resolve()}"
        self.client = MlflowClient(tracking_uri=uri)
        if run_id is not None:
            self.run_id = run_id
            self.client.update_run(run_id, status="RUNNING")
            return
        experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME", self.EXPERIMENT)
        found = self.client.get_experiment_by_name(experiment)
        exp_id = found.experiment_id if found else self.client.create_experiment(experiment)
        self.run_id = self.client.create_run(exp_id, run_name=run_name, tags={"albertlm.run_dir": str(out)}).info.run_id

    def params(self, flat: dict[str, Any]) -> None:
        from mlflow.entities import Param

        logged = self.client.get_run(self.run_id).data.params  # a resumed run has them already
        fresh = [Param(k, str(v)[:6000]) for k, v in flat.items() if k not in logged]
        for i in range(0, len(fresh), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=fresh[i : i + 100])

    def log(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, step) for k, v in values.items()]
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[i : i + 1000])

    def finish(self, values: dict[str, float], step: int, failed: bool) -> None:
        self.log(values, step)
        self.client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")


class _WandB:
    name = "wandb"

    def __init__(self, out: Path, run_name: str, run_id: str | None, resumed_step: int | None):
        import wandb

        mode = os.environ.get("WANDB_MODE", "offline")  # clusters rarely reach the internet: sync later
        self.run = wandb.init(mode=mode, dir=str(out), project=os.environ.get("WANDB_PROJECT", "albertlm"),
                              name=run_name, id=run_id, resume="allow" if run_id else None,
                              settings=wandb.Settings(silent=True, console="off"))  # fmt: skip
        self.run_id = self.run.id

    def params(self, flat: dict[str, Any]) -> None:
        self.run.config.update(flat, allow_val_change=True)

    def log(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def finish(self, values: dict[str, float], step: int, failed: bool) -> None:
        import wandb

        self.run.summary.update(values)
        self.run.finish(exit_code=1 if failed else 0)
        # finish() returns before W&B's service has written the run file (wandb 0.31); teardown waits for it, so
        # the offline run is whole when the command returns (and `wandb sync` or a reader sees every record).
        wandb.teardown()


_BACKENDS = {"tensorboard": _TensorBoard, "mlflow": _MLflow, "wandb": _WandB}
