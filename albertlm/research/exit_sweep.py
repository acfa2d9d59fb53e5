"""The early-exit trade-off of one model on one engine, with the rule chosen on rows it is not scored on.

The dev rows are split once, seeded: on the *selection* part every rule of a grid gets its score, mean number
of layers, batch-1 latency and batch throughput (a table, JSON and a PNG curve of score against speed-up);
the rule chosen there is the one with the fewest mean layers whose score is at most ``max_drop`` below full
depth. Only then is it run on the *held-out* part, which no choice saw: its score against full depth on the
same rows, the paired change with a bootstrap interval, exact McNemar's p on the rows whose answer changed
(classification and choice), its mean layers and its measured speed. A rule picked and scored on the same
rows reads its luck as skill: the fastest rule "within 0.5 points" on dev can lose more than that on new text.

A rule that computes no fewer layers than full depth on average is marked "no speed-up", never given a
ratio: what it would show is timing noise. Timings are over ``rounds`` passes; the median and the rounds'
spread (min-max) are reported side by side.

    albertlm evaluate --model runs/sst2-exits --data tests/data/tasks/glue_sst2 --exit-sweep --out runs/sweep
    albertlm evaluate --model runs/sst2-exits --data tests/data/tasks/glue_sst2 --exit-sweep --out runs/sweep \\
        --sweep-max-drop 0.01 --save-exit-rule           # save the rule chosen as the model's default
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from albertlm.deploy.early_exit import ExitRule
from albertlm.errors import SEED_BOUNDS, UserError
from albertlm.files import write_text_atomic

CONFIDENCES = (0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
ENTROPIES = (0.5, 0.3, 0.2, 0.1, 0.05)
LATENCY_INPUTS = 64  # inputs timed one at a time for the batch-1 latency
NO_SPEEDUP = "no speed-up"


@dataclass(frozen=True)
class SweepSettings:
    """How the sweep chooses its rule and how it scores and times it (``albertlm evaluate --sweep-*``)."""

    select_fraction: float = field(default=0.5, metadata={
        "help": "exit sweep: the share of the rows the rule is chosen on; it is scored and timed on the rest",
        "above": 0, "below": 1, "flag": "--sweep-select-fraction"})
    seed: int = field(default=0, metadata={"help": "exit sweep: seed of the split into choosing and scoring rows",
                                           "flag": "--sweep-seed", **SEED_BOUNDS})
    max_drop: float = field(default=0.005, metadata={
        "help": "exit sweep: the largest score drop below full depth, on the choosing rows, of the rule chosen "
                "(in the metric's units: 0.005 is half a point of accuracy)", "min": 0, "flag": "--sweep-max-drop"})
    rounds: int = field(default=3, metadata={"help": "exit sweep: timed passes per rule (median and spread)",
                                             "min": 1, "flag": "--sweep-rounds"})
    resamples: int = field(default=1000, metadata={
        "help": "exit sweep: bootstrap resamples of the held-out rows for the interval of the score change",
        "min": 100, "flag": "--sweep-resamples"})


# --------------------------------------------------------------------------- the split and the choice
def split_rows(n: int, select_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(selection rows, held-out rows): a seeded random split of ``range(n)``, each part in its file order."""
    k = round(n * select_fraction)
    if k < 1 or k > n - 1:
        raise UserError(f"--sweep-select-fraction {select_fraction:g} of {n} rows leaves {k} to choose on and "
                        f"{n - k} to score on; each needs one or more: give more rows or another fraction")
    order = np.random.default_rng(seed).permutation(n)
    return sorted(order[:k].tolist()), sorted(order[k:].tolist())


def choose(rows: list[dict[str, Any]], max_drop: float) -> dict[str, Any] | None:
    """The row with the fewest mean layers whose score is at most ``max_drop`` below full depth's, among the
    rules that compute fewer layers than full depth (ties: the better score); None when no rule qualifies."""
    full = next(r for r in rows if r["settings"] is None)
    ok = [r for r in rows if r["settings"] is not None and r["mean_layers"] < full["mean_layers"]
          and r["score"] >= full["score"] - max_drop - 1e-12]  # fmt: skip
    return min(ok, key=lambda r: (r["mean_layers"], -r["score"])) if ok else None


def rule_of(settings: dict[str, Any]) -> ExitRule:
    """The ExitRule of a row's ``settings`` (``ExitRule.settings()``)."""
    return ExitRule(**{k.removeprefix("exit_"): v for k, v in settings.items()})


