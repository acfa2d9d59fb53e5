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
    from albertlm.commands.flags import add_flags
    from albertlm.data.instances import InstanceConfig
    from albertlm.data.shards import BuildSettings

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
    b.add_argument("--out", required=True, help="output directory (manifest.json is written there last), or "
                   "object storage: s3://bucket/prefix (built locally, then uploaded, its manifest last)")
    add_flags(b, InstanceConfig)
    add_flags(b, BuildSettings)
    from albertlm.data.tables import TextColumns

    add_flags(b, TextColumns)
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


def _summary_line(m: dict, out: str | Path) -> str:
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
    from albertlm.commands.flags import build
    from albertlm.data import InstanceConfig
    from albertlm.data.shards import BuildSettings
    from albertlm.errors import UserError
    from albertlm.tokenizer import load_tokenizer

    if not Path(args.tokenizer).exists():
        raise UserError(f"--tokenizer path does not exist: {args.tokenizer}")
    cfg = build(args, InstanceConfig)
    s = build(args, BuildSettings)
    tok = load_tokenizer(args.tokenizer)
    t0 = time.time()
    with _destination(args.out) as out:
        m = _build(args, tok, out, s, cfg)
    m["seconds"] = time.time() - t0
    warn = {k: m["counts"][k] for k in _WARNINGS if m["counts"].get(k)}
    if warn:
        print("warnings: " + ", ".join(f"{k}={v}" for k, v in warn.items()))
    print(_summary_line(m, args.out))
    return 0


def _destination(out: str):  # noqa: ANN202
    """--out itself, or for object storage (s3://...) a local folder uploaded when the build is done."""
    import contextlib

    from albertlm.data.remote import is_remote, staged_upload

    return staged_upload(out) if is_remote(out) else contextlib.nullcontext(out)


def _build(args: argparse.Namespace, tok, out, s, cfg) -> dict:  # noqa: ANN001
    from albertlm.commands.flags import build
    from albertlm.data import build_dataset, tables

    return build_dataset(
        args.input,
        tok,
        out,
        compat=s.compat,
        mode=s.mode,
        cfg=cfg,
        dupe_factor=s.dupe_factor,
        whole_word_zh=s.whole_word_zh,
        workers=s.workers,
        seed=s.seed,
        input_format=s.input_format,
        chunk_bytes=s.chunk_bytes,
        exclude=tuple(args.exclude),
        progress=True,
        columns=build(args, tables.TextColumns),
    )


def run_inspect(args: argparse.Namespace) -> int:
    from albertlm.data import PretrainingDataset

    ds = PretrainingDataset(args.dir, epoch=args.epoch, verify=args.verify)
    m = ds.manifest
    print(json.dumps({k: m[k] for k in ("mode", "tokenizer", "settings", "counts")}, indent=1))
    print(f"{len(ds)} instances at epoch {args.epoch} in {len(m['shards'])} shards")
    tok = _manifest_tokenizer(m["tokenizer"].get("path"))
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


def _manifest_tokenizer(path: object):  # noqa: ANN202
    """The tokenizer the manifest names, to decode with, or None (ids are shown): the path is the build
    machine's, and it may be gone, or not a tokenizer, here."""
    import sys

    from albertlm.errors import AlbertlmError
    from albertlm.tokenizer import load_tokenizer

    if not isinstance(path, str) or not path or not Path(path).exists():
        return None
    try:
        return load_tokenizer(path)
    except (AlbertlmError, OSError, RuntimeError, ValueError) as e:
        print(f"warning: the manifest's tokenizer {path} does not load ({type(e).__name__}); showing ids",
              file=sys.stderr)
        return None


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
