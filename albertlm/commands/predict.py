"""``albertlm predict``: batch inference, one JSON line out per input line (a blank line gets `{}`). An input
line is plain text (a tab before the second text of a pair) or a JSON object with the keys of the model's kind:
classification and regression "text" (or "text_a", "sentence", "sentence1") and, for a pair, "text_b" (or "pair",
"sentence2"); tagging "tokens" (a list of words) or "text"; QA "question" and "context" (and an "id" echoed back);
multiple choice "options" (two or more), "context" and "question". A model fine-tuned on your own data also
reads its training file's column names, and a .csv / .tsv / .json file like its training file.

albertlm predict --model runs/ft/sst2 --input sentences.txt          # or stdin; JSON lines out
albertlm predict --model runs/mine --input reviews.csv --output predictions.jsonl   # your own file's columns
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from albertlm.commands import flags
from albertlm.commands.common import add_engine_flags, add_inference_flags, load_predictor, note_skips, row_policy
from albertlm.errors import DataError, UserError
from albertlm.files import write_text_atomic


def register(subparsers: argparse._SubParsersAction) -> None:
    pr = subparsers.add_parser("predict", help="batch inference: JSON lines in (or text lines), JSON lines out")
    pr.add_argument("--model", required=True,
                    help="fine-tuned model directory (or an export, with --engine onnx or openvino)")  # fmt: skip
    pr.add_argument("--input", default=None, help="input file (default: stdin): JSON objects or plain text lines, "
                    "the keys above; a model fine-tuned on your own data also reads a .csv/.tsv/.json file like its "
                    "training file")  # fmt: skip
    pr.add_argument("--output", default=None, help="output file (default: stdout)")
    pr.add_argument("--task", type=flags.task, default=None,
                    help="task name, see `albertlm tasks` (default: the one the model was fine-tuned on)")
    add_engine_flags(pr)
    add_inference_flags(pr)
    pr.set_defaults(func=_predict)


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
    policy = row_policy(args)
    examples = {}
    for n, line in enumerate(lines):
        if line.strip():
            try:
                examples[n] = predictor.parse_line(line, f"{where}:{n + 1}")
            except DataError as e:
                policy.refuse(e)  # skipped under --skip-bad-rows: its output line is {}, as a blank line's
    note_skips(policy, lambda m: print(m, file=sys.stderr))
    if not examples:
        raise DataError(f"{where}: no input lines" + (f" left ({policy.skipped} bad rows skipped)" if policy.skipped
                                                      else ""))  # fmt: skip
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
    policy = row_policy(args)
    log = logging.getLogger(generic.__name__)
    level = log.level
    log.setLevel(logging.WARNING)  # stdout carries only the predictions
    try:
        examples = generic.reader(predictor.task.name, columns)(Path(args.input), policy)
    finally:
        log.setLevel(level)
    note_skips(policy, lambda m: print(m, file=sys.stderr))
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in predictor.predict(examples))
    if args.output:
        write_text_atomic(Path(args.output), text)
        print(f"predicted {len(examples)} rows of {args.input} with {predictor.task.name} model {args.model}; wrote "
              f"{args.output}", file=sys.stderr)  # fmt: skip
    else:
        sys.stdout.write(text)
    return 0
