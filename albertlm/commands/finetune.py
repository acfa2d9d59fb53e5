"""``albertlm finetune``: fine-tune a model on a registered task or your own data.

albertlm finetune --task sst2 --data shared/data/glue_sst2 --model albert-tiny --tokenizer runs/tok/en \\
    --out runs/ft/sst2 --max-steps 300 --lr 1e-4
albertlm finetune --task squad --data shared/data/squad_v1.1 --model runs/pretrain/ckpt --out runs/ft/squad
albertlm finetune --task classification --data reviews.csv --text-column review --label-column stars \\
    --model runs/pretrain/ckpt --out runs/mine                       # your own data (generic tasks)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from albertlm.commands import flags
from albertlm.commands.common import add_inference_flags, add_user_data_flags, note_skips, row_policy, user_data


def register(subparsers: argparse._SubParsersAction) -> None:
    from albertlm.commands.flags import add_flags
    from albertlm.training.finetune import Settings

    ft = subparsers.add_parser("finetune", help="fine-tune a model on a task (GLUE, CLUE, SQuAD, CMRC, NER, ...)")
    ft.add_argument("--task", required=True, help="task name (see `albertlm tasks`); your own data: "
                    "classification, regression, tagging, qa or choice")  # fmt: skip
    ft.add_argument("--data", required=True, help="dataset directory (or a single training file: CSV, TSV, JSONL, ...)")
    ft.add_argument("--model", required=True, help="model directory (HF layout) or preset name (random init)")
    ft.add_argument("--tokenizer", default=None, help="tokenizer directory (default: the model directory)")
    ft.add_argument("--out", required=True, help="output directory: model, tokenizer, metrics")
    ft.add_argument("--overwrite", action="store_true",
                    help="replace the model and metrics an earlier run left in --out (other files stay)")
    ft.add_argument("--train-file", type=Path, default=None, help="training file instead of the task's default")
    ft.add_argument("--eval-file", type=Path, default=None, help="evaluation file instead of the task's dev file")
    ft.add_argument("--holdout", type=flags.limit, default=0, help="evaluate on the last N training examples instead")
    add_user_data_flags(ft)
    ft.add_argument("--limit-train", type=flags.limit, default=0, help="use only the first N training examples")
    ft.add_argument("--limit-eval", type=flags.limit, default=0, help="evaluate on the first N evaluation examples")
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
    from albertlm.commands.flags import build
    from albertlm.tasks import get_task
    from albertlm.training.finetune import check_exit_settings, check_out, load_data, resolve_tokenizer, train
    from albertlm.training.search import STUDY_FILE, SearchSettings, check_search, search
    from albertlm.training.tracking import parse_report_to

    ss = build(args, SearchSettings)
    if not (ss.search and (Path(args.out) / STUDY_FILE).exists()):  # (a search's own folder resumes it)
        check_out(Path(args.out), args.model, args.overwrite)  # before the data is read: a used --out fails at once
    task = user_data(args, get_task(args.task))
    s = _settings(args)
    check_exit_settings(task, s)
    parse_report_to(s.report_to)  # a tracker that is not installed: one line before the data is read
    if ss.search:
        check_search(ss, args.model, s.config_overrides)
    policy = row_policy(args)
    tok = resolve_tokenizer(args.model, args.tokenizer)
    data = load_data(task, args.data, policy, args.train_file, args.eval_file, args.holdout, args.limit_train,
                     args.limit_eval, s.seed)  # fmt: skip
    note_skips(policy, print)
    out = Path(args.out)
    if ss.search:
        result = search(task, data, args.model, tok, out, s, ss, overwrite=args.overwrite)
        sd = result["seeds"]
        print(f"searched {len(result['trials'])} trials for {task.name}; best trial {result['best_trial']['number']} "
              f"over {len(sd['scores'])} seeds: {result['metric']} mean {sd['mean']:.4f}, stdev {sd['stdev']:.4f} "
              f"(best seed {sd['best_seed']}: {sd['max']:.4f}, kept as the model in {out}); wrote "
              f"{out / 'search.md'}, search.json, search.png")  # fmt: skip
        return 0
    final = train(task, data, args.model, tok, out, s, overwrite=args.overwrite)
    task = data.task or task
    m = final["metrics"]
    main = task.main_metric if task.main_metric in m else next(iter(m), None)
    shown = f"{main}={m[main]:.4f}" if main else "no eval"
    kept = f" (kept the model of step {final['best_step']})" if final["best_step"] != final["steps"] else ""
    print(
        f"fine-tuned {task.name} for {final['steps']} steps ({final['train_seconds']:.0f}s): {shown} on "
        f"{final['eval_examples']} examples{kept}; wrote model + tokenizer + metrics.json/metrics.jsonl to {out}"
    )
    return 0
