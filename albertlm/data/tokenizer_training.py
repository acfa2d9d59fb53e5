"""Training a tokenizer from text: SentencePiece (ALBERT's English ``spiece.model``) and WordPiece (the
Chinese ``vocab.txt``), deterministic for the same input, with ALBERT's special pieces in place.

    tok = train_sentencepiece(["corpus/en"], "tok/en", vocab_size=30000)
    tok = train_wordpiece(["corpus/zh"], "tok/zh", vocab_size=21128)
"""

from __future__ import annotations

import io
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

from albertlm.data.tables import TextColumns, iter_table_lines, table_bytes, table_format
from albertlm.errors import UserError
from albertlm.files import refuse_model_dir, write_bytes_atomic
from albertlm.tokenizer import (
    SPM_FILE,
    VOCAB_FILE,
    WORDPIECE_SPECIALS,
    SentencePieceTokenizer,
    WordPieceTokenizer,
    check_compat,
    existing_file,
    preprocess_text,
)


def expand_inputs(inputs: Iterable[str | Path]) -> list[Path]:
    """Files as given; a directory means every ``*.txt`` and ``*.parquet`` inside it (sorted, for
    determinism), or, holding what ``datasets`` saved, that dataset."""
    files: list[Path] = []
    for p in map(Path, inputs):
        if table_format(p) == "datasets":
            files.append(p)
        elif p.is_dir():
            found = sorted([*p.glob("*.txt"), *p.glob("*.parquet")])
            if not found:
                raise FileNotFoundError(f"{p} holds no *.txt or *.parquet files; give text files (one sentence "
                                        "per line) or tables")  # fmt: skip
            files += found
        else:
            files.append(existing_file(p, "a text file, one sentence per line"))
    if not files:
        raise UserError("no input files given")
    return files


def _lines(files: list[Path], progress: bool, columns: TextColumns | None) -> Iterator[str]:
    from tqdm import tqdm

    with tqdm(
        total=sum(table_bytes(f) for f in files),
        unit="B",
        unit_scale=True,
        disable=not progress,
        desc="reading corpus",
    ) as bar:
        for f in files:
            if fmt := table_format(f):  # the lines a text file of the same corpus would hold
                yield from (line + "\n" for line in iter_table_lines(f, fmt, columns or TextColumns(), Counter()))
                bar.update(table_bytes(f))
                continue
            with open(f, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    bar.update(len(line.encode("utf-8")))
                    yield line


# SentencePiece splits its work by thread, and the pieces it learns depend on the split: a fixed count (its
# own default) makes a vocabulary the same on every machine, whatever its number of cores.
SPM_THREADS = 16


def _refuse_other_kind(out_dir: Path, writing: str) -> None:
    """One folder holds one tokenizer: ``load_tokenizer`` would go on using a different kind found there;
    and a model's folder keeps the tokenizer its weights were trained with."""
    refuse_model_dir(out_dir, "its tokenizer is the one its embeddings were trained with: train the new one "
                              "into another --out")
    other = VOCAB_FILE if writing == SPM_FILE else SPM_FILE
    if (out_dir / other).exists():
        raise UserError(f"{out_dir} already holds a {other} tokenizer; training a {writing} there would leave "
                        f"two (and {other} could be used); choose another --out or remove {out_dir / other}")


def _no_text(files: list[Path]) -> str:
    return f"no text in {', '.join(map(str, files))}; give UTF-8 text, one sentence per line"


def train_sentencepiece(
    inputs: list[str | Path],
    out_dir: str | Path,
    vocab_size: int = 30000,
    lowercase: bool = True,
    input_sentence_size: int = 2_000_000,
    seed: int = 0,
    character_coverage: float = 0.99995,
    user_defined_symbols: Iterable[str] = (),
    num_threads: int | None = None,
    progress: bool = False,
    compat: str = "original",
    columns: TextColumns | None = None,
) -> SentencePieceTokenizer:
    """Train a unigram ``spiece.model`` with ALBERT's settings: pad 0, unk 1, control [CLS] 2, [SEP] 3,
    [MASK] 4, no bos/eos. SentencePiece keeps a random sample of ``input_sentence_size`` lines (reservoir
    sampling over the stream) so large corpora fit in memory. Lines are fed through ``preprocess_text``
    so training sees exactly what encoding will; special strings such as WikiText's ``<unk>`` are blanked
    out so that no pieces are learned from them. The tokenizer follows ``compat`` ("original" unless
    asked otherwise: that is how ALBERT pretraining data was tokenized).

    albert-base-v2 was also trained with ``user_defined_symbols=ALBERT_USER_SYMBOLS`` (ids 5-12). That is
    opt-in: transformers 5 loads such symbols from spiece.model as added tokens and gives the text after
    each one a fresh "▁" (``u.s.`` -> ``▁u . ▁ s .``), so HF's ids would differ from SentencePiece's.
    Parquet / Arrow files and saved ``datasets`` among the inputs are read by ``columns`` (data.tables)."""
    import sentencepiece as spm

    check_compat(compat, "compat")
    files = expand_inputs(inputs)
    out_dir = Path(out_dir)
    _refuse_other_kind(out_dir, SPM_FILE)
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    specials = re.compile(r"<unk>|<pad>|\[CLS\]|\[SEP\]|\[MASK\]")
    fed = 0

    def sentences() -> Iterator[str]:
        nonlocal fed
        for line in _lines(files, progress, columns):
            if text := preprocess_text(specials.sub(" ", line), lowercase, quotes=compat == "transformers"):
                fed += 1
                yield text

    spm.set_random_generator_seed(seed)
    # The model comes back as bytes (model_writer), not under a model_prefix: SentencePiece records the prefix
    # in the file's trainer_spec, so a temporary folder's random name made two identical trainings differ.
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences(),
            model_writer=model,
            model_type="unigram",
            vocab_size=vocab_size,
            character_coverage=character_coverage,
            pad_id=0,
            unk_id=1,
            bos_id=-1,
            eos_id=-1,
            control_symbols=["[CLS]", "[SEP]", "[MASK]"],
            user_defined_symbols=list(user_defined_symbols),
            input_sentence_size=input_sentence_size,
            shuffle_input_sentence=True,
            num_threads=num_threads or SPM_THREADS,
            minloglevel=1 if progress else 2,
        )
    except RuntimeError as e:
        failure = (_no_text(files) if not fed
                   else f"SentencePiece training failed: {e} (a smaller --vocab-size or more text helps)")
    else:
        failure = None
        write_bytes_atomic(out_dir / SPM_FILE, model.getvalue())
    if failure is not None:
        if created:
            out_dir.rmdir()  # made by this call and empty again: a failed training leaves nothing behind
        raise UserError(failure)
    tok = SentencePieceTokenizer(out_dir / SPM_FILE, lowercase=lowercase, compat=compat)
    tok.save(out_dir)
    return tok


