"""``albertlm finetune``: fine-tune a model on a registered task or your own data.

albertlm finetune --task sst2 --data shared/data/glue_sst2 --model albert-tiny --tokenizer runs/tok/en \\
    --out runs/ft/sst2 --max-steps 300 --lr 1e-4
albertlm finetune --task squad --data shared/data/squad_v1.1 --model runs/pretrain/ckpt --out runs/ft/squad
albertlm finetune --task classification --data reviews.csv --text-column review --label-column stars \\
    --model runs/pretrain/ckpt --out runs/mine                       # your own data (generic tasks)
albertlm finetune ... --out runs/ft/squad --resume                   # continue from its newest checkpoint
torchrun --nproc_per_node 4 -m albertlm finetune ...                  # 4 GPUs (DDP), the same global --batch-size
"""

from __future__ import annotations

import argparse
from pathlib import Path

from albertlm.commands import flags
from albertlm.commands.common import add_inference_flags, add_training_data_flags, main_score


def register(subparsers: argparse._SubParsersAction) -> None:
    from albertlm.commands.flags import add_flags
    from albertlm.training.finetune import Settings

    ft = subparsers.add_parser("finetune", help="fine-tune a model on a task (GLUE, CLUE, SQuAD, CMRC, NER, ...)")
    ft.add_argument("--task", required=True, type=flags.task, help="task name (see `albertlm tasks`); your own "
                    "data: classification, regression, tagging, qa or choice")  # fmt: skip
    ft.add_argument("--data", required=True, help="dataset directory (or a single training file: CSV, TSV, JSONL, ...)")
    ft.add_argument("--model", required=True, help="model directory (HF layout) or preset name (random init)")
    ft.add_argument("--tokenizer", default=None, help="tokenizer directory (default: the model directory)")
    ft.add_argument("--out", required=True, help="output directory: model, tokenizer, metrics")
    ft.add_argument("--overwrite", action="store_true",
                    help="replace the model and metrics an earlier run left in --out (other files stay)")
    ft.add_argument("--resume", action="store_true",
                    help="continue the run in --out from its newest checkpoint (see --save-every), with the same "
                         "settings; bitwise exact on the CPU")  # fmt: skip
    add_training_data_flags(ft)
    add_flags(ft, Settings)
    from albertlm.training.search import SearchSettings

    add_flags(ft, SearchSettings)
    ft.add_argument("--quiet", dest="progress", action="store_false", default=None, help="the same as --no-progress")
    ft.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="override a model config field, e.g. --set hidden_size=64 (repeatable)")  # fmt: skip
    add_inference_flags(ft)
    ft.set_defaults(func=_finetune)


def _settings(args: argparse.Namespace):
    from albertlm.commands.flags import build
    from albertlm.config import parse_overrides
    from albertlm.tasks.kinds import InferenceSettings
    from albertlm.training.finetune import Settings

    inference = build(args, InferenceSettings)
    return build(args, Settings, inference=inference, config_overrides=parse_overrides(args.set))


def _finetune(args: argparse.Namespace) -> int:
    import os

    from albertlm.api import finetune
    from albertlm.commands.flags import build, values
    from albertlm.tasks.generic import UserData
    from albertlm.training.search import SearchSettings

    ss = build(args, SearchSettings)
    result = finetune(args.task, args.data, args.model, args.out, tokenizer=args.tokenizer, settings=_settings(args),
                      columns=values(args, UserData), train_file=args.train_file, eval_file=args.eval_file,
                      holdout=args.holdout, limit_train=args.limit_train, limit_eval=args.limit_eval,
                      skip_bad_rows=args.skip_bad_rows, overwrite=args.overwrite, resume=args.resume,
                      search=ss if ss.search else None)  # fmt: skip
    if os.environ.get("RANK", "0") != "0":  # under torchrun, rank 0 reports
        return 0
    skipped = result["skipped_rows"]
    if skipped["count"]:
        print(f"skipped {skipped['count']} bad rows (first: {skipped['first']})")
    out = Path(args.out)
    if ss.search:
        sd = result["seeds"]
        print(f"searched {len(result['trials'])} trials for {result['task']}; best trial "
              f"{result['best_trial']['number']} over {len(sd['scores'])} seeds: {result['metric']} mean "
              f"{sd['mean']:.4f}, stdev {sd['stdev']:.4f} (best seed {sd['best_seed']}: {sd['max']:.4f}, kept as the "
              f"model in {out}); wrote {out / 'search.md'}, search.json, search.png")  # fmt: skip
        return 0
    shown = main_score(result)
    kept = f" (kept the model of step {result['best_step']})" if result["best_step"] != result["steps"] else ""
    print(f"fine-tuned {result['task']} for {result['steps']} steps ({result['train_seconds']:.0f}s): {shown} on "
          f"{result['eval_examples']} examples{kept}; wrote model + tokenizer + metrics.json/metrics.jsonl to {out}")
    return 0