# --------------------------------------------------------------------------- paired statistics
def mcnemar_p(full_right: np.ndarray, rule_right: np.ndarray) -> dict[str, Any]:
    """Exact McNemar's test on paired right/wrong answers: the rows where exactly one of the two is right
    are discordant; under "no difference" each goes either way with probability 1/2 (two-sided binomial)."""
    from scipy.stats import binomtest

    lost = int(np.sum(full_right & ~rule_right))  # right at full depth, wrong with the rule
    gained = int(np.sum(~full_right & rule_right))
    p = binomtest(gained, lost + gained, 0.5).pvalue if lost + gained else 1.0
    return {"lost": lost, "gained": gained, "p": float(p)}


def paired_change(score: Any, full: list, rule: list, resamples: int, seed: int,
                  level: float = 0.95) -> dict[str, Any]:  # fmt: skip
    """The rule's score change against full depth on the same rows, with a paired percentile bootstrap
    interval: ``score(rows, answers) -> float`` over rows resampled with replacement, both answers each time."""
    n = len(full)
    rows = np.arange(n)
    change = score(rows, rule) - score(rows, full)
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(resamples):
        idx = rng.integers(0, n, n)
        draws.append(score(idx, rule) - score(idx, full))
    low, high = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return {"change": float(change), "interval": [float(low), float(high)], "level": level, "resamples": resamples}


def default_grid(num_layers: int, regression: bool) -> list[ExitRule | None]:
    """Full depth (None), patience 1 .. min(6, L - 1), and for classifiers confidence and entropy thresholds."""
    grid: list[ExitRule | None] = [None]
    grid += [ExitRule(patience=t) for t in range(1, min(6, num_layers - 1) + 1)]
    if not regression:
        grid += [ExitRule(confidence=p) for p in CONFIDENCES] + [ExitRule(entropy=x) for x in ENTROPIES]
    return grid


def right_answers(predictor: Any, examples: list, answers: list[dict]) -> np.ndarray | None:
    """Per row, whether the answer is the gold label (classification and choice); None for regression."""
    kind, task, config = predictor.kind, predictor.task, predictor.config
    if kind.name == "choice":
        gold = [ex.label for ex in examples]
    elif kind.name == "classification":
        gold = [kind.label_id(task, config.label2id, ex) for ex in examples]
    else:
        return None
    return np.array([a["label_id"] == g for a, g in zip(answers, gold, strict=True)])


# --------------------------------------------------------------------------- measuring
def main_metric(predictor: Any, result: dict[str, float]) -> str:
    return predictor.task.main_metric if predictor.task.main_metric in result else next(iter(result))


def _timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _spread(values: list[float]) -> dict[str, Any]:
    return {"median": float(np.median(values)), "min": float(min(values)), "max": float(max(values)),
            "rounds": [float(v) for v in values]}  # fmt: skip


def timings(p: Any, examples: list, rounds: int) -> dict[str, Any]:
    """Batch-1 latency (ms per input over the first LATENCY_INPUTS, one at a time) and throughput (inputs/s
    over all of ``examples`` at the evaluation batch size), each over ``rounds`` passes: median and spread."""
    one = examples[:LATENCY_INPUTS]
    p.predict(examples[:2])  # warm-up: first-shape kernel selection is not the rule's cost
    latency, throughput = [], []
    for _ in range(rounds):
        latency.append(_timed(lambda: [p.predict([ex]) for ex in one]) / len(one) * 1e3)
        throughput.append(len(examples) / _timed(lambda: p.predict(examples)))
    return {"latency_ms": _spread(latency), "throughput": _spread(throughput), "batch_size": p.settings.eval_batch_size}


def with_rule(predictor: Any, rule: ExitRule | None) -> Any:
    return predictor.with_settings(**(rule or ExitRule()).settings())  # ExitRule(): every rule off, full depth


def score_rule(predictor: Any, examples: list, rule: ExitRule | None) -> tuple[dict[str, Any], list[dict]]:
    """One rule's score (the task's main metric) and mean layers on ``examples``, and its answers."""
    result, answers = with_rule(predictor, rule).evaluate(examples)
    main = main_metric(predictor, result)
    row = {"rule": rule.describe() if rule else "full depth", "settings": rule.settings() if rule else None,
           "score": float(result[main]), "metric": main,
           "mean_layers": float(result.get("mean_layers", predictor.config.num_hidden_layers))}  # fmt: skip
    return row, answers


