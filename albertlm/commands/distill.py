"""``albertlm distill``: a teacher (an albertlm or HuggingFace model folder) teaches an ALBERT student a task.

albertlm distill --task sst2 --data shared/data/glue_sst2 --teacher runs/ft/teacher --student albert-tiny \\
    --out runs/distill/sst2                                          # a teacher fine-tuned on the task
albertlm distill --task sst2 --data shared/data/glue_sst2 --teacher path/to/bert --finetune-teacher \\
    --teacher-epochs 2 --student albert-tiny --set num_hidden_layers=4 --out runs/distill/sst2
albertlm distill ... --exits per-layer                               # every exit learns from the teacher too
albertlm distill --task general --data corpus/ --teacher path/to/bert --student albert-tiny --max-steps 20000 \
    --out runs/general                                               # task-agnostic, on raw text
albertlm distill ... --out runs/distill/sst2 --resume                # continue from its newest checkpoint
torchrun --nproc_per_node 4 -m albertlm distill ...                  # 4 GPUs (DDP), as finetune
"""

from __future__ import annotations

import argparse
from pathlib import Path

from albertlm.commands.common import add_inference_flags, add_training_data_flags, main_score


def register(subparsers: argparse._SubParsersAction) -> None:
    from albertlm.commands.flags import add_flags
    from albertlm.training.distill import DistillSettings
    from albertlm.training.finetune import Settings

    p = subparsers.add_parser("distill", help="distil a teacher (albertlm or HuggingFace, fine-tuned on the task) "
                              "into a small ALBERT student")  # fmt: skip
    p.add_argument("--task", required=True, help="task name (see `albertlm tasks`); your own data: "
                   "classification, regression, tagging, qa or choice; general: task-agnostic, on raw text "
                   "(--data: a .txt file or a folder of them)")  # fmt: skip
    p.add_argument("--data", required=True, help="dataset directory (or a single training file: CSV, TSV, JSONL, ...)")
    p.add_argument("--student", default="albert-tiny", help="the student: a preset (random init; shape it with "
                   "--set, e.g. --set num_hidden_layers=4) or an albertlm model folder (default: albert-tiny)")
    p.add_argument("--out", required=True, help="output directory: the student, its tokenizer (the teacher's), "
                   "metrics")  # fmt: skip
    p.add_argument("--overwrite", action="store_true",
                   help="replace the student and metrics an earlier run left in --out (OUT/teacher stays)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its newest checkpoint")
    add_training_data_flags(p)
    add_flags(p, DistillSettings)
    add_flags(p, Settings)
    p.add_argument("--quiet", dest="progress", action="store_false", default=None, help="the same as --no-progress")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="shape the student: a config field, e.g. --set num_hidden_layers=4 (repeatable)")
    add_inference_flags(p)
    p.set_defaults(func=_distill)


def _distill(args: argparse.Namespace) -> int:
    import os

    from albertlm.api import distill
    from albertlm.commands.flags import build, values
    from albertlm.config import parse_overrides
    from albertlm.errors import UserError
    from albertlm.tasks.generic import UserData
    from albertlm.tasks.kinds import InferenceSettings
    from albertlm.training.distill import DistillSettings
    from albertlm.training.finetune import Settings

    if not args.teacher:
        raise UserError("--teacher DIR is required: a model folder (albertlm or HuggingFace)")
    d = build(args, DistillSettings)
    s = build(args, Settings, inference=build(args, InferenceSettings), config_overrides=parse_overrides(args.set))
    result = distill(args.task, args.data, args.teacher, args.student, args.out, settings=s, distill_settings=d,
                     columns=values(args, UserData), train_file=args.train_file, eval_file=args.eval_file,
                     holdout=args.holdout, limit_train=args.limit_train, limit_eval=args.limit_eval,
                     skip_bad_rows=args.skip_bad_rows, overwrite=args.overwrite, resume=args.resume)  # fmt: skip
    if os.environ.get("RANK", "0") != "0":
        return 0
    out = Path(args.out)
    if args.task == "general":
        print(f"distilled {result['teacher']} task-agnostically into a {result['student_parameters']:,}-parameter "
              f"student on {result['train_sequences']} sequences for {result['steps']} steps "
              f"({result['train_seconds']:.0f}s): held-out loss {result['metrics']['dev_loss']:.4f} (step "
              f"{result['best_step']}); wrote the student + tokenizer + metrics.json to {out}; next: albertlm "
              f"finetune --task TASK --data DIR --model {out} --out DIR")  # fmt: skip
        return 0
    shown = main_score(result)
    print(f"distilled {result['teacher']} into a {result['student_parameters']:,}-parameter student on "
          f"{result['task']} for {result['steps']} steps ({result['train_seconds']:.0f}s): {shown} on "
          f"{result['eval_examples']} examples; wrote the student + tokenizer + metrics.json to {out}; next: "
          f"albertlm evaluate --data {args.data} --model {out}")  # fmt: skip
    return 0
