"""Early exit against the peer, text in -> labels out, side by side in one process.

For a model fine-tuned with exits (``albertlm finetune --exits per-layer``) and a task's dev sentences at their
real lengths, with fixed threads, at batch 1 (each sentence alone) and batch 32:

  ours-full-<engine>   albertlm at full depth: torch fp32, our export on onnxruntime (fp32, dynamic int8) and on
                       OpenVINO (fp32, NNCF static int8 calibrated on 300 training sentences); the best is
                       "our best engine at full depth"
  peer-<engine>        what a user does without us, on the same weights: transformers' model exported with
                       torch.onnx.export, onnxruntime's transformer optimizer, dynamic int8 (and the same HF
                       graph under OpenVINO, fp32 and NNCF int8 on the same calibration sentences), fed by HF's
                       tokenizer with padding=True per batch; it cannot exit
  ours-exit-<engine>   albertlm with the exit rule, on every engine above
  (with --executorch also the .pte, fp32 and dynamic int8, on ExecuTorch's Python runtime)

The dev rows are split once, seeded (``--sweep-select-fraction``, ``--sweep-seed``, as ``albertlm evaluate
--exit-sweep`` does, with the same code): the exit rule is chosen on the first part, the fewest mean layers of
the sweep's grid whose score on our torch fp32 engine is at most ``--sweep-max-drop`` below full depth (unless
``--rule`` names one), and every accuracy, speed and ratio reported comes from the other part, which no choice
saw. Each exit engine is compared with the same engine at full depth on those rows: the paired change with a
bootstrap interval and exact McNemar's p. Engines are timed in alternation, one pass of each per round; medians
over rounds with their min-max; ratios of medians. A rule that computes no fewer layers than full depth is
reported as no speed-up, never as a ratio.

    python benchmarks/early_exit.py --model runs/ee/ft/en-sst2 --task sst2 --data ../shared/data/glue_sst2 \\
        --threads 2 --rounds 5 --json docs/results/early_exit/sst2.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from inference import build_peer, machine, openvino_precisions
from timing import write_result

import albertlm
from albertlm.commands.flags import add_flags, build
from albertlm.deploy.early_exit import ExitRule
from albertlm.deploy.export import calibration_inputs, export_onnx
from albertlm.deploy.inference import Predictor
from albertlm.research import exit_sweep
from albertlm.tasks import RowPolicy, get_task, read_split


def pick_rule(predictor: Predictor, examples: list, max_drop: float) -> tuple[ExitRule | None, list[dict]]:
    """The sweep's grid scored on ``examples`` (the choosing rows) and the rule ``exit_sweep.choose`` takes."""
    rows = []
    for rule in exit_sweep.default_grid(predictor.config.num_hidden_layers, regression=False):
        row, _ = exit_sweep.score_rule(predictor, examples, rule)
        rows.append(row)
        print(f"  {row['rule']}: {row['metric']} {row['score']:.4f}, {row['mean_layers']:.2f} layers", flush=True)
    chosen = exit_sweep.choose(rows, max_drop)
    return (exit_sweep.rule_of(chosen["settings"]) if chosen else None), rows


def ours(model: Path, work: Path, threads: int, rule: ExitRule | None, executorch: bool) -> dict[str, Predictor]:
    settings = {"eval_batch_size": 32, **(rule or ExitRule()).settings()}
    tag = "exit" if rule else "full"
    out = {f"ours-{tag}-torch-fp32": Predictor.load(model, "torch", threads, precision="fp32", overrides=settings)}
    engines = [("onnx", "ours", ("fp32", "int8")), ("openvino", "ours", (*openvino_precisions(), "int8"))]
    if executorch:
        engines.append(("executorch", "pte", ("fp32", "int8")))
    for engine, folder, precisions in engines:
        for p in precisions:
            out[f"ours-{tag}-{engine}-{p}"] = Predictor.load(work / folder, engine, threads, precision=p,
                                                             overrides=settings)  # fmt: skip
    return out


