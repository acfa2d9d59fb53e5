"""Fine-tuning's data: the training and evaluation examples of a task from its folder or your files, the
labels from the whole training file, a dev split found, taken from the labelled test split, or held out, and
the class balance reported (``load_data``; ``albertlm.training.finetune`` trains on what it returns)."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path

from albertlm.errors import DataError, UserError
from albertlm.tasks.examples import RowPolicy
from albertlm.tasks.kinds import kind_of
from albertlm.tasks.metrics import check_scorer
from albertlm.tasks.registry import Task, fit_to_data, read_split

_log = logging.getLogger(__name__)


@dataclass
class Data:
    train: list
    eval: list
    train_path: str
    eval_path: str
    labels: list[str] | None
    task: Task | None = None  # the task fitted to the training file (a generic qa file with impossible questions)
    label_counts: dict[str, int] | None = None  # training examples per class (classification)


def load_data(task: Task, data: str | Path, policy: RowPolicy | None = None, train_file: Path | None = None,
              eval_file: Path | None = None, holdout: int = 0, limit_train: int = 0, limit_eval: int = 0,
              seed: int = 0) -> Data:  # fmt: skip
    """The training and evaluation examples of ``task`` under ``data`` (a dataset folder or a file).

    Labels come from the whole training file (a ``limit_train`` slice may miss rare classes), and every
    evaluation label must be one of them. With no dev split the labelled test split is used (MRPC's MSR
    release), or the last ``holdout`` training examples; a generic task with no dev file holds out a
    seeded random ``dev_fraction`` of the training file."""
    check_scorer(task.metric)
    policy = policy or RowPolicy()
    data = Path(data)
    train_ex, train_path = read_split(task, data, "train", policy, train_file)
    kind = kind_of(task)
    kind.check_gold(train_ex, "training")
    if task.generic:
        task = fit_to_data(task, train_ex)
        kind = kind_of(task)
    labels = kind.label_set(task, train_ex)
    counts = kind.label_counts(task, train_ex)
    if limit_train:
        train_ex = train_ex[:limit_train]
    if holdout:
        if holdout >= len(train_ex):
            raise UserError(f"--holdout {holdout} leaves no training examples (have {len(train_ex)})")
        eval_ex, eval_path = train_ex[-holdout:], f"{train_path} (last {holdout} examples)"
        train_ex = train_ex[:-holdout]
    elif eval_file is not None:
        eval_ex, eval_path = read_split(task, data, "dev", policy, eval_file)
    elif task.generic and not task.has(data, "dev"):
        train_ex, eval_ex, eval_path = _hold_out(task, train_ex, train_path, seed)
    else:
        eval_ex, eval_path = _dev_or_test(task, data, policy, train_path)
    if limit_eval:
        eval_ex = eval_ex[:limit_eval]
    kind.check_gold(eval_ex, "evaluation during fine-tuning")
    kind.check_labels(task, {name: i for i, name in enumerate(labels or [])}, eval_ex)
    if counts:
        _report_classes(counts, train_path)
    return Data(train_ex, eval_ex, str(train_path), str(eval_path), labels, task, counts)


def _hold_out(task: Task, train: list, train_path: Path, seed: int) -> tuple[list, list, str]:
    """A seeded random share of the training examples for evaluation (the rest trains)."""
    fraction = task.columns.dev_fraction
    if not 0 < fraction < 1:
        raise UserError(f"--dev-fraction must be between 0 and 1, got {fraction}")
    n = max(1, round(len(train) * fraction))
    if n >= len(train):
        raise DataError(f"{train_path}: {len(train)} examples are too few to hold out a dev set; pass --eval-file")
    held = set(random.Random(seed).sample(range(len(train)), n))
    dev = [ex for i, ex in enumerate(train) if i in held]
    rest = [ex for i, ex in enumerate(train) if i not in held]
    where = f"{train_path} (seeded hold-out: {n} of {len(train)} examples, {fraction:g}, seed {seed})"
    _log.info("no dev file: holding out %d of the %d examples of %s for evaluation (--dev-fraction %g, --seed %d)",
              n, len(train), train_path, fraction, seed)  # fmt: skip
    return rest, dev, where


IMBALANCE_RATIO = 3.0  # largest / smallest class count from which the report warns


def _report_classes(counts: dict[str, int], path: Path) -> None:
    total = sum(counts.values())
    shown = ", ".join(f"{k} {v} ({v / total:.1%})" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])[:20])
    _log.info("classes in %s: %s%s", path, shown, f" (+{len(counts) - 20} more)" if len(counts) > 20 else "")
    big, small = max(counts, key=counts.get), min(counts, key=counts.get)
    if counts[big] >= IMBALANCE_RATIO * counts[small]:
        _log.warning("imbalanced classes: %r has %d examples, %.1fx the %d of %r; accuracy flatters a model that "
                     "favours the large class, so read macro F1 (generic tasks choose the best checkpoint by it)",
                     big, counts[big], counts[big] / counts[small], counts[small], small)  # fmt: skip


def _dev_or_test(task: Task, data: Path, policy: RowPolicy, train_path: Path) -> tuple[list, Path]:
    try:
        return read_split(task, data, "dev", policy)
    except DataError as e:
        if "no dev file" not in str(e):
            raise
    ex, path = read_split(task, data, "test", policy)  # e.g. MRPC's MSR release has no dev split
    if path == train_path or (ex and getattr(ex[0], "label", 0) is None):
        raise DataError(f"{data}: no labeled dev file for {task.name}; pass --eval-file or --holdout N") from None
    _log.info("note: no dev split in %s; evaluating on %s", data, path)
    return ex, path
