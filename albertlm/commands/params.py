"""``albertlm params``: exact parameter counts of every preset and the paper's ablations.

    albertlm params                      # aligned table
    albertlm params --format markdown    # or json (one object per line)
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("params", help="parameter counts of the presets and the paper's ablations")
    p.add_argument("--format", choices=["text", "markdown", "json"], default="text", help="output format")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from albertlm.research.params import format_table, parameter_table

    print(format_table(parameter_table(), args.format))
    return 0
