"""HF's tokenizers (fast and slow) against albertlm's on the shipped English and Chinese slices, for any installed
transformers version (issue 45): rows whose ids differ, per slice, tokenizer behaviour and HF class.

    # 1. with albertlm installed: train the slices' tokenizers, save each behaviour's folder, write albertlm's ids
    python benchmarks/hf_tokenizer_parity.py save --out runs/tok-parity
    # 2. in any environment with transformers (albertlm not needed there): HF's ids, compared
    python benchmarks/hf_tokenizer_parity.py check --out runs/tok-parity --json docs/results/tokenizer/parity_tf5.json

Step 2 imports only transformers, so a second venv with transformers 4.x checks the same folders.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# what the original's tokenization does that a `tokenizers` pipeline cannot (see tests/tasks/test_hf_tokenizer.py)
ORIGINAL_ONLY = re.compile(r"<unk>|<pad>|\[(CLS|SEP|MASK|UNK|PAD)\]|\d,")


def save(out: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "tasks"))
    sys.path.insert(0, str(ROOT / "tests"))
    from test_hf_tokenizer import chinese, english

    from albertlm.data.tokenizer_training import train_sentencepiece, train_wordpiece

    corpus = {"en": sorted((ROOT / "tests/data/corpus/en").glob("*.txt")),
              "zh": sorted((ROOT / "tests/data/corpus/zh").glob("*.txt"))}  # fmt: skip
    toks = {"en": train_sentencepiece([p for p in corpus["en"] if p.name != "heldout.txt"], out / "tok-en",
                                      vocab_size=2000, seed=0),
            "zh": train_wordpiece([p for p in corpus["zh"] if p.name != "heldout.txt"], out / "tok-zh",
                                  vocab_size=6000)}  # fmt: skip
    slices = {"en": english(), "zh": chinese()}
    report = {}
    for lang, tok in toks.items():
        for compat in ("original", "transformers"):
            t = tok.with_compat(compat)
            t.save(out / f"{lang}-{compat}")
            report[f"{lang}-{compat}"] = {name: {"texts": texts, "ids": t.encode_batch(texts, add_special_tokens=True)}
                                          for name, texts in slices[lang].items()}  # fmt: skip
    (out / "ours.json").write_text(json.dumps(report, ensure_ascii=False), encoding="utf-8")
    print(f"wrote {len(report)} tokenizer folders and albertlm's ids to {out}; next: "
          f"python benchmarks/hf_tokenizer_parity.py check --out {out}")


def check(out: Path, json_out: Path | None) -> None:
    import transformers

    ours = json.loads((out / "ours.json").read_text(encoding="utf-8"))
    rows = []
    for folder, slices in ours.items():
        for fast in (True, False):
            try:
                hf = transformers.AutoTokenizer.from_pretrained(str(out / folder), use_fast=fast)
            except Exception as e:  # a class with no slow version, say
                rows.append({"folder": folder, "use_fast": fast, "error": f"{type(e).__name__}: {str(e)[:200]}"})
                continue
            for name, s in slices.items():
                theirs = hf(s["texts"])["input_ids"]
                differ = [t for t, a, b in zip(s["texts"], s["ids"], theirs, strict=True) if a != b]
                other = sum(not ORIGINAL_ONLY.search(t) for t in differ)
                rows.append({"folder": folder, "use_fast": fast, "hf_class": type(hf).__name__, "slice": name,
                             "rows": len(s["texts"]), "differ": len(differ),
                             "differ_without_original_only_constructs": other,
                             "examples": [t[:160] for t in differ[:2]]})  # fmt: skip
    result = {"transformers": transformers.__version__, "tokenizers": __import__("tokenizers").__version__,
              "python": platform.python_version(), "command": " ".join(sys.argv), "rows": rows}  # fmt: skip
    for r in rows:
        print(r.get("folder"), "fast" if r["use_fast"] else "slow", r.get("hf_class", r.get("error")),
              r.get("slice", ""), f"{r.get('differ', '-')} of {r.get('rows', '-')} differ")  # fmt: skip
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {json_out}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=("save", "check"))
    p.add_argument("--out", type=Path, required=True, help="folder for the tokenizer folders and albertlm's ids")
    p.add_argument("--json", type=Path, default=None, help="check: write the comparison here")
    a = p.parse_args()
    save(a.out) if a.step == "save" else check(a.out, a.json)
