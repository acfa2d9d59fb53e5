"""``albertlm analyze``: three analyses of trained models. `layers`: per-layer L2 distance and cosine similarity
of input vs output (paper Fig. 1); `intrinsic`: held-out MLM / pair accuracy on shards; `pairs`: SOP and NSP
accuracy on balanced held-out pairs (paper Table 5's contrasts).

    albertlm analyze layers --model runs/en/final --model runs/en-bert/final --corpus corpus/en/heldout.txt \\
        --out runs/analysis
    albertlm analyze intrinsic --model runs/en/final --data shards/en-heldout --json runs/en/intrinsic.json
    albertlm analyze pairs --model runs/en/final --heldout corpus/en/heldout.txt --max-seq-length 128
"""

from __future__ import annotations

import argparse

from albertlm.commands import flags


def register(sub: argparse._SubParsersAction) -> None:
    from albertlm.commands.flags import add_flags
    from albertlm.devices import Placement

    p = sub.add_parser("analyze", help="analyses of trained models (paper Figure 1)")
    what = p.add_subparsers(dest="analysis", metavar="ANALYSIS", required=True)
    layers = what.add_parser("layers", help="per-layer input/output L2 distance and cosine similarity")
    layers.add_argument("--model", action="append", required=True, help="model directory (repeat to compare)")
    layers.add_argument("--corpus", required=True, help="text file, one sentence per line")
    layers.add_argument("--max-sentences", type=flags.count, default=256, help="sentences to average over")
    layers.add_argument("--max-length", type=flags.bounded(int, 8), default=128, help="tokens per sentence")
    layers.add_argument("--out", default="runs/analysis", help="output directory (JSON, markdown, PNG)")
    layers.set_defaults(func=run)
    intr = what.add_parser("intrinsic", help="held-out MLM and SOP/NSP accuracy with a 95%% interval")
    intr.add_argument("--model", required=True, help="pretrained model directory (AlbertForPreTraining)")
    intr.add_argument("--data", required=True, help="held-out shards (`albertlm data build`, sop or nsp task)")
    intr.add_argument("--epochs", type=flags.count, default=5, help="re-drawings of the dynamic held-out pairs")
    intr.add_argument("--json", help="also write the result here")
    intr.set_defaults(func=run_intrinsic)
    pairs = what.add_parser("pairs", help="SOP and NSP accuracy on balanced held-out pairs, with 95%% intervals")
    pairs.add_argument("--model", required=True, help="pretrained model directory (AlbertForPreTraining)")
    pairs.add_argument("--heldout", required=True, help="held-out corpus file (one sentence per line, blank "
                       "line between documents)")  # fmt: skip
    pairs.add_argument("--tokenizer", default=None, help="tokenizer directory (default: the model directory)")
    pairs.add_argument("--max-seq-length", type=flags.bounded(int, 8), default=128,
                       help="tokens per pair (default: 128)")
    pairs.add_argument("--pairs", type=flags.count, default=1000, help="true pairs per contrast (default: 1000)")
    pairs.add_argument("--seed", type=flags.seed, default=0, help="which segments and negatives (default: 0)")
    pairs.add_argument("--json", help="also write the result here")
    pairs.set_defaults(func=run_pairs)
    for sub_parser in (layers, intr, pairs):
        add_flags(sub_parser, Placement)


def run(args: argparse.Namespace) -> int:
    from albertlm.research.analysis import layer_transitions, read_sentences, write_report

    sentences = read_sentences(args.corpus, args.max_sentences)
    stats = []
    for model in args.model:
        stats += layer_transitions(model, sentences, args.max_length, device=_device(args))
    paths = write_report(stats, args.out)
    print(f"analyzed {len(args.model)} model(s) on {len(sentences)} sentences of {args.corpus}; wrote "
          + ", ".join(map(str, paths)))
    return 0


def run_intrinsic(args: argparse.Namespace) -> int:
    import json

    from albertlm.data.demo import describe_intrinsic
    from albertlm.files import write_text_atomic
    from albertlm.research.analysis import intrinsic_accuracy

    r = intrinsic_accuracy(args.model, args.data, args.epochs, device=_device(args))
    if args.json:
        write_text_atomic(args.json, json.dumps(r, indent=1) + "\n")
    print(f"{args.model} on {args.data}: {describe_intrinsic(r)}; MLM acc at [MASK]ed positions "
          f"{r['mlm_acc_at_mask']:.4f} vs {r['mlm_acc_at_mask_baseline']:.4f}"
          + (f"; wrote {args.json}" if args.json else ""))
    return 0


def run_pairs(args: argparse.Namespace) -> int:
    import json

    from albertlm.devices import resolve_device
    from albertlm.files import write_text_atomic
    from albertlm.heads import AlbertForPreTraining
    from albertlm.research.analysis import build_pair_sets, pair_accuracy
    from albertlm.tokenizer import load_tokenizer

    tok = load_tokenizer(args.tokenizer or args.model)
    sets = build_pair_sets(args.heldout, tok, args.max_seq_length, args.pairs, args.seed)
    model = AlbertForPreTraining.from_pretrained(args.model).to(resolve_device(_device(args)))
    r = {"model": args.model, "heldout": args.heldout, **pair_accuracy(model, sets["sop"], tok.pad_id),
         **pair_accuracy(model, sets["nsp"], tok.pad_id)}  # fmt: skip
    if args.json:
        write_text_atomic(args.json, json.dumps(r, indent=1) + "\n")
    print(f"{args.model} on {r['sop_n'] // 2} held-out pairs from {args.heldout}, each with its negative "
          f"({r['sop_n']} items per contrast; one label scores 0.500): "
          f"SOP acc {r['sop_acc']:.4f} [{r['sop_ci95_low']:.4f}, {r['sop_ci95_high']:.4f}], "
          f"NSP acc {r['nsp_acc']:.4f} [{r['nsp_ci95_low']:.4f}, {r['nsp_ci95_high']:.4f}]"
          + (f"; wrote {args.json}" if args.json else ""))
    return 0


def _device(args: argparse.Namespace) -> str:
    from albertlm.commands.flags import build
    from albertlm.devices import Placement

    return build(args, Placement).device