def speedup(full: dict[str, Any], row: dict[str, Any], key: str) -> float | None:
    """Median against median; None ("no speed-up") for a rule that computes no fewer layers than full depth."""
    if row["settings"] is not None and row["mean_layers"] >= full["mean_layers"]:
        return None
    a, b = full[key]["median"], row[key]["median"]
    return a / b if key == "latency_ms" else b / a


def sweep(predictor: Any, examples: list, grid: list[ExitRule | None] | None = None, rounds: int = 3,
          progress: Any = None) -> list[dict[str, Any]]:  # fmt: skip
    """Every rule of ``grid`` (default: ``default_grid``) scored and timed on ``examples``; changes and
    speed-ups against full depth (None where the rule computes no fewer layers)."""
    grid = grid if grid is not None else default_grid(predictor.config.num_hidden_layers,
                                                      predictor.kind.name == "regression")  # fmt: skip
    rows = []
    for rule in grid:
        row, _ = score_rule(predictor, examples, rule)
        rows.append({**row, **timings(with_rule(predictor, rule), examples, rounds)})
        if progress is not None:
            progress(rows[-1])
    full = next((r for r in rows if r["settings"] is None), rows[0])
    for r in rows:
        r["latency_speedup"] = speedup(full, r, "latency_ms")
        r["throughput_speedup"] = speedup(full, r, "throughput")
        r["score_change"] = r["score"] - full["score"]
    return rows


def compare(predictor: Any, examples: list, rule: ExitRule, s: SweepSettings) -> dict[str, Any]:
    """``rule`` against full depth on the same rows: both scores and mean layers, the paired change with its
    bootstrap interval, and (classification, choice) exact McNemar's p on the answers that changed."""
    full, full_answers = score_rule(predictor, examples, None)
    mine, answers = score_rule(predictor, examples, rule)
    metric = full["metric"]

    def score(idx: np.ndarray, ans: list[dict]) -> float:
        picked = [examples[i] for i in idx]
        return float(predictor.kind.score(predictor.task, picked, [ans[i] for i in idx], predictor.config)[metric])

    change = paired_change(score, full_answers, answers, s.resamples, s.seed)
    right_full, right = right_answers(predictor, examples, full_answers), right_answers(predictor, examples, answers)
    mcnemar = mcnemar_p(right_full, right) if right is not None else None
    return {"rows": len(examples), "metric": metric, "full": full, "rule": mine, "change": change, "mcnemar": mcnemar}


def held_out(predictor: Any, examples: list, rule: ExitRule, s: SweepSettings) -> dict[str, Any]:
    """``compare`` on rows the rule was not chosen on, and both timed (median and spread) in alternation."""
    result = compare(predictor, examples, rule, s)
    full, mine = result["full"], result["rule"]
    timed: dict[str, list] = {"full": [], "rule": []}
    for _ in range(s.rounds):  # alternated, so a change in the machine's load falls on both
        timed["full"].append(timings(with_rule(predictor, None), examples, 1))
        timed["rule"].append(timings(with_rule(predictor, rule), examples, 1))
    for name, row in (("full", full), ("rule", mine)):
        for key in ("latency_ms", "throughput"):
            row[key] = _spread([t[key]["median"] for t in timed[name]])
        row["batch_size"] = timed[name][0]["batch_size"]
    return {**result, "latency_speedup": speedup(full, mine, "latency_ms"),
            "throughput_speedup": speedup(full, mine, "throughput")}  # fmt: skip


def run(predictor: Any, examples: list, s: SweepSettings, grid: list[ExitRule | None] | None = None,
        progress: Any = None) -> dict[str, Any]:  # fmt: skip
    """The sweep on the selection rows, the rule chosen there, and that rule on the held-out rows."""
    select, held = split_rows(len(examples), s.select_fraction, s.seed)
    rows = sweep(predictor, [examples[i] for i in select], grid, s.rounds, progress)
    chosen = choose(rows, s.max_drop)
    result = {"sweep_settings": s.__dict__.copy(), "selection_rows": len(select), "heldout_rows": len(held),
              "rows": rows, "chosen": chosen["rule"] if chosen else None, "heldout": None}  # fmt: skip
    if chosen is not None:
        result["heldout"] = held_out(predictor, [examples[i] for i in held], rule_of(chosen["settings"]), s)
    return result