def our_runs(predictor: Predictor, texts: list[str], batch: int):
    p = predictor.with_settings(eval_batch_size=batch)
    if batch == 1:
        return lambda: [r for t in texts for r in p.classify([t])]
    return lambda: p.classify(texts)


def peer_runs(session, hf_tok, texts: list[str], batch: int, max_len: int, labels: list[str]):
    def run() -> list[dict]:
        rows = []
        for i in range(0, len(texts), batch):
            enc = hf_tok(texts[i : i + batch], padding=True, truncation=True, max_length=max_len, return_tensors="np",
                         return_token_type_ids=True)  # fmt: skip
            feed = {k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
            rows += [{"label": labels[j]} for j in session(feed)["logits"].argmax(-1)]
        return rows

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True, help="a model fine-tuned with exits")
    ap.add_argument("--task", required=True)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--latency-inputs", type=int, default=300,
                    help="held-out dev sentences timed one at a time (batch 1)")  # fmt: skip
    ap.add_argument("--rule", default=None, help="e.g. patience=2 or confidence=0.9 (default: chosen on dev)")
    ap.add_argument("--work", type=Path, default=None, help="where the exports go (default: beside --model)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--executorch", action="store_true",
                    help="also the .pte (fp32, dynamic int8) on ExecuTorch's runtime (the edge extra)")  # fmt: skip
    add_flags(ap, exit_sweep.SweepSettings, skip=("rounds",))
    args = ap.parse_args()
    import transformers

    s = build(args, exit_sweep.SweepSettings, skip=("rounds",), rounds=args.rounds)
    load_start = os.getloadavg()
    torch.set_num_threads(args.threads)
    task = get_task(args.task)
    examples, dev_path = read_split(task, args.data, "dev", RowPolicy())
    train, _ = read_split(task, args.data, "train", RowPolicy())
    select, held = exit_sweep.split_rows(len(examples), s.select_fraction, s.seed)
    choosing, scored = [examples[i] for i in select], [examples[i] for i in held]
    texts = [ex.text_a for ex in scored]
    gold = [ex.label for ex in scored]
    work = args.work or args.model.parent / f"{args.model.name}-bench"
    calibration = work / "calibration.txt"
    work.mkdir(parents=True, exist_ok=True)
    calibration.write_text("\n".join(ex.text_a.replace("\n", " ") for ex in train[:300]) + "\n", encoding="utf-8")
    print(f"exporting {args.model} (fp32, int8, OpenVINO int8 on {calibration})", flush=True)
    export_onnx(args.model, work / "ours", quantize="int8", calibration=calibration)
    if args.executorch:
        from albertlm.deploy.executorch import export_executorch

        export_executorch(args.model, work / "pte", quantize="int8")
    reference = Predictor.load(args.model, "torch", args.threads, precision="fp32", overrides={"eval_batch_size": 32})
    layers = reference.config.num_hidden_layers
    if args.rule:
        name, value = args.rule.split("=")
        rule, grid = ExitRule(**{name: float(value) if "." in value else int(value)}), []
    else:
        print(f"choosing the rule on {len(choosing)} of {len(examples)} dev rows (seed {s.seed}, torch fp32):")
        rule, grid = pick_rule(reference, choosing, s.max_drop)
        if rule is None:
            raise SystemExit(f"no rule of the grid computes fewer layers within {s.max_drop:g} of full depth on the "
                             "choosing rows: full depth stays, nothing to benchmark")  # fmt: skip
    print(f"rule: {rule.describe()}; scored and timed on the other {len(scored)} rows", flush=True)
    max_len = reference.settings.max_seq_length
    peer = build_peer(args.model, work / "peer", args.threads,
                      calibration_inputs(args.model, args.model, calibration))  # fmt: skip
    hf_tok = transformers.AutoTokenizer.from_pretrained(args.model)
    labels = reference.labels
    predictors = {**ours(args.model, work, args.threads, None, args.executorch),
                  **ours(args.model, work, args.threads, rule, args.executorch)}  # fmt: skip
    short = texts[: args.latency_inputs]
    runs = {}
    for batch in (1, 32):
        subset = short if batch == 1 else texts
        for name, p in predictors.items():
            runs[(name, batch)] = our_runs(p, subset, batch)
        for name, session in peer.items():
            runs[(name, batch)] = peer_runs(session, hf_tok, subset, batch, max_len, labels)
    results: dict[str, dict] = {}
    right: dict[tuple, np.ndarray] = {}
    for (name, batch), fn in runs.items():  # warm-up, and what each path answers
        rows = fn()
        right[(name, batch)] = np.array([r["label"] == g for r, g in zip(rows, gold[: len(rows)], strict=True)])
        entry = results.setdefault(name, {})
        entry[f"batch{batch}_accuracy"] = float(right[(name, batch)].mean())
        if "layer" in rows[0]:
            entry[f"batch{batch}_mean_layers"] = float(np.mean([r["layer"] for r in rows]))
        print(f"  {name} batch {batch}: accuracy {entry[f'batch{batch}_accuracy']:.4f}", flush=True)
    for (name, batch), mine in right.items():  # each exit engine against the same engine at full depth
        if name.startswith("ours-exit-"):
            full = right[(name.replace("ours-exit-", "ours-full-"), batch)]
            change = exit_sweep.paired_change(lambda idx, r: float(r[idx].mean()), full, mine, s.resamples, s.seed)
            results[name][f"batch{batch}_vs_full"] = {**change, **exit_sweep.mcnemar_p(full, mine)}
    times: dict[tuple, list[float]] = {k: [] for k in runs}
    for r in range(args.rounds):
        for key, fn in runs.items():
            t = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t)
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    for (name, batch), ts in times.items():
        n = len(short) if batch == 1 else len(texts)
        rates = [n / t for t in ts]
        results[name][f"batch{batch}_sentences_per_s"] = statistics.median(rates)
        results[name][f"batch{batch}_sentences_per_s_range"] = [min(rates), max(rates)]
        results[name][f"batch{batch}_seconds"] = ts
    summary = summarize(results, layers)
    out = {
        "what": "early exit vs the peer, text in -> labels out on held-out dev sentences at their real lengths",
        "machine": machine(), "threads": args.threads, "rounds": args.rounds, "model": str(args.model),
        "load_average": {"start": list(load_start), "end": list(os.getloadavg())},
        "layers": layers, "hidden_size": reference.config.hidden_size,
        "task": task.name, "dev_file": str(dev_path), "dev_sentences": len(examples),
        "sweep_settings": s.__dict__.copy(), "choosing_rows": len(choosing), "scored_rows": len(scored),
        "latency_inputs": len(short), "rule": rule.describe(), "rule_settings": rule.settings(),
        "grid_on_choosing_rows": grid,
        "versions": {"albertlm": albertlm.__version__, "torch": torch.__version__,
                     "transformers": transformers.__version__, "onnxruntime": __import__("onnxruntime").__version__,
                     "openvino": __import__("openvino").__version__},
        "engines": results, "summary": summary,
    }  # fmt: skip
    print_table(out)
    write_result(out, args.json, "docs/results/early_exit/README.md says how to read it")


