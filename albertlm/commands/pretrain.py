"""``albertlm pretrain``: MLM + SOP pretraining (see ``albertlm.training.pretrain`` for the batching rules).

    albertlm pretrain                                            # embedded demo: stdlib docstrings, albert-tiny
    albertlm pretrain --preset albert-tiny --data shards/en --valid-data shards/en-heldout --out runs/en
    torchrun --nproc_per_node 2 -m albertlm pretrain --data shards/en --out runs/en-ddp
    albertlm pretrain --out runs/en --resume                     # settings come from runs/en/run_config.json
    albertlm pretrain --data shards/en --out runs/en --overwrite  # replace the run in runs/en
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from albertlm.data.demo import DEMO_BATCH, DEMO_STEPS

# The embedded demo's settings where the user gives none: 240 steps, 2.2 minutes on 2 idle CPU cores
# (docs/results/newcomer.md).
DEMO = {"out": "runs/demo", "max_steps": DEMO_STEPS, "global_batch_size": DEMO_BATCH}


def register(sub: argparse._SubParsersAction) -> None:
    from albertlm.commands.common import add_model_overrides
    from albertlm.commands.flags import add_flags
    from albertlm.training.pretrain import PretrainConfig

    p = sub.add_parser("pretrain", help="pretrain ALBERT (MLM + SOP) on built shards, or the embedded demo")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its newest valid "
                   "checkpoint (settings from its run_config.json; writes only into --out)")
    p.add_argument("--allow-data-change", action="store_true", help="with --resume: go on although --data was "
                   "rebuilt since the run started (refused otherwise: the saved data position would index other "
                   "instances)")
    add_flags(p, PretrainConfig)
    add_model_overrides(p, groups=True)
    p.set_defaults(func=run)


def _config_from_args(args: argparse.Namespace, base=None):  # noqa: ANN001
    """PretrainConfig from the flags the user gave, over ``base`` (the defaults, or the demo's)."""
    from albertlm.commands.common import model_overrides
    from albertlm.commands.flags import build
    from albertlm.training.pretrain import PretrainConfig

    return build(args, PretrainConfig, base=base or PretrainConfig(), model_overrides=model_overrides(args))


def run(args: argparse.Namespace) -> int:
    from albertlm.training.pretrain import PretrainConfig, load_run_config, pretrain

    start = time.time()
    demo = False
    resume: bool | str = args.resume
    if not args.resume and _elastic_restart(args.out):
        resume = "auto"  # torchrun restarted the workers (a host failed or joined): the run goes on
        cfg = _config_from_args(args)
        cfg.overwrite = False  # (done when the job began: its restarts and returning hosts continue the run)
    elif args.resume:
        cfg = load_run_config(args.out or DEMO["out"])
        cfg.overwrite = bool(args.overwrite)  # refused with --resume by the run itself
        if args.max_steps:
            cfg.max_steps = args.max_steps
    elif args.data is None:
        from albertlm.data.demo import prepare_demo_data

        demo = True
        base = dataclasses.replace(PretrainConfig(), **DEMO)
        out = Path(args.out or base.out)
        _config_from_args(args, base).check_flags()  # a typo stops before the demo data is built
        data, valid = map(str, prepare_demo_data(out / "data"))
        cfg = _config_from_args(args, dataclasses.replace(base, data=data, valid_data=valid))
    else:
        cfg = _config_from_args(args)
    result = pretrain(cfg, resume=resume, allow_data_change=args.allow_data_change)
    if result.get("world_size", 1) > 1 and not _is_rank0():
        return 0
    valid = ""
    if "valid_mlm_acc" in result:
        valid = f"; held-out MLM acc {result['valid_mlm_acc']:.3f}, SOP acc {result['valid_sop_acc']:.3f}"
    skipped = f" ({result['nonfinite_steps']} skipped: non-finite)" if result.get("nonfinite_steps") else ""
    print(f"pretrained {result['steps']} steps{skipped}, {result['tokens']:,} tokens in "
          f"{(time.time() - start) / 60:.1f} min"
          f"{valid}; model -> {result['final']}, metrics -> {result['metrics']}, "
          f"checkpoints -> {Path(cfg.out) / 'checkpoints'}", file=sys.stdout)
    from albertlm.data.remote import is_remote

    if cfg.valid_data and not is_remote(cfg.valid_data):  # the held-out scores against the baselines they must beat
        from albertlm.data.demo import learned_summary

        print(learned_summary(result["final"], cfg.valid_data))
    if demo:
        from albertlm.data.demo import next_steps

        print(next_steps(cfg.out, cfg.valid_data))
    return 0


def _is_rank0() -> bool:
    import os

    return os.environ.get("RANK", "0") == "0"


def _elastic_restart(out: str | None) -> bool:
    """The run in --out is this torchrun job's: its agent restarted this worker (TORCHELASTIC_RESTART_COUNT
    > 0), or this worker's host joins the job that wrote it (the same --rdzv-id: a host that comes back)."""
    import os

    from albertlm.training.rundir import RUN_CONFIG, of_this_job

    if out is None or not (Path(out) / RUN_CONFIG).is_file():
        return False
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) > 0 or of_this_job(Path(out))
