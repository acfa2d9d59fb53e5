"""``albertlm pretrain``: MLM + SOP pretraining (see ``albertlm.train`` for the batching rules).

    albertlm pretrain                                            # embedded demo: stdlib docstrings, albert-tiny
    albertlm pretrain --preset albert-tiny --data shards/en --valid-data shards/en-heldout --out runs/en
    torchrun --nproc_per_node 2 -m albertlm pretrain --data shards/en --out runs/en-ddp
    albertlm pretrain --out runs/en --resume                     # settings come from runs/en/run_config.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pretrain", help="pretrain ALBERT (MLM + SOP) on built shards, or the embedded demo",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="shards from `albertlm data build`; omit for the embedded demo corpus")
    p.add_argument("--valid-data", help="held-out shards for periodic validation")
    p.add_argument("--out", help="run directory (default runs/pretrain, or runs/demo for the demo)")
    p.add_argument("--resume", action="store_true", help="continue from the newest valid checkpoint in --out")
    p.add_argument("--preset", default="albert-tiny", help="model preset (see `albertlm params`)")
    p.add_argument("--sharing", choices=["all", "attention", "ffn", "none"], help="override the sharing mode")
    p.add_argument("--embedding-size", type=int, help="override E")
    p.add_argument("--num-hidden-groups", type=int, help="override G")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override any AlbertConfig field, e.g. --set hidden_size=256 --set num_hidden_layers=4")
    p.add_argument("--init-from", help="start from these weights (HF-layout model directory)")
    p.add_argument("--optimizer", choices=["lamb", "adamw"], default="lamb", help="lamb as the paper, or adamw")
    p.add_argument("--lr", type=float, help="peak learning rate (default 1.76e-3 for LAMB, 5e-4 for AdamW)")
    p.add_argument("--weight-decay", type=float, default=0.01, help="decoupled weight decay")
    p.add_argument("--max-steps", type=int, help="optimizer steps (default 1000; demo 240)")
    p.add_argument("--warmup-steps", type=int, help="linear warmup steps (default max-steps / 10)")
    p.add_argument("--global-batch-size", type=int, default=128, help="instances per optimizer step")
    p.add_argument("--micro-batch-size", type=int, default=32, help="instances per forward on one process")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32", help="training precision")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the model (default: on for CUDA, off on CPU)")
    p.add_argument("--activation-checkpointing", action="store_true", help="recompute blocks in backward")
    p.add_argument("--fsdp", action="store_true", help="FSDP2 (fully_shard) instead of DDP under torchrun")
    p.add_argument("--pack", action="store_true", help="pack several instances per row, no padding")
    p.add_argument("--seed", type=int, default=0, help="seed for weights and data order")
    p.add_argument("--log-every", type=int, default=10, help="steps between metric lines")
    p.add_argument("--eval-every", type=int, default=100, help="steps between validations")
    p.add_argument("--eval-batches", type=int, default=20, help="micro-batches per validation")
    p.add_argument("--save-every", type=int, default=100, help="steps between checkpoints")
    p.add_argument("--keep-last", type=int, default=2, help="checkpoints kept")
    p.add_argument("--max-nonfinite", type=int, default=20, help="skipped non-finite steps before stopping")
    p.add_argument("--num-workers", type=int, default=0, help="(reserved) data workers per process")
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available")
    p.add_argument("--peak-tflops", type=float, help="peak TFLOP/s for MFU (default: a GPU table; no MFU on CPU)")
    p.add_argument("--tensorboard", action="store_true", help="also log to TensorBoard (if installed)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs only)")
    p.set_defaults(func=run)


def _config_from_args(args: argparse.Namespace):
    from albertlm.train import PretrainConfig

    overrides = parse_overrides(args.set)
    overrides.update({k: v for k, v in (("sharing", args.sharing), ("embedding_size", args.embedding_size),
                                        ("num_hidden_groups", args.num_hidden_groups)) if v is not None})
    max_steps = args.max_steps or 1000
    lr = args.lr or (1.76e-3 if args.optimizer == "lamb" else 5e-4)
    return PretrainConfig(
        out=args.out, data=args.data, valid_data=args.valid_data, preset=args.preset, model_overrides=overrides,
        init_from=args.init_from, optimizer=args.optimizer, lr=lr, weight_decay=args.weight_decay,
        warmup_steps=args.warmup_steps if args.warmup_steps is not None else max_steps // 10,
        max_steps=max_steps, global_batch_size=args.global_batch_size, micro_batch_size=args.micro_batch_size,
        precision=args.precision, compile=args.compile, activation_checkpointing=args.activation_checkpointing,
        fsdp=args.fsdp, pack=args.pack, seed=args.seed, log_every=args.log_every, eval_every=args.eval_every,
        eval_batches=args.eval_batches, save_every=args.save_every, keep_last=args.keep_last,
        max_nonfinite=args.max_nonfinite, num_workers=args.num_workers, device=args.device,
        peak_tflops=args.peak_tflops, tensorboard=args.tensorboard, progress=not args.no_progress,
    )


def parse_overrides(items: list[str]) -> dict:
    """``--set FIELD=VALUE`` pairs -> typed AlbertConfig overrides (the field's type decides the parse)."""
    from albertlm.cli import UserError
    from albertlm.config import AlbertConfig

    types = {f.name: f.type for f in dataclasses.fields(AlbertConfig)}
    out: dict = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in types:
            raise UserError(f"--set {item!r}: expected FIELD=VALUE with FIELD one of {', '.join(sorted(types))}")
        kind = str(types[key])
        try:
            if "bool" in kind:
                out[key] = value.lower() in ("1", "true", "yes")
            elif "int" in kind and "float" not in kind:
                out[key] = int(value)
            elif "float" in kind:
                out[key] = float(value)
            else:
                out[key] = value
        except ValueError:
            raise UserError(f"--set {item!r}: {value!r} is not a valid {kind}") from None
    return out


def run(args: argparse.Namespace) -> int:
    from albertlm.cli import UserError
    from albertlm.train import PretrainConfig, TrainingError, pretrain

    start = time.time()
    demo = False
    if args.resume and args.out and (Path(args.out) / "run_config.json").exists():
        saved = json.loads((Path(args.out) / "run_config.json").read_text())
        fields = {f.name for f in dataclasses.fields(PretrainConfig)}
        cfg = PretrainConfig(**{k: v for k, v in saved.items() if k in fields})
        if args.max_steps:
            cfg.max_steps = args.max_steps
    else:
        if args.data is None:
            from albertlm.demo import DEMO_BATCH, DEMO_STEPS, prepare_demo_data

            demo = True
            args.out = args.out or "runs/demo"
            args.max_steps = args.max_steps or DEMO_STEPS
            if args.global_batch_size == 128:
                args.global_batch_size = DEMO_BATCH  # about 5 minutes on 2 CPU cores, all included
            args.data, args.valid_data = map(str, prepare_demo_data(Path(args.out) / "data"))
        args.out = args.out or "runs/pretrain"
        cfg = _config_from_args(args)
    try:
        result = pretrain(cfg, resume=args.resume)
    except TrainingError as e:
        raise UserError(str(e)) from None
    if result.get("world_size", 1) > 1 and not _is_rank0():
        return 0
    valid = ""
    if "valid_mlm_acc" in result:
        valid = f"; held-out MLM acc {result['valid_mlm_acc']:.3f}, SOP acc {result['valid_sop_acc']:.3f}"
    print(f"pretrained {result['steps']} steps, {result['tokens']:,} tokens in {(time.time() - start) / 60:.1f} min"
          f"{valid}; model -> {result['final']}, metrics -> {result['metrics']}, "
          f"checkpoints -> {Path(cfg.out) / 'checkpoints'}", file=sys.stdout)
    if demo:
        from albertlm.demo import learned_summary, next_steps

        print(learned_summary(result["final"], cfg.valid_data))
        print(next_steps(cfg.out, cfg.valid_data))
    return 0


def _is_rank0() -> bool:
    import os

    return os.environ.get("RANK", "0") == "0"
