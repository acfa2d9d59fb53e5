"""``albertlm init``: write a freshly initialised model of a preset as an HF-layout directory.

    albertlm init --preset albert-base-v2 --head pretraining --out models/albert-base-init
"""

from __future__ import annotations

import argparse

HEADS = {
    "base": "AlbertModel",
    "pretraining": "AlbertForPreTraining",
    "mlm": "AlbertForMaskedLM",
    "classification": "AlbertForSequenceClassification",
    "tagging": "AlbertForTokenClassification",
    "qa": "AlbertForQuestionAnswering",
    "multiple-choice": "AlbertForMultipleChoice",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("init", help="write a randomly initialised preset in the HF layout")
    p.add_argument("--preset", required=True, help="preset name (see `albertlm params`)")
    p.add_argument("--head", choices=sorted(HEADS), default="pretraining", help="which model class")
    p.add_argument("--sharing", choices=["all", "attention", "ffn", "none"], help="override the sharing mode")
    p.add_argument("--embedding-size", type=int, help="override E")
    p.add_argument("--seed", type=int, default=0, help="initialisation seed")
    p.add_argument("--out", required=True, help="output directory")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    import albertlm
    from albertlm import AlbertConfig

    overrides = {}
    if args.sharing:
        overrides["sharing"] = args.sharing
    if args.embedding_size:
        overrides["embedding_size"] = args.embedding_size
    config = AlbertConfig.from_preset(args.preset, **overrides)
    torch.manual_seed(args.seed)
    model = getattr(albertlm, HEADS[args.head])(config)
    out = model.save_pretrained(args.out)
    print(f"wrote {type(model).__name__} ({model.num_parameters():,} parameters) to {out}")
    return 0
