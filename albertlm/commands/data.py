"""``albertlm data``: build pretraining shards from text, and look inside a build (spec section 6).

    albertlm data build --input shared/corpus/en --exclude heldout.txt --tokenizer tok/ --out data/en \\
        --mode dynamic --workers 2
    albertlm data build --input shared/corpus/zh --tokenizer tok_zh/ --out data/zh --mode static \\
        --dupe-factor 5 --max-seq-length 128
    albertlm data inspect data/en
    albertlm data demo-corpus --out corpus/en    # the embedded demo's text: train.txt + heldout.txt
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from albertlm.commands import flags


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="build and inspect pretraining data (SOP/NSP pairs, n-gram masks)")
    dsub = p.add_subparsers(dest="data_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    b = dsub.add_parser("build", help="tokenize text files into memory-mapped shards")
    b.add_argument(
        "--input",
        nargs="+",
        required=True,
        metavar="FILE_OR_DIR",
        help="text files (one sentence per line, blank line between documents), paragraph text, "
        "JSONL with a 'text' field, Parquet / Arrow tables or a saved `datasets` folder (see --text-column); "
        "directories are searched for *.txt/*.jsonl/*.parquet",
    )
    b.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="skip files in input directories matching this pattern (e.g. heldout.txt)",
    )
    b.add_argument("--tokenizer", required=True, help="tokenizer directory or file (spiece.model / vocab.txt)")
    b.add_argument(
        "--tokenizer-compat",
        choices=["original", "transformers", "tokenizer"],
        default="original",
        help="encode the text as google-research/albert did (original, the default: ALBERT pretraining data), "
        "as transformers does, or as the tokenizer's albertlm_compat records",
    )
    b.add_argument("--out", required=True, help="output directory (manifest.json is written there last)")
    b.add_argument(
        "--mode",
        choices=["static", "dynamic"],
        default="dynamic",
        help="static: masked instances written once per dupe copy (the original); dynamic: "
        "token ids only, pairs and masks drawn fresh every epoch",
    )
    b.add_argument(
        "--task",
        choices=["sop", "nsp", "none"],
        default="sop",
        help="inter-sentence task: sentence order (ALBERT), next sentence (BERT) or none",
    )
    b.add_argument(
        "--input-format",
        choices=["auto", "lines", "paragraphs", "jsonl"],
        default="auto",
        help="auto: .jsonl/.json or lines starting with '{' are JSONL, else one sentence per line",
    )
    b.add_argument("--max-seq-length", type=int, default=512, help="tokens per instance, with specials")
    b.add_argument("--max-predictions", type=int, default=20, help="max masked tokens per instance")
    b.add_argument("--masked-lm-prob", type=float, default=0.15, help="fraction of tokens to mask")
    b.add_argument(
        "--dupe-factor", type=int, default=1, help="static mode: masked copies of the data (the original used 40)"
    )
    b.add_argument(
        "--short-seq-prob",
        type=float,
        default=0.1,
        help="probability that a document uses a random shorter target length",
    )
    b.add_argument("--ngram", type=int, default=3, help="longest masked n-gram in words (p(n) ~ 1/n)")
    b.add_argument(
        "--single-sentence-random-b",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="one-sentence chunks take B from a random document even in SOP mode (original)",
    )
    b.add_argument(
        "--whole-word-zh",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="jieba whole-word masking for Chinese (default: on for wordpiece tokenizers)",
    )
    b.add_argument("--workers", type=flags.count, default=1, help="worker processes (one unit per file chunk)")
    b.add_argument("--chunk-mb", type=flags.bounded(float, above=0), default=32.0,
                   help="split input files into units of this size")
    b.add_argument("--seed", type=flags.seed, default=12345, help="seed of every random choice")
    from albertlm.data.tables import TextColumns

    flags.add_flags(b, TextColumns)
    b.set_defaults(func=run_build)

    i = dsub.add_parser("inspect", help="print the manifest summary and a few decoded instances")
    i.add_argument("dir", help="a directory written by `albertlm data build`")
    i.add_argument("--num", type=flags.count, default=3, help="instances to print")
    i.add_argument("--epoch", type=flags.limit, default=0, help="epoch (dynamic mode draws per epoch)")
    i.add_argument("--verify", action="store_true", help="also check every shard's sha256")
    i.set_defaults(func=run_inspect)

    c = dsub.add_parser("demo-corpus", help="write the embedded demo's corpus (Python stdlib docstrings, ~1 MB)")
    c.add_argument("--out", required=True, help="directory for train.txt and heldout.txt (must not hold them yet)")
    c.set_defaults(func=run_demo_corpus)


def _summary_line(m: dict, out: Path) -> str:
    c = m["counts"]
    inst = c.get("instances")
    parts = [f"{c.get('documents', 0)} documents", f"{c.get('sentences', 0)} sentences", f"{c.get('tokens', 0)} tokens"]
    if inst is not None:
        parts.append(f"{inst} instances")
        if c.get("instance_tokens"):
            parts.append(f"masked {c.get('masked_tokens', 0) / c['instance_tokens']:.3f}")
        if inst and m["settings"]["task"] != "none":
            parts.append(f"label-1 {c.get('sop_label_1', 0) / inst:.3f}")
    parts += [f"{c.get('bytes_written', 0) / 1e6:.1f} MB", f"{m['seconds']:.1f}s", f"-> {out}"]
    return f"data build ({m['mode']}): " + ", ".join(parts)


_WARNINGS = (
    "empty_files",
    "binary_files",
    "invalid_utf8_lines",
    "nul_bytes_removed",
    "overlong_lines_split",
    "overlong_line_bytes_dropped",
    "overlong_sentences_cut",
    "bad_json_lines",
    "empty_documents",
    "single_sentence_documents",
    "single_sentence_chunks_random_b",
    "single_sentence_chunks_skipped",
)


def run_build(args: argparse.Namespace) -> int:
    from albertlm.data import InstanceConfig, build_dataset, tables
    from albertlm.errors import UserError
    from albertlm.tokenizer import load_tokenizer

    if not Path(args.tokenizer).exists():
        raise UserError(f"--tokenizer path does not exist: {args.tokenizer}")
    if args.workers < 1:
        raise UserError(f"--workers must be >= 1, got {args.workers}")
    cfg = InstanceConfig(
        task=args.task,
        max_seq_length=args.max_seq_length,
        max_predictions_per_seq=args.max_predictions,
        masked_lm_prob=args.masked_lm_prob,
        short_seq_prob=args.short_seq_prob,
        ngram=args.ngram,
        single_sentence_random_b=args.single_sentence_random_b,
    )
    tok = load_tokenizer(args.tokenizer)
    t0 = time.time()
    m = build_dataset(
        args.input,
        tok,
        args.out,
        compat=None if args.tokenizer_compat == "tokenizer" else args.tokenizer_compat,
        mode=args.mode,
        cfg=cfg,
        dupe_factor=args.dupe_factor,
        whole_word_zh=args.whole_word_zh,
        workers=args.workers,
        seed=args.seed,
        input_format=args.input_format,
        chunk_bytes=max(1, int(args.chunk_mb * 2**20)),
        exclude=tuple(args.exclude),
        progress=True,
        columns=flags.build(args, tables.TextColumns),
    )
    m["seconds"] = time.time() - t0
    warn = {k: m["counts"][k] for k in _WARNINGS if m["counts"].get(k)}
    if warn:
        print("warnings: " + ", ".join(f"{k}={v}" for k, v in warn.items()))
    print(_summary_line(m, Path(args.out)))
    return 0


def run_inspect(args: argparse.Namespace) -> int:
    from albertlm.data import PretrainingDataset
    from albertlm.tokenizer import load_tokenizer

    ds = PretrainingDataset(args.dir, epoch=args.epoch, verify=args.verify)
    m = ds.manifest
    print(json.dumps({k: m[k] for k in ("mode", "tokenizer", "settings", "counts")}, indent=1))
    print(f"{len(ds)} instances at epoch {args.epoch} in {len(m['shards'])} shards")
    tok_path = m["tokenizer"].get("path")
    tok = load_tokenizer(tok_path) if tok_path and Path(tok_path).exists() else None
    for i in range(min(args.num, len(ds))):
        x = ds[i]
        ids = x["input_ids"].tolist()
        text = tok.decode(ids, skip_special_tokens=False) if tok else " ".join(map(str, ids))
        targets = [int(t) for t in x["labels"] if t != -100]
        tgt = tok.convert_ids_to_tokens(targets) if tok else targets
        print(f"--- instance {i}: {len(ids)} tokens, label {x.get('sentence_order_label', '-')}")
        print(text)
        print(f"targets: {tgt}")
    return 0


def run_demo_corpus(args: argparse.Namespace) -> int:
    from albertlm.cli import UserError
    from albertlm.data.demo import write_demo_corpus

    taken = [p for p in (Path(args.out) / "train.txt", Path(args.out) / "heldout.txt") if p.exists()]
    if taken:
        raise UserError(f"{taken[0]} already exists: choose another --out (nothing was written)")
    train, held, c = write_demo_corpus(args.out)
    print(f"demo corpus: {c['documents']:,} Python standard-library docstrings, {c['sentences']:,} sentences -> "
          f"{train} ({c['documents'] - c['heldout_documents']:,} documents), {held} ({c['heldout_documents']:,})")
    return 0
