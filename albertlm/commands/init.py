"""``albertlm init``: write a freshly initialised model of a preset as an HF-layout directory.

    albertlm init --preset albert-base-v2 --head pretraining --out models/albert-base-init
    albertlm init --preset albert-base-v2 --set hidden_size=256 --set num_hidden_layers=4 --out models/small
"""

from __future__ import annotations

import argparse

from albertlm.commands import flags
from albertlm.commands.common import add_model_overrides, model_overrides


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("init", help="write a randomly initialised preset in the HF layout")
    p.add_argument("--preset", required=True, help="preset name (see `albertlm params`)")
    from albertlm.heads import HEADS

    p.add_argument("--head", choices=[h.name for h in HEADS.values()], default="pretraining",
                   help="which model class (default: pretraining)")
    add_model_overrides(p)
    p.add_argument("--seed", type=flags.seed, default=0, help="initialisation seed")
    p.add_argument("--out", required=True, help="output directory (new, or empty: nothing is overwritten)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from albertlm import AlbertConfig
    from albertlm.files import require_new_dir
    from albertlm.heads import head_named

    require_new_dir(args.out)

    config = AlbertConfig.from_preset(args.preset, **model_overrides(args))
    torch.manual_seed(args.seed)
    model = head_named(args.head).cls(config)
    out = model.save_pretrained(args.out)
    print(f"wrote {type(model).__name__} ({model.num_parameters():,} parameters) to {out}")
    return 0
