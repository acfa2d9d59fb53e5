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

The exit rule is the fastest of a grid (patience 1-6, confidence 0.6-0.99) whose dev score on our torch
fp32 engine is within ``--tolerance`` (0.5 points) of full depth, unless ``--rule`` names one (PABEE too picks
its patience on dev; the grid and every rule's score are in the JSON). Engines are timed in alternation, one
pass of each per round; medians over rounds; ratios of medians.

    python benchmarks/early_exit.py --model runs/ee/ft/en-sst2 --task sst2 --data ../shared/data/glue_sst2 \\
        --threads 2 --rounds 5 --json docs/results/early_exit/sst2.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from inference import build_peer, machine, openvino_precisions
from timing import write_result

import albertlm
from albertlm.deploy.early_exit import ExitRule
from albertlm.deploy.export import calibration_inputs, export_onnx
from albertlm.deploy.inference import Predictor
from albertlm.research.exit_sweep import CONFIDENCES
from albertlm.tasks import RowPolicy, get_task, read_split


def rule_grid() -> list[ExitRule]:
    return [ExitRule(patience=t) for t in range(1, 7)] + [ExitRule(confidence=p) for p in CONFIDENCES]


def pick_rule(predictor: Predictor, examples: list, tolerance: float) -> tuple[ExitRule, list[dict], float]:
    """The rule with the fewest mean layers whose score is within ``tolerance`` of full depth."""
    metric = predictor.task.main_metric
    full = predictor.with_settings(**ExitRule().settings()).evaluate(examples)[0][metric]
    rows = []
    for rule in rule_grid():
        result = predictor.with_settings(**rule.settings()).evaluate(examples)[0]
        rows.append({"rule": rule.describe(), "settings": rule.settings(), "score": result[metric],
                     "mean_layers": result["mean_layers"]})  # fmt: skip
        print(f"  {rule.describe()}: {metric} {result[metric]:.4f} (full depth {full:.4f}), "
              f"{result['mean_layers']:.2f} layers", flush=True)
    ok = [r for r in rows if r["score"] >= full - tolerance]
    best = min(ok, key=lambda r: r["mean_layers"]) if ok else None
    if best is None:
        raise SystemExit(f"no rule of the grid stays within {tolerance} of full depth ({full:.4f})")
    return ExitRule(**{k.removeprefix("exit_"): v for k, v in best["settings"].items()}), rows, full


def ours(model: Path, export: Path, threads: int, rule: ExitRule | None) -> dict[str, Predictor]:
    settings = {"eval_batch_size": 32, **(rule or ExitRule()).settings()}
    tag = "exit" if rule else "full"
    out = {f"ours-{tag}-torch-fp32": Predictor.load(model, "torch", threads, precision="fp32", overrides=settings)}
    for engine, precisions in (("onnx", ("fp32", "int8")), ("openvino", (*openvino_precisions(), "int8"))):
        for p in precisions:
            out[f"ours-{tag}-{engine}-{p}"] = Predictor.load(export, engine, threads, precision=p, overrides=settings)
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
    ap.add_argument("--latency-inputs", type=int, default=300, help="dev sentences timed one at a time (batch 1)")
    ap.add_argument("--tolerance", type=float, default=0.005, help="largest score drop of the chosen rule")
    ap.add_argument("--rule", default=None, help="e.g. patience=2 or confidence=0.9 (default: chosen on dev)")
    ap.add_argument("--work", type=Path, default=None, help="where the exports go (default: beside --model)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    import transformers

    torch.set_num_threads(args.threads)
    task = get_task(args.task)
    examples, dev_path = read_split(task, args.data, "dev", RowPolicy())
    train, _ = read_split(task, args.data, "train", RowPolicy())
    texts = [ex.text_a for ex in examples]
    gold = [ex.label for ex in examples]
    work = args.work or args.model.parent / f"{args.model.name}-bench"
    calibration = work / "calibration.txt"
    work.mkdir(parents=True, exist_ok=True)
    calibration.write_text("\n".join(ex.text_a.replace("\n", " ") for ex in train[:300]) + "\n", encoding="utf-8")
    print(f"exporting {args.model} (fp32, int8, OpenVINO int8 on {calibration})", flush=True)
    export_onnx(args.model, work / "ours", quantize="int8", calibration=calibration)
    reference = Predictor.load(args.model, "torch", args.threads, precision="fp32", overrides={"eval_batch_size": 32})
    if args.rule:
        name, value = args.rule.split("=")
        rule, grid, full_score = ExitRule(**{name: float(value) if "." in value else int(value)}), [], None
    else:
        print("choosing the rule on dev (torch fp32):", flush=True)
        rule, grid, full_score = pick_rule(reference, examples, args.tolerance)
    print(f"rule: {rule.describe()}", flush=True)
    max_len = reference.settings.max_seq_length
    peer = build_peer(args.model, work / "peer", args.threads,
                      calibration_inputs(args.model, args.model, calibration))  # fmt: skip
    hf_tok = transformers.AutoTokenizer.from_pretrained(args.model)
    labels = reference.labels
    predictors = {**ours(args.model, work / "ours", args.threads, None), **ours(args.model, work / "ours",
                                                                               args.threads, rule)}  # fmt: skip
    short = texts[: args.latency_inputs]
    runs = {}
    for batch in (1, 32):
        subset = short if batch == 1 else texts
        for name, p in predictors.items():
            runs[(name, batch)] = our_runs(p, subset, batch)
        for name, session in peer.items():
            runs[(name, batch)] = peer_runs(session, hf_tok, subset, batch, max_len, labels)
    results: dict[str, dict] = {}
    for (name, batch), fn in runs.items():  # warm-up, and what each path answers
        rows = fn()
        subset_gold = gold[: len(rows)]
        entry = results.setdefault(name, {})
        entry[f"batch{batch}_accuracy"] = float(np.mean([r["label"] == g for r, g in zip(rows, subset_gold,
                                                                                        strict=True)]))  # fmt: skip
        if "layer" in rows[0]:
            entry[f"batch{batch}_mean_layers"] = float(np.mean([r["layer"] for r in rows]))
        print(f"  {name} batch {batch}: accuracy {entry[f'batch{batch}_accuracy']:.4f}", flush=True)
    times: dict[tuple, list[float]] = {k: [] for k in runs}
    for r in range(args.rounds):
        for key, fn in runs.items():
            t = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t)
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    for (name, batch), ts in times.items():
        n = len(short) if batch == 1 else len(texts)
        results[name][f"batch{batch}_sentences_per_s"] = n / statistics.median(ts)
        results[name][f"batch{batch}_seconds"] = ts
    summary = summarize(results)
    out = {
        "what": "early exit vs the peer, text in -> labels out on dev sentences at their real lengths",
        "machine": machine(), "threads": args.threads, "rounds": args.rounds, "model": str(args.model),
        "layers": reference.config.num_hidden_layers, "hidden_size": reference.config.hidden_size,
        "task": task.name, "dev_file": str(dev_path), "dev_sentences": len(texts), "latency_inputs": len(short),
        "rule": rule.describe(), "rule_settings": rule.settings(), "full_depth_score": full_score, "grid": grid,
        "versions": {"albertlm": albertlm.__version__, "torch": torch.__version__,
                     "transformers": transformers.__version__, "onnxruntime": __import__("onnxruntime").__version__,
                     "openvino": __import__("openvino").__version__},
        "engines": results, "summary": summary,
    }  # fmt: skip
    print_table(out)
    write_result(out, args.json, "docs/results/early_exit/README.md says how to read it")


def summarize(results: dict[str, dict]) -> dict:
    """Best engine of each group per batch size, and the ratios the issue's targets are stated in."""
    summary: dict = {}
    for batch in (1, 32):
        key = f"batch{batch}_sentences_per_s"
        best = {}
        for group in ("ours-full", "peer", "ours-exit"):
            names = [n for n in results if n.startswith(group + "-")]
            top = max(names, key=lambda n: results[n][key])
            best[group] = {"engine": top, "sentences_per_s": results[top][key],
                           "accuracy": results[top][f"batch{batch}_accuracy"]}  # fmt: skip
        exit_engine = best["ours-exit"]["engine"]
        full_same = exit_engine.replace("ours-exit-", "ours-full-")
        summary[f"batch{batch}"] = {
            **best,
            "exit_vs_peer_best": best["ours-exit"]["sentences_per_s"] / best["peer"]["sentences_per_s"],
            "exit_vs_our_full_best": best["ours-exit"]["sentences_per_s"] / best["ours-full"]["sentences_per_s"],
            "exit_vs_full_same_engine": results[exit_engine][key] / results[full_same][key],
            "accuracy_change_same_engine": results[exit_engine][f"batch{batch}_accuracy"]
            - results[full_same][f"batch{batch}_accuracy"],
        }
    return summary


def print_table(out: dict) -> None:
    print(f"\n{out['task']}: {out['layers']} layers, H={out['hidden_size']}, rule {out['rule']}, {out['machine']}, "
          f"{out['threads']} threads")  # fmt: skip
    print("| engine | batch 1 sentences/s | batch 32 sentences/s | dev accuracy (batch 32) | mean layers |")
    print("|---|---|---|---|---|")
    for name, r in out["engines"].items():
        layers = r.get("batch32_mean_layers")
        print(f"| {name} | {r['batch1_sentences_per_s']:.0f} | {r['batch32_sentences_per_s']:.0f} | "
              f"{r['batch32_accuracy']:.4f} | {layers if layers is None else f'{layers:.2f}'} |")
    for batch in (1, 32):
        s = out["summary"][f"batch{batch}"]
        print(f"batch {batch}: ours with exits ({s['ours-exit']['engine']}) {s['exit_vs_peer_best']:.2f}x the peer's "
              f"best ({s['peer']['engine']}), {s['exit_vs_our_full_best']:.2f}x our best at full depth "
              f"({s['ours-full']['engine']}); accuracy change on the same engine "
              f"{s['accuracy_change_same_engine']:+.4f}")


if __name__ == "__main__":
    main()
