"""What CMRC 2018 F1 owes to the segmentation of non-Chinese runs: our scorer (nltk.word_tokenize as the
official script calls it) against the regex `\\w+|[^\\w\\s]` this project used before, and, given an
unpacked nltk 3.4.5 source tree (the last nltk release for Python 2, which the original script needs),
against that version's word_tokenize rules.

Predictions are what a span model produces: the gold span with each boundary moved by up to --shift
characters (seeded), over the whole dev set; plus the count of distinct non-Chinese runs in the dev
contexts and answers that each segmentation splits differently.

    python benchmarks/cmrc_segmentation.py --data ../shared/data/cmrc2018 --json out.json
    python benchmarks/cmrc_segmentation.py --data ../shared/data/cmrc2018 --old-nltk /tmp/nltk-3.4.5
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import types
from pathlib import Path

from albertlm.tasks import RowPolicy, get_task, metrics, read_split


def _runs(text: str, rm_punc: bool) -> list[str]:
    """The non-Chinese runs the official mixed segmentation hands to nltk."""
    out, run = [], ""
    for ch in str(text).lower().strip():
        if rm_punc and ch in metrics._CMRC_PUNCT:
            continue
        if metrics._CJK.search(ch) or ch in metrics._CMRC_PUNCT:
            if run:
                out.append(run)
            run = ""
        else:
            run += ch
    return out + [run] if run else out


def _old_nltk_tokenizer(src: Path):  # noqa: ANN202
    """nltk 3.4.5's word_tokenize (one sentence): its TreebankWordTokenizer plus the four rules its
    ``nltk/tokenize/__init__.py`` adds, loaded from the source tree without importing the old package
    (it does not import on Python 3.11)."""
    code = {}
    for name in ("util", "api", "treebank"):
        text = (src / "nltk" / "tokenize" / f"{name}.py").read_text(encoding="utf-8")
        text = text.replace("from six import add_metaclass", "add_metaclass = lambda meta: (lambda cls: cls)")
        text = text.replace("from nltk.internals import overridden", "overridden = lambda m: True")
        text = re.sub(r"from nltk\.tokenize\.(\w+) import", r"from oldnltk_\1 import", text)
        mod = types.ModuleType(f"oldnltk_{name}")
        sys.modules[mod.__name__] = mod
        exec(compile(text, str(src / name), "exec"), mod.__dict__)  # noqa: S102 - a measurement script
        code[name] = mod
    tok = code["treebank"].TreebankWordTokenizer()
    init = (src / "nltk" / "tokenize" / "__init__.py").read_text(encoding="utf-8")
    assert "improved_open_quote_regex" in init, "not an nltk 3.4.x source tree"
    tok.STARTING_QUOTES.insert(0, (re.compile("([«“‘„]|[`]+)", re.U), r" \1 "))
    tok.STARTING_QUOTES.append((re.compile(r"(?i)(\')(?!re|ve|ll|m|t|s|d)(\w)\b", re.U), r"\1 \2"))
    tok.ENDING_QUOTES.insert(0, (re.compile("([»”’])", re.U), r" \1 "))
    tok.PUNCTUATION.insert(0, (re.compile(r'([^\.])(\.)([\]\)}>"\'' "»”’ " r"]*)\s*$", re.U), r"\1 \2 \3 "))
    return lambda run: tuple(tok.tokenize(run))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="CMRC 2018 folder (squad-style-data/ inside)")
    ap.add_argument("--seeds", type=int, default=3, help="prediction draws")
    ap.add_argument("--shift", type=int, default=4, help="most characters a span boundary moves")
    ap.add_argument("--old-nltk", type=Path, default=None, help="unpacked nltk-3.4.5 source tree (optional)")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args()

    examples, path = read_split(get_task("cmrc2018"), args.data, "dev", RowPolicy())
    answers = {ex.qid: ex.answers for ex in examples}
    variants = {"regex \\w+|[^\\w\\s]": lambda run: tuple(re.findall(r"\w+|[^\w\s]", run))}
    if args.old_nltk:
        variants["nltk 3.4.5 rules"] = _old_nltk_tokenizer(args.old_nltk)
    ours = metrics._word_tokenize

    texts = {ex.context for ex in examples} | {a for ex in examples for a in ex.answers}
    runs = {r for t in texts for rm in (False, True) for r in _runs(t, rm)}
    answer_runs = {r for ex in examples for a in ex.answers for rm in (False, True) for r in _runs(a, rm)}
    result = {"file": str(path), "questions": len(examples), "nltk": __import__("nltk").__version__,
              "distinct_runs": len(runs), "distinct_answer_runs": len(answer_runs), "seeds": []}  # fmt: skip
    for name, fn in variants.items():
        differ = [r for r in runs if fn(r) != ours(r)]
        result[f"runs_split_differently[{name}]"] = len(differ)
        result[f"answer_runs_split_differently[{name}]"] = sum(r in answer_runs for r in differ)
    for seed in range(args.seeds):
        rng = random.Random(seed)
        preds = {}
        for ex in examples:
            s = max(0, ex.answer_starts[0] + rng.randint(-args.shift, args.shift))
            e = max(s + 1, ex.answer_starts[0] + len(ex.answers[0]) + rng.randint(-args.shift, args.shift))
            preds[ex.qid] = ex.context[s:e]
        row = {"seed": seed, "ours_f1": metrics.cmrc2018(preds, answers)["f1"]}
        for name, fn in variants.items():
            metrics._word_tokenize = fn
            try:
                row[f"f1[{name}]"] = metrics.cmrc2018(preds, answers)["f1"]
            finally:
                metrics._word_tokenize = ours
        result["seeds"].append(row)
        print(json.dumps(row, ensure_ascii=False))
    summary = {k: v for k, v in result.items() if k != "seeds"}
    print(json.dumps(summary, ensure_ascii=False))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