def _ratio(a: dict, b: dict, key: str) -> dict:
    """a's rate over b's: the ratio of medians, and its spread (a's slowest round over b's fastest, and back)."""
    (a_lo, a_hi), (b_lo, b_hi) = a[key + "_range"], b[key + "_range"]
    return {"median": a[key] / b[key], "range": [a_lo / b_hi, a_hi / b_lo]}


def summarize(results: dict[str, dict], layers: int) -> dict:
    """Best engine of each group per batch size, and the ratios the issue's targets are stated in; none (no
    speed-up) where the exit engine computes no fewer layers than full depth."""
    summary: dict = {}
    for batch in (1, 32):
        key = f"batch{batch}_sentences_per_s"
        best = {}
        for group in ("ours-full", "peer", "ours-exit"):
            names = [n for n in results if n.startswith(group + "-")]
            top = max(names, key=lambda n: results[n][key])
            best[group] = {"engine": top, "sentences_per_s": results[top][key],
                           "range": results[top][key + "_range"],
                           "accuracy": results[top][f"batch{batch}_accuracy"]}  # fmt: skip
        exit_engine = best["ours-exit"]["engine"]
        ex, full_same = results[exit_engine], results[exit_engine.replace("ours-exit-", "ours-full-")]
        faster = ex[f"batch{batch}_mean_layers"] < layers
        summary[f"batch{batch}"] = {
            **best,
            "mean_layers": ex[f"batch{batch}_mean_layers"],
            "exit_vs_peer_best": _ratio(ex, results[best["peer"]["engine"]], key) if faster else None,
            "exit_vs_our_full_best": _ratio(ex, results[best["ours-full"]["engine"]], key) if faster else None,
            "exit_vs_full_same_engine": _ratio(ex, full_same, key) if faster else None,
            "accuracy_change_same_engine": ex[f"batch{batch}_vs_full"],
        }
    return summary


