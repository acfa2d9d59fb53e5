"""``albertlm evaluate``: score a fine-tuned model (or an export) on a task's dev (or given) file; early exit's
rule sweep and saving the rule chosen.

albertlm evaluate --task sst2 --data shared/data/glue_sst2 --model runs/ft/sst2
albertlm evaluate --model runs/mine --data reviews-test.csv          # read with the columns saved in runs/mine
albertlm evaluate --model runs/ft/sst2 --data shared/data/glue_sst2 --exit-sweep --out runs/eval/sst2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from albertlm.commands import flags
from albertlm.commands.common import (
    add_engine_flags,
    add_inference_flags,
    add_user_data_flags,
    against_baseline,
    engine_settings,
    load_predictor,
    note_skips,
    row_policy,
    user_data,
)
from albertlm.errors import UserError
from albertlm.files import refuse_model_dir, write_text_atomic


def register(subparsers: argparse._SubParsersAction) -> None:
    ev = subparsers.add_parser("evaluate", help="evaluate a fine-tuned model on a task's dev (or given) file")
    ev.add_argument("--model", required=True,
                    help="fine-tuned model directory (or an export, with --engine onnx or openvino)")  # fmt: skip
    ev.add_argument("--data", required=True, help="dataset directory or file")
    ev.add_argument("--task", type=flags.task, default=None,
                    help="task name, see `albertlm tasks` (default: the one the model was fine-tuned on)")
    ev.add_argument("--split", default="dev", choices=["train", "dev", "test"], help="which split of --data")
    ev.add_argument("--limit", type=flags.limit, default=0, help="evaluate on the first N examples")
    ev.add_argument("--out", default=None, help="write metrics.json (and QA predictions.json) here")
    ev.add_argument("--official-format", default=None, metavar="DIR",
                    help="QA: write the official evaluation script's inputs (dev.json, predictions.json, SQuAD 2.0 "
                         "null_odds.json) into DIR and print the command that scores them")  # fmt: skip
    ev.add_argument("--exit-sweep", action="store_true",
                    help="early exit: choose a rule on part of the rows (a grid of patience, confidence and entropy "
                         "rules against full depth, with measured batch-1 latency and batch throughput), then score "
                         "and time it on the other rows; writes exit_sweep.json / .md / .png into --out")  # fmt: skip
    ev.add_argument("--save-exit-rule", action="store_true",
                    help="early exit: save the --exit-* rule given (with --exit-sweep: the rule the sweep chose) as "
                         "the model's default (its config.json; predict, serve and export then use it)")  # fmt: skip
    from albertlm.research.exit_sweep import SweepSettings

    flags.add_flags(ev, SweepSettings)
    add_user_data_flags(ev, skip=("dev_fraction",))
    add_engine_flags(ev)
    add_inference_flags(ev)
    ev.set_defaults(func=_evaluate)


def _evaluate(args: argparse.Namespace) -> int:
    from albertlm.tasks import read_split
    from albertlm.tasks.metrics import check_scorer, json_ready

    if args.out:  # checked before the model loads
        refuse_model_dir(args.out, "its metrics.json is the fine-tuning's: write the evaluation to another --out")
    if args.exit_sweep and not args.out:
        raise UserError("--exit-sweep writes exit_sweep.json / .md / .png: add --out DIR")
    from albertlm.deploy.early_exit import save_rule
    from albertlm.research.exit_sweep import SweepSettings

    if flags.values(args, SweepSettings) and not args.exit_sweep:
        raise UserError("the --sweep-* flags set how --exit-sweep chooses and scores its rule: add --exit-sweep")
    if args.save_exit_rule and engine_settings(args).engine != "torch":
        raise UserError("--save-exit-rule writes into a model folder (--engine torch); an export takes the rule the "
                        "model had when it was exported: save it on the model, then export again")  # fmt: skip
    predictor = load_predictor(args)
    task = predictor.task
    if task is None:
        raise UserError(f"{args.model} records no task; pass --task NAME (see `albertlm tasks`)")
    task = predictor.task = user_data(args, task)
    check_scorer(task.metric)
    if args.official_format:
        from albertlm.tasks.official import official_scorer

        official_scorer(task)  # a task without an official script fails here, before the model runs
    policy = row_policy(args)
    examples, path = read_split(task, Path(args.data), args.split, policy)
    if args.limit:
        examples = examples[: args.limit]
    note_skips(policy, lambda m: print(m, file=sys.stderr))
    if args.exit_sweep:
        return _exit_sweep(args, predictor, examples, path)
    if args.save_exit_rule and predictor.exit_rule is None:
        raise UserError("--save-exit-rule saves the rule given with --exit-patience / --exit-confidence / "
                        "--exit-entropy / --exit-max-layers: give one")  # fmt: skip
    result, answers = predictor.evaluate(examples)
    print(json.dumps(json_ready(result)))  # an undefined score (NaN) is null in JSON
    spans = nulls = None
    if "text" in answers[0]:  # span QA: the predictions (and SQuAD 2.0 null scores) the official scripts read
        spans = {ex.qid: a["text"] for ex, a in zip(examples, answers, strict=True)}
        if "null_score" in answers[0]:
            nulls = {ex.qid: a["null_score"] for ex, a in zip(examples, answers, strict=True)}
    where = ""
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        summary = {"task": task.name, "file": str(path), "metrics": json_ready(result)}
        write_text_atomic(out / "metrics.json", json.dumps(summary, indent=2))
        if spans is not None:  # span QA: the predictions file the official scripts read
            write_text_atomic(out / "predictions.json", json.dumps(spans, ensure_ascii=False, indent=1))
            if nulls is not None:
                write_text_atomic(out / "null_odds.json", json.dumps(nulls, indent=1))
        where = f"; wrote metrics.json to {out}"
    if args.official_format:
        from albertlm.tasks.official import write_official

        files = write_official(task, examples, spans, nulls, Path(args.official_format))
        print(f"wrote the official script's inputs to {args.official_format}; there: {files.command}", file=sys.stderr)
    if args.save_exit_rule:
        saved = save_rule(Path(args.model), predictor.exit_rule)
        where += f"; saved the exit rule ({predictor.exit_rule.describe()}) in {saved}"
    main = task.main_metric if task.main_metric in result else next(iter(result))
    msg = (f"evaluated {task.name} on {len(examples)} examples of {path}: {main}={result[main]:.4f}"
           f"{against_baseline(result, main)}{where}")
    print(msg, file=sys.stderr)
    return 0


def _exit_sweep(args: argparse.Namespace, predictor, examples: list, path: Path) -> int:  # noqa: ANN001
    from albertlm.deploy.early_exit import save_rule
    from albertlm.research import exit_sweep

    def progress(row: dict) -> None:
        print(f"  {row['rule']}: {row['metric']} {row['score']:.4f}, {row['mean_layers']:.2f} layers, "
              f"{row['latency_ms']['median']:.2f} ms at batch 1, {row['throughput']['median']:.0f} inputs/s",
              file=sys.stderr)  # fmt: skip

    s = flags.build(args, exit_sweep.SweepSettings)
    select, held = exit_sweep.split_rows(len(examples), s.select_fraction, s.seed)  # a bad fraction fails here
    print(f"choosing a rule on {len(select)} of {len(examples)} rows (seed {s.seed}); scoring it on the other "
          f"{len(held)}", file=sys.stderr)  # fmt: skip
    result = exit_sweep.run(predictor, examples, s, progress=progress)
    title = (f"{predictor.task.name}: {len(examples)} examples of {path}, engine {predictor.engine.name} "
             f"({predictor.engine.precision}), {predictor.config.num_hidden_layers} layers")  # fmt: skip
    info = {"model": args.model, "data": str(path), "engine": predictor.engine.name,
            "precision": predictor.engine.precision, "threads": engine_settings(args).threads,
            "examples": len(examples)}  # fmt: skip
    files = exit_sweep.write(result, Path(args.out), title, info)
    sys.stdout.write(exit_sweep.table(result["rows"]) + "\n" + exit_sweep.report(result))
    wrote = f"swept {len(result['rows'])} exit rules; wrote {', '.join(str(f) for f in files)}"
    if args.save_exit_rule:
        if result["chosen"] is None:
            raise UserError(f"{wrote}; no rule was within --sweep-max-drop {s.max_drop:g} of full depth, so none was "
                            "saved: allow a larger drop, or save one yourself with --exit-patience N "
                            "--save-exit-rule")  # fmt: skip
        chosen = next(r for r in result["rows"] if r["rule"] == result["chosen"])
        saved = save_rule(Path(args.model), exit_sweep.rule_of(chosen["settings"]))
        print(f"{wrote}; saved the rule chosen ({result['chosen']}) in {saved}", file=sys.stderr)
        return 0
    print(f"{wrote}; save the rule chosen with --save-exit-rule, or one of your own with: albertlm evaluate --model "
          f"{args.model} --data {args.data} --exit-patience N --save-exit-rule", file=sys.stderr)  # fmt: skip
    return 0
