"""``albertlm tokenizer``: train a SentencePiece / WordPiece vocabulary, or encode text with one.

albertlm tokenizer train --input corpus/en --out tok/en --kind sentencepiece --vocab-size 30000
albertlm tokenizer train --input corpus/zh --out tok/zh --kind wordpiece --vocab-size 21128
albertlm tokenizer encode --tokenizer tok/en --text "Hello world"
cat lines.txt | albertlm tokenizer encode --tokenizer tok/en --pieces
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

from albertlm.commands import flags


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tokenizer", help="train or apply a SentencePiece / WordPiece tokenizer")
    sub = parser.add_subparsers(dest="tokenizer_command", metavar="ACTION")
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])

    train = sub.add_parser("train", help="train a vocabulary on text files (one sentence per line)")
    train.add_argument(
        "--input",
        nargs="+",
        required=True,
        metavar="FILE_OR_DIR",
        help="text files, Parquet / Arrow tables or saved `datasets` folders (see --text-column), or "
        "directories meaning every *.txt and *.parquet inside",
    )
    train.add_argument(
        "--out", required=True, help="directory to write spiece.model or vocab.txt (+ tokenizer_config.json)"
    )
    train.add_argument(
        "--kind",
        choices=["sentencepiece", "wordpiece"],
        default="sentencepiece",
        help="sentencepiece: English ALBERT spiece.model; wordpiece: Chinese BERT vocab.txt",
    )
    train.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        help="vocabulary size, at least 10 (default: 30000 for sentencepiece, 21128 for wordpiece)",
    )
    train.add_argument("--no-lowercase", action="store_true", help="keep case (ALBERT lowercases by default)")
    train.add_argument(
        "--input-sentence-size",
        type=flags.count,
        default=2_000_000,
        help="sentencepiece: lines sampled from the corpus for training (keeps memory bounded)",
    )
    train.add_argument("--seed", type=flags.seed, default=0, help="sentencepiece: seed for the line sampling")
    train.add_argument(
        "--albert-user-symbols",
        action="store_true",
        help="sentencepiece: add albert-base-v2's user symbols ( ) \" - . – £ € at ids 5-12 "
        "(transformers 5 then tokenizes text around them differently)",
    )
    train.add_argument(
        "--compat",
        choices=["original", "transformers"],
        default="original",
        help="encoding behaviour recorded in tokenizer_config.json: google-research/albert's (original, the "
        "default) or transformers'",
    )
    from albertlm.data.tables import TextColumns

    flags.add_flags(train, TextColumns)
    train.set_defaults(func=_train)

    enc = sub.add_parser("encode", help="print token ids (or pieces) as one JSON line per input line")
    enc.add_argument(
        "--tokenizer", required=True, help="directory holding spiece.model or vocab.txt, or the file"
    )
    enc.add_argument("--text", default=None, help="text to encode (default: read lines from stdin)")
    enc.add_argument("--pieces", action="store_true", help="also print the pieces")
    enc.add_argument("--no-special-tokens", action="store_true", help="leave out [CLS] and [SEP]")
    enc.add_argument(
        "--compat",
        choices=["original", "transformers"],
        help="encode as google-research/albert or as transformers (default: what the tokenizer records)",
    )
    enc.set_defaults(func=_encode)


def _train(args: argparse.Namespace) -> int:
    from albertlm.data.tables import TextColumns
    from albertlm.data.tokenizer_training import expand_inputs, train_sentencepiece, train_wordpiece
    from albertlm.errors import UserError

    vocab_size = args.vocab_size if args.vocab_size is not None else 30000 if args.kind == "sentencepiece" else 21128
    if vocab_size < 10:
        raise UserError(f"--vocab-size {vocab_size} is too small; use a few thousand or more")
    try:
        files = expand_inputs(args.input)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(f"--input: {e}") from None
    start = time.time()
    lower = not args.no_lowercase
    if args.kind == "sentencepiece":
        from albertlm.tokenizer import ALBERT_USER_SYMBOLS

        tok = train_sentencepiece(
            files,
            args.out,
            vocab_size=vocab_size,
            lowercase=lower,
            input_sentence_size=args.input_sentence_size,
            seed=args.seed,
            user_defined_symbols=ALBERT_USER_SYMBOLS if args.albert_user_symbols else (),
            progress=True,
            compat=args.compat,
            columns=flags.build(args, TextColumns),
        )
        written = Path(args.out) / "spiece.model"
    else:
        tok = train_wordpiece(files, args.out, vocab_size=vocab_size, lowercase=lower, progress=True,
                              compat=args.compat, columns=flags.build(args, TextColumns))  # fmt: skip
        written = Path(args.out) / "vocab.txt"
    short = ""
    if tok.vocab_size < vocab_size:  # WordPiece stops when no pair is left to merge: the corpus is too small
        short = (f", {vocab_size - tok.vocab_size} fewer than --vocab-size {vocab_size} asked: the text holds no more "
                 "pieces to merge (give more text for a larger vocabulary)")  # fmt: skip
    print(
        f"wrote {args.kind} vocab of {tok.vocab_size} tokens{short} (lowercase={lower}, compat={tok.compat}) from "
        f"{len(files)} files to {written} and tokenizer_config.json in {time.time() - start:.1f}s"
    )
    return 0


def _encode(args: argparse.Namespace) -> int:
    from albertlm.errors import UserError
    from albertlm.tokenizer import load_tokenizer

    if args.text is not None:
        try:
            args.text.encode("utf-8")
        except UnicodeEncodeError as e:  # Python keeps an undecodable argv byte as a lone surrogate
            bad = args.text[e.start]
            shown = f"byte 0x{ord(bad) - 0xDC00:02x}" if "\udc80" <= bad <= "\udcff" else f"{bad!r}"
            raise UserError(f"--text is not UTF-8 text ({shown} at char {e.start}); pass UTF-8 text, or the "
                            "text on stdin") from None
    tok = load_tokenizer(args.tokenizer, compat=args.compat)
    lines = iter([args.text]) if args.text is not None else _stdin_lines()
    add = not args.no_special_tokens
    # Chunks keep memory bounded on long stdin streams, yet give the C++ encoders big batches.
    while chunk := list(itertools.islice(lines, 10_000)):
        for ids in tok.encode_batch(chunk, add_special_tokens=add):
            row: dict = {"ids": ids}
            if args.pieces:
                row["pieces"] = tok.convert_ids_to_tokens(ids)
            print(json.dumps(row, ensure_ascii=False))
    return 0


def _stdin_lines():
    """stdin as UTF-8 lines, read as bytes so a bad byte is one clear error, not a crash mid-stream."""
    from albertlm.errors import UserError

    for n, raw in enumerate(sys.stdin.buffer, start=1):
        try:
            yield raw.decode("utf-8-sig" if n == 1 else "utf-8").rstrip("\r\n")
        except UnicodeDecodeError as e:
            raise UserError(f"stdin:{n}: not UTF-8 text (byte {e.start}); convert it to UTF-8") from None
