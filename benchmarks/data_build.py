"""Pretraining-data build throughput against bare tokenization, worker scaling, memory, loader speed.

    python benchmarks/data_build.py                         # trains a small spiece.model on the corpus
    python benchmarks/data_build.py --tokenizer path/to/tok --corpus ../shared/corpus/en

Prints one table. The build must reach at least 0.5x the bytes/s of ``tok.encode_batch`` on the same text
(measured side by side, single process): the pipeline's own work (reading, sentence handling, planning,
masking, writing) should cost less than the tokenizer itself.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from albertlm.pretraining_data import InstanceConfig  # noqa: E402

from albertlm.data import PretrainingCollator, PretrainingDataset, build_dataset  # noqa: E402
from albertlm.data.tokenizer_training import train_sentencepiece  # noqa: E402
from albertlm.tokenizer import load_tokenizer  # noqa: E402

# Run in a fresh interpreter so ru_maxrss covers one build only (self = parent, children = workers).
_MEM_PROBE = """
import json, resource, sys
sys.path.insert(0, {repo!r})
from albertlm.data import build_dataset
from albertlm.tokenizer import load_tokenizer
build_dataset({files!r}, load_tokenizer({tok!r}), {out!r}, mode="dynamic", workers=2, chunk_bytes=1 << 20)
print(json.dumps([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))
"""


def bare_tokenize(tok, files: list[Path]) -> float:
    """Seconds for encode_batch over every non-blank line, batched as the build batches documents."""
    t0 = time.perf_counter()
    for f in files:
        batch: list[str] = []
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    batch.append(line.strip())
                if len(batch) >= 4096:
                    tok.encode_batch(batch)
                    batch = []
        if batch:
            tok.encode_batch(batch)
    return time.perf_counter() - t0


def timed_build(files, tok, out: Path, **kw) -> tuple[float, dict]:
    t0 = time.perf_counter()
    m = build_dataset(files, tok, out, **kw)
    return time.perf_counter() - t0, m


def loader_speed(path: Path, batch: int, n_batches: int) -> float:
    ds = PretrainingDataset(path)
    coll = PretrainingCollator(ds.pad_id)
    idx = __import__("numpy").random.default_rng(0).permutation(len(ds))
    n = min(n_batches, len(ds) // batch)
    t0 = time.perf_counter()
    for b in range(n):
        coll([ds[int(i)] for i in idx[b * batch : (b + 1) * batch]])
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=str(REPO.parent / "shared" / "corpus" / "en"), help="input directory")
    ap.add_argument("--tokenizer", default=None, help="tokenizer dir (default: train one, vocab 8000)")
    ap.add_argument("--batches", type=int, default=20, help="batches for the loader measurement")
    args = ap.parse_args()
    files = sorted(p for p in Path(args.corpus).glob("*.txt") if p.name != "heldout.txt")
    if not files:
        sys.exit(f"no corpus files in {args.corpus}")
    n_bytes = sum(p.stat().st_size for p in files)
    work = Path(tempfile.mkdtemp(prefix="albertlm-bench-"))
    rows: list[tuple[str, str]] = []
    try:
        if args.tokenizer:
            tok = load_tokenizer(args.tokenizer)
        else:
            tok = train_sentencepiece(files, work / "tok", vocab_size=8000, input_sentence_size=200_000)
        rows.append(("corpus", f"{len(files)} files, {n_bytes / 1e6:.2f} MB, vocab {tok.vocab_size}"))

        t_tok = min(bare_tokenize(tok, files) for _ in range(2))  # best of 2: warm caches, as the builds get
        t_dyn, m = timed_build(files, tok, work / "dyn1", mode="dynamic", workers=1, chunk_bytes=1 << 20)
        t_st, ms = timed_build(files, tok, work / "st1", mode="static", workers=1, chunk_bytes=1 << 20)
        t_dyn2, _ = timed_build(files, tok, work / "dyn2", mode="dynamic", workers=2, chunk_bytes=1 << 20)
        rows += [
            ("bare encode_batch", f"{n_bytes / t_tok / 1e6:.2f} MB/s ({t_tok:.1f}s)"),
            ("build dynamic, 1 worker", f"{n_bytes / t_dyn / 1e6:.2f} MB/s, ratio {t_tok / t_dyn:.2f}x"),
            ("build static x1, 1 worker", f"{n_bytes / t_st / 1e6:.2f} MB/s, ratio {t_tok / t_st:.2f}x"),
            ("build dynamic, 2 workers", f"{n_bytes / t_dyn2 / 1e6:.2f} MB/s, speedup {t_dyn / t_dyn2:.2f}x"),
            ("instances (static, seq 512)", f"{ms['counts']['instances']}, tokens {m['counts']['tokens']}"),
        ]

        # peak RSS for two corpus sizes: the largest file alone vs all files
        for name, sel in (("largest file", [max(files, key=lambda p: p.stat().st_size)]), ("all files", files)):
            size = sum(p.stat().st_size for p in sel)
            code = _MEM_PROBE.format(
                repo=str(REPO), files=[str(p) for p in sel], tok=str(tok.file.parent), out=str(work / "mem")
            )
            res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            parent, child = json.loads(res.stdout.strip().splitlines()[-1])
            rows.append(
                (
                    f"peak RSS, {name} ({size / 1e6:.1f} MB)",
                    f"parent {parent / 1024:.0f} MiB, largest worker {child / 1024:.0f} MiB",
                )
            )

        for mode in ("dynamic", "static"):
            out = work / f"l{mode}"
            build_dataset(
                files, tok, out, mode=mode, workers=2, chunk_bytes=1 << 20, cfg=InstanceConfig(max_seq_length=512)
            )
            bps = loader_speed(out, 32, args.batches)
            rows.append((f"Dataset+collator {mode} (seq 512, batch 32)", f"{bps:.1f} batches/s, 1 process"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    width = max(len(k) for k, _ in rows)
    print(f"{'measure'.ljust(width)} | value")
    print(f"{'-' * width}-|-{'-' * 50}")
    for k, v in rows:
        print(f"{k.ljust(width)} | {v}")
    print(f"(parent ru_maxrss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB)")


if __name__ == "__main__":
    main()
