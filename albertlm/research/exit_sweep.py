"""The early-exit trade-off of one model on one engine: for a grid of exit rules, the dev score, the mean
number of layers computed, and the measured latency (batch 1) and throughput (the evaluation batch size),
as a table, JSON and a PNG curve (score against speed-up), so a user picks a rule and saves it with the model.

    albertlm evaluate --model runs/sst2-exits --data tests/data/tasks/glue_sst2 --exit-sweep --out runs/sweep
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from albertlm.deploy.early_exit import ExitRule
from albertlm.files import write_text_atomic

CONFIDENCES = (0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
ENTROPIES = (0.5, 0.3, 0.2, 0.1, 0.05)
LATENCY_INPUTS = 64  # inputs timed one at a time for the batch-1 latency


def default_grid(num_layers: int, regression: bool) -> list[ExitRule | None]:
    """Full depth (None), patience 1 .. min(6, L - 1), and for classifiers confidence and entropy thresholds."""
    grid: list[ExitRule | None] = [None]
    grid += [ExitRule(patience=t) for t in range(1, min(6, num_layers - 1) + 1)]
    if not regression:
        grid += [ExitRule(confidence=p) for p in CONFIDENCES] + [ExitRule(entropy=x) for x in ENTROPIES]
    return grid


def _timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(predictor: Any, examples: list, rule: ExitRule | None) -> dict[str, Any]:
    """One rule's row: the task's metrics, mean layers, latency (median ms per input, one at a time, over the
    first LATENCY_INPUTS) and throughput (inputs/s over all of ``examples`` at the evaluation batch size)."""
    p = predictor.with_settings(**(rule or ExitRule()).settings())  # ExitRule(): every rule off, full depth
    p.predict(examples[:2])  # warm-up: first-shape kernel selection is not the rule's cost
    result, _ = p.evaluate(examples)
    one = [_timed(lambda ex=ex: p.predict([ex])) for ex in examples[:LATENCY_INPUTS]]
    seconds = _timed(lambda: p.predict(examples))
    main = p.task.main_metric if p.task.main_metric in result else next(iter(result))
    return {"rule": rule.describe() if rule else "full depth", "settings": rule.settings() if rule else None,
            "score": float(result[main]), "metric": main,
            "mean_layers": float(result.get("mean_layers", predictor.config.num_hidden_layers)),
            "latency_ms": float(np.median(one) * 1e3), "throughput": len(examples) / seconds,
            "batch_size": p.settings.eval_batch_size}  # fmt: skip


def sweep(predictor: Any, examples: list, grid: list[ExitRule | None] | None = None,
          progress: Any = None) -> list[dict[str, Any]]:  # fmt: skip
    """Every rule of ``grid`` (default: ``default_grid``) measured on ``examples``; speed-ups against full depth."""
    grid = grid if grid is not None else default_grid(predictor.config.num_hidden_layers,
                                                      predictor.kind.name == "regression")  # fmt: skip
    rows = []
    for rule in grid:
        rows.append(measure(predictor, examples, rule))
        if progress is not None:
            progress(rows[-1])
    full = next((r for r in rows if r["settings"] is None), rows[0])
    for r in rows:
        r["latency_speedup"] = full["latency_ms"] / r["latency_ms"]
        r["throughput_speedup"] = r["throughput"] / full["throughput"]
        r["score_change"] = r["score"] - full["score"]
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    metric = rows[0]["metric"]
    lines = [f"| rule | {metric} | change | mean layers | batch 1 ms | speed-up | batch {rows[0]['batch_size']} "
             "inputs/s | speed-up |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['rule']} | {r['score']:.4f} | {r['score_change']:+.4f} | {r['mean_layers']:.2f} | "
                     f"{r['latency_ms']:.2f} | {r['latency_speedup']:.2f}x | {r['throughput']:.0f} | "
                     f"{r['throughput_speedup']:.2f}x |")  # fmt: skip
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, label in ((axes[0], "latency_speedup", "batch 1 speed-up vs full depth"),
                           (axes[1], "throughput_speedup", f"batch {rows[0]['batch_size']} speed-up vs full depth")):
        for family, marker in (("patience", "o"), ("confidence", "s"), ("entropy", "^"), ("full", "*")):
            pts = [r for r in rows if r["rule"].startswith(family)]
            if pts:
                ax.plot([r[key] for r in pts], [r["score"] for r in pts], marker=marker, label=family)
        ax.set_xlabel(label)
        ax.set_ylabel(rows[0]["metric"])
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


def write(rows: list[dict[str, Any]], out: Path, title: str, info: dict[str, Any]) -> list[Path]:
    """exit_sweep.json, exit_sweep.md and exit_sweep.png in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "exit_sweep.json", out / "exit_sweep.md", out / "exit_sweep.png"]
    write_text_atomic(files[0], json.dumps({**info, "rows": rows}, indent=2) + "\n")
    write_text_atomic(files[1], f"# {title}\n\n{table(rows)}")
    plot(rows, files[2], title)
    return files


__all__ = ["default_grid", "measure", "plot", "sweep", "table", "write"]
