"""``albertlm plot RUN_DIR``: draw a run's metrics.jsonl as PNG curves.

    albertlm plot runs/demo                 # writes runs/demo/curves.png
    albertlm plot runs/en --out docs/results/pretrain_en.png --title "albert-tiny on corpus/en"
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plot", help="PNG curves from a run's metrics.jsonl")
    p.add_argument("run", help="run directory (or a metrics.jsonl file)")
    p.add_argument("--out", help="PNG path (default RUN/curves.png)")
    p.add_argument("--title", help="figure title")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from albertlm.training.plot import plot_run

    print(f"wrote {plot_run(args.run, args.out, args.title)}")
    return 0