def _x(r: dict | None) -> str:
    return exit_sweep.NO_SPEEDUP if r is None else f"{r['median']:.2f}x ({r['range'][0]:.2f}-{r['range'][1]:.2f})"


def print_table(out: dict) -> None:
    print(f"\n{out['task']}: {out['layers']} layers, H={out['hidden_size']}, rule {out['rule']} (chosen on "
          f"{out['choosing_rows']} dev rows; below: the other {out['scored_rows']}), {out['machine']}, "
          f"{out['threads']} threads, load average {out['load_average']['start'][0]:.2f} at the start, "
          f"{out['load_average']['end'][0]:.2f} at the end")
    print("| engine | batch 1 sentences/s | batch 32 sentences/s | held-out accuracy (batch 32) | mean layers | "
          "change vs full depth, same engine (95% interval; McNemar p) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for name, r in out["engines"].items():
        layers = r.get("batch32_mean_layers", out["layers"])
        vs = r.get("batch32_vs_full")
        change = "" if vs is None else (f"{vs['change']:+.4f} ({vs['interval'][0]:+.4f} to {vs['interval'][1]:+.4f}; "
                                        f"{vs['lost']} lost, {vs['gained']} gained, p={vs['p']:.3g})")  # fmt: skip
        rates = [f"{r[f'batch{b}_sentences_per_s']:.0f} ({r[f'batch{b}_sentences_per_s_range'][0]:.0f}-"
                 f"{r[f'batch{b}_sentences_per_s_range'][1]:.0f})" for b in (1, 32)]  # fmt: skip
        print(f"| {name} | {rates[0]} | {rates[1]} | {r['batch32_accuracy']:.4f} | "
              f"{layers:.2f} | {change} |")
    for batch in (1, 32):
        s = out["summary"][f"batch{batch}"]
        c = s["accuracy_change_same_engine"]
        print(f"batch {batch}: ours with exits ({s['ours-exit']['engine']}, {s['mean_layers']:.2f} layers) "
              f"{_x(s['exit_vs_peer_best'])} the peer's best ({s['peer']['engine']}), "
              f"{_x(s['exit_vs_our_full_best'])} our best at full depth ({s['ours-full']['engine']}); accuracy change "
              f"on the same engine {c['change']:+.4f} ({c['interval'][0]:+.4f} to {c['interval'][1]:+.4f}, "
              f"McNemar p={c['p']:.3g})")


if __name__ == "__main__":
    main()