def train_wordpiece(
    inputs: list[str | Path],
    out_dir: str | Path,
    vocab_size: int = 21128,
    lowercase: bool = True,
    min_frequency: int = 2,
    unused_slots: int = 99,
    progress: bool = False,
    compat: str = "original",
    columns: TextColumns | None = None,
) -> WordPieceTokenizer:
    """Train a BERT ``vocab.txt`` with the ``tokenizers`` WordPiece trainer on BERT basic tokenization.

    Layout follows Google's BERT vocabularies (bert-base-chinese, albert_zh): [PAD] 0, [unused1..99]
    1-99, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103, then the learned tokens in the trainer's order
    (the alphabet first, so every seen character has an id). The unused slots are room for task tokens;
    ``unused_slots=0`` gives a compact [PAD] [UNK] [CLS] [SEP] [MASK] head. The trainer never drops a
    character of the alphabet, so a corpus with more characters than ``vocab_size`` gives a larger vocab.
    The tokenizer follows ``compat`` ("original" unless asked otherwise).

    Deterministic: the trainer numbers the ``##c`` pieces in hash-map order and breaks ties between equally
    frequent merges by those numbers (huggingface/tokenizers#1794), so the same corpus could give another
    vocabulary each run. A first pass collects every character seen inside a word and hands the ``##c``
    pieces to the trainer up front, in sorted order, which fixes their numbers and so every merge."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import normalizers, pre_tokenizers, trainers
    from tokenizers.models import WordPiece

    check_compat(compat, "compat")
    files = expand_inputs(inputs)
    _refuse_other_kind(Path(out_dir), VOCAB_FILE)
    head = [
        "[PAD]",
        *(f"[unused{i}]" for i in range(1, unused_slots + 1)),
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
    ]
    if vocab_size <= len(head):
        raise UserError(
            f"vocab_size={vocab_size} leaves no room beside the {len(head)} special/unused tokens"
        )
    tk = HFTokenizer(WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tk.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, lowercase=lowercase
    )
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    inner: set[str] = set()
    words = 0
    for line in _lines(files, progress, columns):
        for word, _ in tk.pre_tokenizer.pre_tokenize_str(tk.normalizer.normalize_str(line)):
            inner.update(word[1:])
            words += 1
    if not words:
        raise UserError(_no_text(files))
    continuing = [f"##{c}" for c in sorted(inner)]
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size - len(head) + len(WORDPIECE_SPECIALS),
        min_frequency=min_frequency,
        special_tokens=[*WORDPIECE_SPECIALS, *continuing],
        continuing_subword_prefix="##",
        show_progress=False,
    )
    tk.train_from_iterator(_lines(files, progress, columns), trainer=trainer)
    learned = [t for t, _ in sorted(tk.get_vocab().items(), key=lambda kv: kv[1])]
    learned = [t for t in learned if t not in WORDPIECE_SPECIALS and t not in head]
    # the trainer's layout: the alphabet, then the ##c pieces, then the merges in the order learned
    alphabet, cont = [t for t in learned if len(t) == 1], set(continuing)
    tokens = head + alphabet + continuing + [t for t in learned if len(t) > 1 and t not in cont]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / VOCAB_FILE).write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    tok = WordPieceTokenizer(out_dir / VOCAB_FILE, lowercase=lowercase, compat=compat)
    tok.save(out_dir)
    return tok
