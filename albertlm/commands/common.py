"""What several commands share: how a model is run (engine and inference flags, the Predictor they load), the
column flags for your own data, and the bad-row policy. Commands import this module, never each other."""

from __future__ import annotations

import argparse

from albertlm.commands import flags

# older flag names kept working (not in the help): serve's --max-length, and --max-batch-size, which read like
# --max-batch (the batch queue's limit) but set --eval-batch-size (sequences per forward)
INFERENCE_ALIASES = {"max_seq_length": ("--max-length",), "eval_batch_size": ("--max-batch-size",)}


def add_model_overrides(p: argparse.ArgumentParser, groups: bool = False) -> None:
    """``--set FIELD=VALUE`` and the model-shape shortcuts beside it (init, pretrain): the sharing mode, E and
    (``groups``) G; ``model_overrides`` reads them."""
    from albertlm.config import SHARING_MODES

    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override any AlbertConfig field, e.g. --set hidden_size=256 --set num_hidden_layers=4")
    p.add_argument("--sharing", choices=SHARING_MODES, help="override the sharing mode")
    p.add_argument("--embedding-size", type=flags.count, help="override E")
    if groups:
        p.add_argument("--num-hidden-groups", type=flags.count, help="override G")


def model_overrides(args: argparse.Namespace) -> dict:
    """The AlbertConfig overrides of ``add_model_overrides``' flags: ``--set``, then the shortcuts given."""
    from albertlm.config import parse_overrides

    overrides = parse_overrides(args.set)
    shortcuts = ("sharing", "embedding_size", "num_hidden_groups")
    overrides.update({k: getattr(args, k) for k in shortcuts if getattr(args, k, None) is not None})
    return overrides


def add_user_data_flags(p: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    from albertlm.commands.flags import add_flags
    from albertlm.tasks.generic import UserData

    add_flags(p, UserData, skip=skip)


def add_training_data_flags(p: argparse.ArgumentParser) -> None:
    """Where a training command's examples come from (finetune, distill): other train / eval files, a holdout,
    your own data's columns, and the limits on both splits."""
    from pathlib import Path

    p.add_argument("--train-file", type=Path, default=None, help="training file instead of the task's default")
    p.add_argument("--eval-file", type=Path, default=None, help="evaluation file instead of the task's dev file")
    p.add_argument("--holdout", type=flags.limit, default=0, help="evaluate on the last N training examples instead")
    add_user_data_flags(p)
    p.add_argument("--limit-train", type=flags.limit, default=0, help="use only the first N training examples")
    p.add_argument("--limit-eval", type=flags.limit, default=0, help="evaluate on the first N evaluation examples")


def user_data(args: argparse.Namespace, task):  # noqa: ANN001, ANN201
    """The task with the column flags given (over the ones a model saved); for the generic tasks only."""
    from albertlm.commands.flags import values
    from albertlm.tasks.generic import UserData, with_columns

    return with_columns(task, values(args, UserData))


def add_inference_flags(p: argparse.ArgumentParser) -> None:
    from albertlm.commands.flags import add_flags
    from albertlm.tasks.kinds import InferenceSettings

    add_flags(p, InferenceSettings, aliases=INFERENCE_ALIASES)
    p.add_argument("--skip-bad-rows", action="store_true", help="skip (and count) malformed rows instead of failing")


def add_engine_flags(p: argparse.ArgumentParser) -> None:
    """How a model is run (``EngineSettings``): shared by evaluate, predict and serve."""
    from albertlm.commands.flags import add_flags
    from albertlm.deploy.engines import EngineSettings

    p.add_argument("--tokenizer", default=None, help="tokenizer directory (default: the model directory)")
    add_flags(p, EngineSettings)
    p.add_argument("--fp32", dest="precision", action="store_const", const="fp32",
                   help="same as --precision fp32 (older name)")


def engine_settings(args: argparse.Namespace):  # noqa: ANN201
    from albertlm.commands.flags import build
    from albertlm.deploy.engines import EngineSettings

    return build(args, EngineSettings)


def load_predictor(args: argparse.Namespace):  # noqa: ANN201
    """The Predictor for --model / --task / --tokenizer, the engine flags and the inference flags given."""
    from albertlm.commands.flags import values
    from albertlm.deploy.inference import Predictor
    from albertlm.tasks.kinds import InferenceSettings

    e = engine_settings(args)
    return Predictor.load(args.model, engine=e.engine, threads=e.threads, tokenizer=args.tokenizer,
                          task=getattr(args, "task", None), overrides=values(args, InferenceSettings),
                          precision=e.precision, device=e.device)  # fmt: skip


def row_policy(args: argparse.Namespace):  # noqa: ANN201
    """--skip-bad-rows as the readers' policy (which counts what it skipped)."""
    from albertlm.tasks import RowPolicy

    return RowPolicy(args.skip_bad_rows)


def note_skips(policy, log) -> None:  # noqa: ANN001
    if policy.skipped:
        log(f"skipped {policy.skipped} bad rows (first: {policy.first})")


def main_score(result: dict) -> str:
    """A training run's closing score: its main metric (or the first one) beside the majority baseline."""
    m = result["metrics"]
    main = result["main_metric"] if result["main_metric"] in m else next(iter(m), None)
    return f"{main}={m[main]:.4f}{against_baseline(m, main)}" if main else "no eval"


def against_baseline(metrics: dict, main: str) -> str:
    """The main metric beside the majority baseline (always the most frequent label) and the gap, and whether
    the gap clears the noise of the evaluation's size (for accuracy: 1.96 binomial standard errors of the
    baseline), so a model that learned nothing never reads as a result."""
    import math

    base, n = metrics.get("majority_baseline"), int(metrics.get("examples") or 0)
    if base is None or main not in metrics or metrics[main] != metrics[main]:
        return ""
    gap = metrics[main] - base
    text = f" (majority baseline {base:.4f}, gap {gap:+.4f}"
    if main != "accuracy" or not n:
        return text + ")"
    noise = 1.96 * math.sqrt(base * (1 - base) / n)
    if gap > noise:
        return text + f": above it, beyond the +/-{noise:.3f} noise of {n} examples)"
    return text + (f": NOT above it beyond the +/-{noise:.3f} noise of {n} examples, so the model has not learned "
                   "the task; train longer, on more data, or from a better-pretrained model)")
