"""PNG curves from a run's metrics.jsonl (train and held-out loss / accuracy, learning rate, throughput)."""

from __future__ import annotations

import json
from pathlib import Path

from albertlm.errors import DataError, MissingDependency

PANELS = [
    ("loss", ["loss", "mlm_loss", "sop_loss", "valid_mlm_loss", "valid_sop_loss"]),
    ("accuracy", ["mlm_acc", "mlm_acc_at_mask", "sop_acc", "valid_mlm_acc", "valid_mlm_acc_at_mask", "valid_sop_acc"]),
    ("learning rate", ["lr"]),
    ("tokens / s", ["tokens_per_s"]),
]


def read_metrics(path: Path) -> list[dict]:
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{n}: not a JSON line ({e.msg})") from None
    if not rows:
        raise DataError(f"{path}: no metrics yet")
    return rows


def plot_run(run_dir: str | Path, out: str | Path | None = None, title: str | None = None) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingDependency("plotting needs matplotlib: pip install matplotlib") from None
    run = Path(run_dir)
    path = run / "metrics.jsonl" if run.is_dir() else run
    if not path.exists():
        raise FileNotFoundError(f"{path}: no metrics.jsonl; pass a run directory of `albertlm pretrain`")
    rows = read_metrics(path)
    fig, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 3.8))
    for ax, (name, keys) in zip(axes, PANELS, strict=True):
        for key in keys:
            pts = [(r["step"], r[key]) for r in rows if key in r and r[key] == r[key]]  # drop NaN
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, marker="o" if key.startswith("valid") else None, markersize=3, label=key)
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    fig.suptitle(title or str(run))
    fig.tight_layout()
    target = Path(out) if out else (run if run.is_dir() else run.parent) / "curves.png"
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target
