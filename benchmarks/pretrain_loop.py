"""The whole pretraining loop (`albertlm pretrain`: data, step, logging), one checkout against another on the
same shards: did a change slow the default single-host path down? Runs alternate between the checkouts
(each a fresh process with that checkout first on PYTHONPATH), tokens/s is the median of each run's logged
windows after the first, and the ratio is of the medians over rounds.

    git worktree add /tmp/before <rev>
    python benchmarks/pretrain_loop.py --data runs/ee/shards --checkout /tmp/before --checkout . \\
        --json docs/results/distributed/pretrain_loop.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from timing import machine, write_result  # benchmarks/timing.py, beside this script

MODEL = ["--set=hidden_size=256", "--set=num_attention_heads=4", "--set=intermediate_size=1024",
         "--set=num_hidden_layers=6", "--set=embedding_size=128"]  # fmt: skip


def run_once(checkout: Path, data: str, out: Path, steps: int, threads: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve()), "OMP_NUM_THREADS": str(threads)}
    cmd = [sys.executable, "-m", "albertlm", "pretrain", "--data", data, "--out", str(out), "--overwrite",
           "--max-steps", str(steps), "--global-batch-size", "32", "--micro-batch-size", "16", "--log-every", "2",
           "--save-every", "100000", "--eval-every", "100000", "--no-progress", "--precision", "fp32", *MODEL]
    subprocess.run(cmd, env=env, check=True, capture_output=True, cwd=checkout)  # fmt: skip
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return statistics.median(r["tokens_per_s"] for r in rows[1:] if "tokens_per_s" in r)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="shards (`albertlm data build`)")
    ap.add_argument("--checkout", action="append", required=True, help="a repository checkout (repeat: 2 or more)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    checkouts = [Path(c) for c in args.checkout]
    rates: dict[str, list[float]] = {str(c): [] for c in checkouts}
    work = Path(tempfile.mkdtemp(prefix="loop-bench-"))  # this script's own scratch runs, removed at the end
    for r in range(args.rounds):
        for i, c in enumerate(checkouts):
            data = str(Path(args.data).resolve())
            rates[str(c)].append(run_once(c, data, work / f"run{i}", args.steps, args.threads))
        print(f"  round {r + 1}: " + ", ".join(f"{c} {v[-1]:,.0f} tokens/s" for c, v in rates.items()), file=sys.stderr)
    shutil.rmtree(work)
    med = {c: statistics.median(v) for c, v in rates.items()}
    base = med[str(checkouts[0])]
    result = {"machine": machine(), "command": " ".join(sys.argv), "threads": args.threads, "steps": args.steps,
              "tokens_per_s": med, "runs": rates, "ratio_over_first": {c: v / base for c, v in med.items()},
              "commits": {c: subprocess.run(["git", "-C", c, "rev-parse", "--short", "HEAD"], capture_output=True,
                                            text=True).stdout.strip() for c in rates}}  # fmt: skip
    print(json.dumps(result, indent=1))
    write_result(result, args.json, "compare `ratio_over_first` (1.0 = as fast)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