# --------------------------------------------------------------------------- reporting
def _x(value: float | None) -> str:
    return NO_SPEEDUP if value is None else f"{value:.2f}x"


def _ranged(t: dict[str, Any], fmt: str) -> str:
    return f"{t['median']:{fmt}} ({t['min']:{fmt}}-{t['max']:{fmt}})"


def table(rows: list[dict[str, Any]]) -> str:
    """The grid: one line a rule, timings as median (min-max over the rounds)."""
    metric = rows[0]["metric"]
    lines = [f"| rule | {metric} | change | mean layers | batch 1 ms | speed-up | batch {rows[0]['batch_size']} "
             "inputs/s | speed-up |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['rule']} | {r['score']:.4f} | {r['score_change']:+.4f} | {r['mean_layers']:.2f} | "
                     f"{_ranged(r['latency_ms'], '.2f')} | {_x(r['latency_speedup'])} | "
                     f"{_ranged(r['throughput'], '.0f')} | {_x(r['throughput_speedup'])} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def report(result: dict[str, Any]) -> str:
    """The chosen rule on the held-out rows, in a few lines of markdown."""
    s = result["sweep_settings"]
    head = (f"Chosen on {result['selection_rows']} rows (seed {s['seed']}): the fewest mean layers within "
            f"{s['max_drop']:g} of full depth")
    h = result["heldout"]
    if h is None:
        return f"{head}: no rule of the grid qualifies; full depth stays (nothing to score on the held-out rows).\n"
    full, rule, c = h["full"], h["rule"], h["change"]
    lines = [f"{head} -> **{rule['rule']}**. Scored on the other {h['rows']} rows:", "",
             f"| | {h['metric']} | mean layers | batch 1 ms | batch {rule['batch_size']} inputs/s |",
             "|---|---|---|---|---|"]  # fmt: skip
    for r in (full, rule):
        lines.append(f"| {r['rule']} | {r['score']:.4f} | {r['mean_layers']:.2f} | {_ranged(r['latency_ms'], '.2f')} "
                     f"| {_ranged(r['throughput'], '.0f')} |")  # fmt: skip
    low, high = c["interval"]
    line = (f"\nChange {c['change']:+.4f} ({c['level']:.0%} paired bootstrap interval {low:+.4f} to {high:+.4f}, "
            f"{c['resamples']} resamples)")
    if h["mcnemar"] is not None:
        m = h["mcnemar"]
        line += f"; {m['lost']} answers lost, {m['gained']} gained, exact McNemar p = {m['p']:.3g}"
    lines.append(line + ".")
    lines.append(f"Speed-up (medians over {s['rounds']} alternated rounds; spread above): batch 1 "
                 f"{_x(h['latency_speedup'])}, batch {rule['batch_size']} {_x(h['throughput_speedup'])}.")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """Score against speed-up per rule family; a rule with no speed-up sits at 1x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, label in ((axes[0], "latency_speedup", "batch 1 speed-up vs full depth"),
                           (axes[1], "throughput_speedup", f"batch {rows[0]['batch_size']} speed-up vs full depth")):
        for family, marker in (("patience", "o"), ("confidence", "s"), ("entropy", "^"), ("full", "*")):
            pts = [r for r in rows if r["rule"].startswith(family)]
            if pts:
                ax.plot([r[key] or 1.0 for r in pts], [r["score"] for r in pts], marker=marker, label=family)
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


def write(result: dict[str, Any], out: Path, title: str, info: dict[str, Any]) -> list[Path]:
    """exit_sweep.json, exit_sweep.md and exit_sweep.png in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "exit_sweep.json", out / "exit_sweep.md", out / "exit_sweep.png"]
    write_text_atomic(files[0], json.dumps({**info, **result}, indent=2) + "\n")
    grid = f"The grid on the {result['selection_rows']} choosing rows (timings: median (min-max) of the rounds):\n\n"
    write_text_atomic(files[1], f"# {title}\n\n{grid}{table(result['rows'])}\n{report(result)}")
    plot(result["rows"], files[2], title)
    return files


__all__ = ["NO_SPEEDUP", "SweepSettings", "choose", "compare", "default_grid", "held_out", "mcnemar_p", "paired_change",
           "report", "right_answers", "rule_of", "run", "score_rule", "split_rows", "sweep", "table", "timings",
           "write"]  # fmt: skip
