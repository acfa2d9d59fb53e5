"""The embedded default: a pretraining corpus every machine with Python already has, and the demo run.

The corpus is the docstrings of the Python standard library's own source files (modules, classes and
functions with a paragraph or more of text), read with ``ast`` (nothing is imported or executed) and
written in the classic format: one sentence per line, a blank line between documents. It is English
technical prose, ~1 MB, identical on every install of one Python version, under the PSF license of the
interpreter it came with.

    albertlm pretrain                      # corpus -> tokenizer -> shards -> a few minutes of albert-tiny

Its budget is a few minutes on 2 otherwise idle CPU cores (2.2 measured, docs/results/newcomer.md): 240 steps
of 32 x 128-token instances (~660k tokens at the ~5,000 tokens/s albert-tiny trains at there). That is
enough to see the losses fall and to compare against the no-model baselines honestly, not to beat them:
held-out MLM stays below the copy-or-most-frequent baseline, which a small model passes only after thousands
of steps (README, Results).
"""

from __future__ import annotations

import ast
import logging
import re
import sysconfig
from collections.abc import Iterator
from pathlib import Path

_log = logging.getLogger(__name__)

# Folders of the standard library whose text is code samples or test data rather than prose.
SKIP_PARTS = {"test", "tests", "idlelib", "lib2to3", "site-packages", "dist-packages", "turtledemo", "tkinter",
              "ensurepip", "__pycache__", "encodings"}
MIN_DOC_CHARS = 200


def stdlib_docstrings(root: Path | None = None) -> Iterator[str]:
    """Docstrings of at least MIN_DOC_CHARS characters, in a fixed (sorted) file and tree order."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    for path in sorted(root.rglob("*.py")):
        if SKIP_PARTS.intersection(path.relative_to(root).parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= MIN_DOC_CHARS:
                    yield doc


def _sentences(doc: str) -> list[str]:
    from albertlm.data import split_sentences

    # Paragraphs are separated by blank lines; indented blocks are code examples, not prose.
    prose = [p for p in re.split(r"\n\s*\n", doc) if p.strip() and not p.startswith((" ", "\t", ">>>"))]
    return [s for p in prose for s in split_sentences(" ".join(p.split()))]


# The demo's training budget (flags the user gives still win): about 4 minutes of steps on 2 CPU cores.
DEMO_STEPS, DEMO_BATCH = 240, 32
# Every HELDOUT_EVERY-th document is held out: ~200 documents, ~250 pairs per drawing, which the final
# check re-draws DEMO_EVAL_EPOCHS times (dynamic masks and swaps) for a usable interval on SOP.
HELDOUT_EVERY, DEMO_EVAL_EPOCHS = 10, 4


def write_demo_corpus(out_dir: str | Path, heldout_every: int = HELDOUT_EVERY) -> tuple[Path, Path, dict[str, int]]:
    """Write train.txt and heldout.txt (every ``heldout_every``-th document); returns paths and counts."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train, held = out / "train.txt", out / "heldout.txt"
    counts = {"documents": 0, "sentences": 0, "heldout_documents": 0}
    seen: set[str] = set()
    with open(train, "w", encoding="utf-8") as ft, open(held, "w", encoding="utf-8") as fh:
        for doc in stdlib_docstrings():
            sents = _sentences(doc)
            if len(sents) < 2 or "\n".join(sents) in seen:
                continue  # a pair task needs two sentences; a repeated docstring would leak into held-out
            seen.add("\n".join(sents))
            is_held = counts["documents"] % heldout_every == heldout_every - 1
            (fh if is_held else ft).write("\n".join(sents) + "\n\n")
            counts["documents"] += 1
            counts["sentences"] += len(sents)
            counts["heldout_documents"] += int(is_held)
    return train, held, counts


def prepare_demo_data(work: str | Path, vocab_size: int = 4000, max_seq_length: int = 128, seed: int = 0,
                      log=_log.info) -> tuple[Path, Path]:
    """corpus -> SentencePiece tokenizer -> dynamic shards (train and held-out); reused when present."""
    from albertlm.data import InstanceConfig, build_dataset, load_manifest
    from albertlm.data.tokenizer_training import train_sentencepiece
    from albertlm.tokenizer import load_tokenizer

    work = Path(work)
    train_shards, valid_shards = work / "shards-train", work / "shards-heldout"
    try:
        load_manifest(train_shards)
        load_manifest(valid_shards)
        log(f"demo data: reusing {train_shards} and {valid_shards}")
        return train_shards, valid_shards
    except ValueError:
        pass
    train_txt, held_txt, counts = write_demo_corpus(work / "corpus")
    log(f"demo corpus: {counts['documents']:,} Python standard-library docstrings, {counts['sentences']:,} "
        f"sentences -> {work / 'corpus'}")
    tok_dir = work / "tokenizer"
    if (tok_dir / "spiece.model").exists():
        tok = load_tokenizer(tok_dir)
    else:
        tok = train_sentencepiece([train_txt], tok_dir, vocab_size=vocab_size, seed=seed)
    cfg = InstanceConfig(max_seq_length=max_seq_length)
    build_dataset([train_txt], tok, train_shards, mode="dynamic", cfg=cfg, seed=seed, progress=True)
    build_dataset([held_txt], tok, valid_shards, mode="dynamic", cfg=cfg, seed=seed + 1)
    return train_shards, valid_shards


def learned_summary(model_dir: str | Path, valid_shards: str | Path, epochs: int = DEMO_EVAL_EPOCHS) -> str:
    """One line: held-out MLM and SOP accuracy against the baselines a model must beat, each flagged plainly
    when it is not above its baseline (MLM: copy the input or answer the most frequent piece; SOP: always
    answer the majority label)."""
    from albertlm.research.analysis import intrinsic_accuracy

    return describe_intrinsic(intrinsic_accuracy(model_dir, valid_shards, epochs=epochs))


def describe_intrinsic(r: dict) -> str:
    """``learned_summary``'s line for the result of ``intrinsic_accuracy`` (also ``analyze intrinsic``'s)."""
    mlm, mlm_base = r["mlm_acc"], r["mlm_acc_baseline"]
    sop, half, major = r["pair_acc"], r["pair_acc_ci95"], r["majority_baseline"]
    mlm_verdict = "above it" if mlm > mlm_base else "NOT above it: no use of context learned yet"
    if sop - half > major:
        sop_verdict = "above it"
    elif sop > major:
        sop_verdict = "not clearly above it (within the interval)"
    else:
        sop_verdict = "NOT above it"
    return (f"learned (held-out, {r['pairs']} pairs over {r['epochs']} drawings): MLM accuracy {mlm:.3f} vs "
            f"{mlm_base:.3f} for copying the input or answering the most frequent piece ({mlm_verdict}); "
            f"SOP accuracy {sop:.3f} +/- {half:.3f} vs {major:.3f} for the majority label ({sop_verdict})")


def next_steps(out: str | Path, valid_shards: str | Path) -> str:
    out = Path(out)
    return (f"next: `albertlm pretrain --out {out} --resume --max-steps 3000` trains on (hours on a CPU; the "
            f"README's Results show where MLM leaves the plateau), `albertlm analyze intrinsic --model {out}/final "
            f"--data {valid_shards}` re-measures, and README.md's Quick tour goes on to fine-tuning and export")
