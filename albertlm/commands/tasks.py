"""``albertlm tasks``: the registered tasks with their default hyperparameters.

albertlm tasks
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    ls = subparsers.add_parser("tasks", help="list the registered tasks with their default hyperparameters")
    ls.set_defaults(func=_tasks)


def _tasks(args: argparse.Namespace) -> int:
    from albertlm.tasks import TASKS

    for t in TASKS.values():
        steps = f"{t.steps} steps" if t.steps else f"{t.epochs:g} epochs"
        hp = f"lr {t.lr:g}, batch {t.batch_size}, {steps}, len {t.max_seq_length}"
        if t.generic:
            hp = "settings chosen from model and data size"
        print(f"{t.name:14s} {t.kind:14s} {hp}  {t.description}")
    return 0
