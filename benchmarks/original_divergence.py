"""How much the original ALBERT tokenizer behaviour and transformers' differ on real text, and how many
pieces of a vocabulary change word-start status under the original's whole-word rule (issue 22).

    python benchmarks/original_divergence.py --tokenizer tests/fixtures/original/en \\
        ../shared/corpus/en/wikitext2.txt ../shared/corpus/en/heldout.txt ../shared/corpus/en/enwiki_excerpt.txt \\
        --json docs/results/original_divergence.json
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

from albertlm.tokenizer import load_tokenizer
from albertlm.tokenizer.base import _START_PUNCT

CAUSES = {
    "special strings (<unk>, [MASK], ...)": r"<unk>|<pad>|\[MASK\]|\[CLS\]|\[SEP\]",
    "a digit before a comma": r"\d,",
    "`` or '' quotes": r"``|''",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", type=Path, help="text files, one sentence per line")
    ap.add_argument("--tokenizer", required=True, help="a SentencePiece tokenizer directory")
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args()
    orig = load_tokenizer(args.tokenizer, compat="original")
    hf = orig.with_compat("transformers")
    out: dict = {"tokenizer": str(args.tokenizer), "vocab_size": orig.vocab_size, "files": {}}
    for path in args.files:
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
        pairs = zip(lines, orig.encode_batch(lines), hf.encode_batch(lines), strict=True)
        diff = [ln for ln, a, b in pairs if a != b]
        row = {
            "lines": len(lines),
            "lines_differing": len(diff),
            "lines_differing_holding": {k: sum(bool(re.search(p, ln)) for ln in diff) for k, p in CAUSES.items()},
        }
        out["files"][path.name] = row
        print(f"{path.name}: {len(diff)} of {len(lines)} lines ({len(diff) / len(lines):.1%}) differ; "
              f"of those, holding {row['lines_differing_holding']}")
    pieces = orig.convert_ids_to_tokens(range(orig.vocab_size))
    before = np.array([p.startswith(("▁", "<")) or p in _START_PUNCT for p in pieces])  # albertlm's old rule
    before[list(orig.special_ids)] = True
    changed = [p for p, b, a in zip(pieces, before, orig.word_start_mask(), strict=True) if b != a]
    out["word_start_changes"] = {"count": len(changed), "examples": changed[:20]}
    print(f"word starts: {len(changed)} of {orig.vocab_size} pieces change, e.g. {changed[:12]}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
