"""``albertlm convert``: original TensorFlow ALBERT / albert_zh checkpoints -> a model directory, no TensorFlow.

albertlm convert --from tf --checkpoint albert_base/model.ckpt-best --config albert_base/albert_config.json \\
    --vocab albert_base/30k-clean.model --out albert-base-pt
albertlm convert --list albert_base/model.ckpt-best      # the checkpoint's variables, dtypes and shapes
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", help="convert an original TensorFlow ALBERT checkpoint (Google or albert_zh)")
    p.add_argument("--list", metavar="PATH", help="only list the variables of a TF checkpoint (prefix, .index or dir)")
    p.add_argument("--from", dest="source", choices=["tf"], default="tf", help="checkpoint format")
    p.add_argument("--checkpoint", help="TF checkpoint prefix (e.g. model.ckpt-best), its .index, or its directory")
    p.add_argument("--config", help="the albert_config.json released with the checkpoint")
    p.add_argument("--vocab", help="30k-clean.model (SentencePiece) or vocab.txt (WordPiece); default: the one "
                                   "file of either kind beside the checkpoint")
    p.add_argument("--cased", action="store_true", help="do not lowercase (do_lower_case=False in the original)")
    p.add_argument("--out", help="new output directory (written atomically; must not exist or be empty)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from albertlm.cli import UserError
    from albertlm.convert.original import from_tf, list_variables

    if args.list:
        rows = list_variables(args.list)
        width = max((len(n) for n, _, _ in rows), default=0)
        for name, dtype, shape in rows:
            print(f"{name:<{width}}  {dtype:<8}  {list(shape)}")
        return 0
    missing = [flag for flag, value in (("--checkpoint", args.checkpoint), ("--config", args.config),
                                        ("--out", args.out)) if not value]
    if missing:
        raise UserError(f"{', '.join(missing)} required (or --list PATH to inspect a checkpoint)")
    report = from_tf(args.checkpoint, args.config, args.out, vocab=args.vocab, lowercase=not args.cased)
    print(f"wrote {report.summary()}")
    return 0
