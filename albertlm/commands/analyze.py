"""``albertlm analyze layers``: per-layer L2 distance and cosine similarity of input vs output (paper Fig. 1).

    albertlm analyze layers --model runs/en/pretrain/final --model runs/en-bert/final \\
        --corpus ../shared/corpus/en/heldout.txt --out docs/results/layers
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("analyze", help="analyses of trained models (paper Figure 1)")
    what = p.add_subparsers(dest="analysis", metavar="ANALYSIS", required=True)
    layers = what.add_parser("layers", help="per-layer input/output L2 distance and cosine similarity")
    layers.add_argument("--model", action="append", required=True, help="model directory (repeat to compare)")
    layers.add_argument("--corpus", required=True, help="text file, one sentence per line")
    layers.add_argument("--max-sentences", type=int, default=256, help="sentences to average over")
    layers.add_argument("--max-length", type=int, default=128, help="tokens per sentence")
    layers.add_argument("--out", default="runs/analysis", help="output directory (JSON, markdown, PNG)")
    layers.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from albertlm.analysis import layer_transitions, read_sentences, write_report

    sentences = read_sentences(args.corpus, args.max_sentences)
    stats = []
    for model in args.model:
        stats += layer_transitions(model, sentences, args.max_length)
    paths = write_report(stats, args.out)
    print(f"analyzed {len(args.model)} model(s) on {len(sentences)} sentences of {args.corpus}; wrote "
          + ", ".join(map(str, paths)))
    return 0
