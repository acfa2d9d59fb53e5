"""SentencePiece (English ALBERT) and WordPiece (Chinese ALBERT) behind one interface (spec section 5).

Each tokenizer follows one of two behaviours where the original ALBERT code and ``transformers`` differ,
recorded as ``"albertlm_compat"`` in ``tokenizer_config.json``:

- ``original``: google-research/albert ``tokenization.py``, what the released models saw in pretraining and
  fine-tuning: its ``preprocess_text`` (no quote normalisation), its digit-comma re-split with the "▁" it
  never strips, special-token strings in text as plain text (``<unk>`` -> ``▁ < un k >``), WordPiece words
  of up to 200 characters. Tokenizers trained by ``albertlm tokenizer train`` and converted original
  checkpoints use it; ``tests/test_original_parity.py`` checks it against fixtures made by the original.
- ``transformers``: the ids ``transformers`` gives (``AlbertTokenizer`` for ``spiece.model``,
  ``BertTokenizer`` for ``vocab.txt``): special strings in text map to their ids, `````` and ``''`` become
  ``"``, no digit-comma split, 100-character WordPiece words. A directory without the key (any HF
  checkpoint) loads this way; ``tests/test_tokenizer.py`` holds the parity tests.

    tok = load_tokenizer("path/to/spiece.model")        # or a directory holding spiece.model / vocab.txt
    ids, types = tok.encode_pair("first segment", "second segment", max_length=128)
    rows = tok.encode_batch(lines)                        # the fast path for whole corpora
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from albertlm.errors import DataError, UserError

SPIECE_UNDERLINE = "▁"
SPM_FILE, VOCAB_FILE, CONFIG_FILE = "spiece.model", "vocab.txt", "tokenizer_config.json"
# Original ALBERT spm_train flags (README of google-research/albert) minus --user_defined_symbols: see
# train_sentencepiece for why those are opt-in.
ALBERT_USER_SYMBOLS = ("(", ")", '"', "-", ".", "–", "£", "€")
# Single punctuation pieces count as word starts in the original whole-word masking (_is_start_piece).
_TOKEN_KEYS = ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token")
COMPAT_KEY = "albertlm_compat"
COMPAT_MODES = ("original", "transformers")
# create_pretraining_data.py line 395: the punctuation pieces of _is_start_piece_sp (no apostrophe: the
# Python literal is single-quoted). Its € and £ entries are bytes (line 396-397) and never match a str piece.
_START_PUNCT = frozenset('!"#$%&"()*+,-./:;?@[\\]^_`{|}~')
_START_ALLOWED = _START_PUNCT | frozenset("abcdefghijklmnopqrstuvwxyz")
_DIGIT_COMMA = re.compile(r"\d,")


def check_compat(compat: str, where: str = "albertlm_compat") -> str:
    if compat not in COMPAT_MODES:
        raise UserError(f"{where}: {compat!r} is not a tokenizer behaviour; use one of {', '.join(COMPAT_MODES)}")
    return compat


class Tokenizer(ABC):
    """The interface the data pipeline and tasks use; subclasses implement the ``_``-prefixed hooks."""

    kind: str
    vocab_size: int
    pad_id: int
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int
    lowercase: bool
    compat: str  # "original" (google-research/albert) or "transformers": see the module docstring
    file: Path  # the vocabulary file this tokenizer was loaded from
    file_name: str  # the name HF expects it under: spiece.model or vocab.txt

    # --- hooks -------------------------------------------------------------------------------------
    @abstractmethod
    def encode_batch(self, texts: list[str], add_special_tokens: bool = False) -> list[list[int]]:
        ...

    @abstractmethod
    def convert_ids_to_tokens(self, ids: Iterable[int] | int) -> list[str]:
        ...

    @abstractmethod
    def convert_tokens_to_ids(self, tokens: Iterable[str] | str) -> list[int]:
        ...

    @abstractmethod
    def word_start_mask(self) -> np.ndarray:
        ...

    @abstractmethod
    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        ...

    @abstractmethod
    def _hf_config(self) -> dict:
        ...

    @abstractmethod
    def with_compat(self, compat: str) -> Tokenizer:
        """The same vocabulary and settings, following ``compat`` ("original" or "transformers")."""

    def save(self, directory: str | Path) -> None:
        """The vocabulary file plus a ``tokenizer_config.json`` that ``AutoTokenizer`` understands."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / self.file_name
        if self.file.resolve() != target.resolve():
            shutil.copyfile(self.file, target)
        config = {**self._hf_config(), "model_max_length": 512, COMPAT_KEY: self.compat}
        text = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
        (directory / CONFIG_FILE).write_text(text, encoding="utf-8")

    # --- shared behaviour --------------------------------------------------------------------------
    @property
    def special_ids(self) -> frozenset[int]:
        return frozenset((self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id))

    def _with_specials(self, ids: list[int]) -> list[int]:
        return [self.cls_id, *ids, self.sep_id]

    def tokenize(self, text: str) -> list[str]:
        return self.convert_ids_to_tokens(self.encode(text, add_special_tokens=False))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.encode_batch([text], add_special_tokens=add_special_tokens)[0]

    def encode_pair(self, a: str, b: str, max_length: int | None = None) -> tuple[list[int], list[int]]:
        """``[CLS] A [SEP] B [SEP]`` with token types 0 for ``[CLS] A [SEP]`` and 1 for ``B [SEP]``."""
        ids_a, ids_b = self.encode_batch([a, b])
        return self.pair_ids(ids_a, ids_b, max_length)

    def pair_ids(
        self, ids_a: list[int], ids_b: list[int], max_length: int | None
    ) -> tuple[list[int], list[int]]:
        if max_length is not None:
            ids_a, ids_b = truncate_pair(ids_a, ids_b, max_length - 3)
        ids = [self.cls_id, *ids_a, self.sep_id, *ids_b, self.sep_id]
        return ids, [0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1)

    def batch_encode(
        self,
        texts: list[str],
        pairs: list[str] | None = None,
        max_length: int | None = None,
        padding: bool = True,
        return_tensors: str | None = None,
    ) -> dict:
        """``input_ids``, ``token_type_ids``, ``attention_mask``, padded to the longest row with pad_id."""
        if pairs is not None and len(pairs) != len(texts):
            raise UserError(
                f"batch_encode: {len(texts)} texts but {len(pairs)} pairs; give one pair per text"
            )
        if max_length is not None and max_length < (3 if pairs is not None else 2):
            raise UserError(f"batch_encode: max_length={max_length} leaves no room for the special tokens")
        first = self.encode_batch(texts)
        if pairs is None:
            rows = [
                self._with_specials(ids if max_length is None else ids[: max_length - 2]) for ids in first
            ]
            types = [[0] * len(r) for r in rows]
        else:
            both = [
                self.pair_ids(a, b, max_length) for a, b in zip(first, self.encode_batch(pairs), strict=True)
            ]
            rows, types = [r for r, _ in both], [t for _, t in both]
        masks = [[1] * len(r) for r in rows]
        if padding or return_tensors is not None:  # tensors need rectangular rows
            width = max((len(r) for r in rows), default=0)
            rows = [r + [self.pad_id] * (width - len(r)) for r in rows]
            types = [t + [0] * (width - len(t)) for t in types]
            masks = [m + [0] * (width - len(m)) for m in masks]
        out = {"input_ids": rows, "token_type_ids": types, "attention_mask": masks}
        if return_tensors == "pt":
            import torch

            return {k: torch.tensor(v, dtype=torch.long) for k, v in out.items()}
        if return_tensors is not None:
            raise UserError(f"batch_encode: return_tensors={return_tensors!r}; use None or 'pt'")
        return out

    def encode_words(self, words: list[str]) -> tuple[list[int], list[bool]]:
        """Ids of pre-segmented words (e.g. jieba output) and a flag per id: True on each word's first
        token. Chinese whole-word masking masks a word's tokens together; WordPiece alone cannot see
        word boundaries inside a run of CJK characters."""
        ids: list[int] = []
        starts: list[bool] = []
        for word_ids in self.encode_batch(list(words)):
            ids.extend(word_ids)
            starts.extend([True] + [False] * (len(word_ids) - 1) if word_ids else [])
        return ids, starts

    @classmethod
    def load(cls, directory: str | Path) -> Tokenizer:
        return load_tokenizer(directory)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size}, lowercase={self.lowercase}, compat={self.compat})"


def truncate_pair(a: list[int], b: list[int], max_tokens: int) -> tuple[list[int], list[int]]:
    """Original BERT/ALBERT ``_truncate_seq_pair``: drop from the end of the longer side (B on ties)."""
    a, b = list(a), list(b)
    while len(a) + len(b) > max(max_tokens, 0):
        (a if len(a) > len(b) else b).pop()
    return a, b


# --- SentencePiece ---------------------------------------------------------------------------------


@functools.cache
def _combining_marks() -> re.Pattern:
    # Original ALBERT drops chars with unicodedata.combining(c) != 0; one regex class does it at C speed.
    # (every code point with a nonzero combining class lies in U+0300..U+1EFFF)
    marks = [chr(c) for c in range(0x300, 0x1F000) if unicodedata.combining(chr(c))]
    return re.compile("[" + "".join(re.escape(m) for m in marks) + "]")


def preprocess_text(text: str, lowercase: bool = True, keep_accents: bool = False, quotes: bool = True) -> str:
    """ALBERT's ``tokenization.preprocess_text``: collapse whitespace, NFKD and drop combining marks
    (accents), lowercase. ``quotes`` also turns ``` `` ``` and ``''`` into ``"`` as transformers (and XLNet)
    do; the original ALBERT does not (tokenization.py lines 33-50). Used identically for training and encoding."""
    text = " ".join(text.split())
    if quotes:
        text = text.replace("``", '"').replace("''", '"')
    if not keep_accents and not text.isascii():  # NFKD is the identity on ASCII: skip the work
        text = _combining_marks().sub("", unicodedata.normalize("NFKD", text))
    return text.lower() if lowercase else text


BATCH_ENCODE_MIN = 512  # texts from which SentencePiece's threaded batch encoder beats one call per text


class SentencePieceTokenizer(Tokenizer):
    """ALBERT's ``spiece.model``: ALBERT preprocessing, the unigram model and, under ``compat="original"``,
    the original's digit-comma re-split (see ``_digit_comma_original``)."""

    kind = "sentencepiece"
    file_name = SPM_FILE

    def __init__(
        self,
        model_file: str | Path,
        lowercase: bool = True,
        keep_accents: bool = False,
        compat: str = "transformers",
    ):
        import sentencepiece as spm

        path = existing_file(model_file, "a SentencePiece model (spiece.model)")
        self.sp = spm.SentencePieceProcessor()
        try:
            self.sp.load(str(path))
        except (OSError, RuntimeError) as e:
            raise DataError(
                f"{path} is not a valid SentencePiece model ({e}); pass an ALBERT spiece.model or train one "
                "with `albertlm tokenizer train --kind sentencepiece`"
            ) from None
        self.file, self.lowercase, self.keep_accents = path, lowercase, keep_accents
        self.compat = check_compat(compat)
        self.vocab_size = self.sp.get_piece_size()
        self.unk_id = self.sp.unk_id()
        ids = {p: self.sp.piece_to_id(p) for p in ("<pad>", "[CLS]", "[SEP]", "[MASK]")}
        missing = [p for p, i in ids.items() if i == self.unk_id]
        if missing:
            raise DataError(
                f"{path} lacks the ALBERT special pieces {missing}: ALBERT needs <pad> [CLS] [SEP] [MASK] "
                "(train with `albertlm tokenizer train --kind sentencepiece`)"
            )
        self.pad_id, self.cls_id, self.sep_id, self.mask_id = (
            ids[p] for p in ("<pad>", "[CLS]", "[SEP]", "[MASK]")
        )
        self._special_pieces = {self.sp.id_to_piece(i): i for i in self.special_ids}
        # Longest first so that no special string shadows a longer one.
        alts = sorted(self._special_pieces, key=len, reverse=True)
        self._special_re = re.compile("(" + "|".join(re.escape(p) for p in alts) + ")")
        self._threads = max(1, min(8, os.cpu_count() or 1))

    def with_compat(self, compat: str) -> SentencePieceTokenizer:
        return SentencePieceTokenizer(self.file, self.lowercase, self.keep_accents, compat)

    def _preprocess(self, text: str) -> str:
        return preprocess_text(text, self.lowercase, self.keep_accents, quotes=self.compat == "transformers")

    def _digit_comma_original(self, text: str) -> list[int]:
        """The original ``encode_pieces`` (tokenization.py lines 63-77): a piece ending in ``<digit>,`` is
        re-encoded without its "▁" and the comma split off. The strip of the re-encoded pieces' leading "▁"
        (line 69) never runs: it compares str pieces with ``SPIECE_UNDERLINE``, which line 30 makes bytes.
        So the released models saw ``▁2 ,`` after ``▁18 7``, not ``2 ,``; we keep that."""
        out: list[int] = []
        for piece in self.sp.encode(text, out_type=str):
            if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
                cur = self.sp.encode(piece[:-1].replace(SPIECE_UNDERLINE, ""), out_type=int)
                out.extend([*cur, self.sp.piece_to_id(",")])
            else:
                out.append(self.sp.piece_to_id(piece))
        return out

    def _encode_clean(self, texts: list[str]) -> list[list[int]]:
        """Preprocessed texts -> ids; the C++ batch encoder does the bulk of a large list. Its thread pool costs
        ~1-4 ms a call whatever the size (measured: one short text 3.5 ms in a list, 0.01 ms alone; 32 texts
        1.0 ms vs 0.1-0.4 ms one by one), so smaller lists go one text at a time: a served or predicted
        batch pays microseconds, not milliseconds."""
        if len(texts) < BATCH_ENCODE_MIN:
            rows = [self.sp.encode(t, out_type=int) for t in texts]
        else:
            rows = self.sp.encode(texts, out_type=int, num_threads=self._threads)
        if self.compat == "original":
            for i, t in enumerate(texts):
                # \d after NFKD covers every digit str.isdigit() sees in a piece
                if _DIGIT_COMMA.search(t):
                    rows[i] = self._digit_comma_original(t)
        return rows

    def encode_batch(self, texts: list[str], add_special_tokens: bool = False) -> list[list[int]]:
        # transformers: texts holding a special string are split around it and each chunk is encoded on
        # its own (each gets SentencePiece's dummy "▁" prefix), as HF's added-token matching does. The
        # original has no such matching: "[MASK]" in text is plain text.
        plain, plain_idx, mixed = [], [], []
        for i, t in enumerate(texts):
            if self.compat == "transformers" and self._special_re.search(t):
                mixed.append(i)
            else:
                plain.append(self._preprocess(t))
                plain_idx.append(i)
        out: list[list[int]] = [[] for _ in texts]
        for i, ids in zip(plain_idx, self._encode_clean(plain), strict=True):
            out[i] = ids
        for i in mixed:
            for n, chunk in enumerate(self._special_re.split(texts[i])):
                if n % 2:
                    out[i].append(self._special_pieces[chunk])
                elif chunk := self._preprocess(chunk):
                    out[i].extend(self._encode_clean([chunk])[0])
        return [self._with_specials(r) for r in out] if add_special_tokens else out

    def convert_ids_to_tokens(self, ids: Iterable[int] | int) -> list[str]:
        ids = [ids] if isinstance(ids, int) else list(ids)
        return [self.sp.id_to_piece(int(i)) for i in ids]

    def convert_tokens_to_ids(self, tokens: Iterable[str] | str) -> list[int]:
        tokens = [tokens] if isinstance(tokens, str) else tokens
        return [self.sp.piece_to_id(t) for t in tokens]

    def word_start_mask(self) -> np.ndarray:
        # create_pretraining_data.py _is_start_piece_sp (lines 393-407): a piece starts a word when it has
        # the "▁" or "<" prefix, is one punctuation character, or holds any character outside a-z and that
        # punctuation (digits, apostrophes, accents, CJK): "▁18" "7" are two words there.
        pieces = [self.sp.id_to_piece(i) for i in range(self.vocab_size)]
        mask = np.array([_is_start_piece_sp(p) for p in pieces], dtype=bool)
        mask[list(self.special_ids)] = True
        return mask

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        words: list[str] = []
        run: list[int] = []
        for i in map(int, ids):
            if i in self.special_ids:
                if skip_special_tokens:
                    continue
                words += [self.sp.decode(run), self.sp.id_to_piece(i)] if run else [self.sp.id_to_piece(i)]
                run = []
            else:
                run.append(i)
        if run:
            words.append(self.sp.decode(run))
        return " ".join(w for w in words if w)

    def _hf_config(self) -> dict:
        return {
            "tokenizer_class": "AlbertTokenizer",
            "do_lower_case": self.lowercase,
            "keep_accents": self.keep_accents,
            "remove_space": True,
            **dict(zip(_TOKEN_KEYS, ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"), strict=True)),
            "bos_token": "[CLS]",
            "eos_token": "[SEP]",
        }


def _is_start_piece_sp(piece: str) -> bool:
    return (
        piece.startswith((SPIECE_UNDERLINE, "<"))
        or piece in _START_PUNCT
        or not all(c.lower() in _START_ALLOWED for c in piece)
    )


# --- WordPiece -------------------------------------------------------------------------------------

WORDPIECE_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_CJK = "\u3000-\u9fff\uf900-\ufaff\uff00-\uffef"  # CJK symbols, ideographs, full-width forms
_CJK_SPACE = re.compile(rf"(?<=[{_CJK}]) (?=\S)|(?<=\S) (?=[{_CJK}])")


class WordPieceTokenizer(Tokenizer):
    """BERT's ``vocab.txt``: basic tokenization (clean text, CJK characters apart, punctuation split,
    optional lowercase and accent stripping) then greedy longest-match ``##`` pieces, words over 200
    (original) or 100 (transformers) characters -> ``[UNK]``. Runs on the ``tokenizers``
    BertNormalizer/BertPreTokenizer/WordPiece, the same backend HF's BertTokenizer uses."""

    kind = "wordpiece"
    file_name = VOCAB_FILE

    def __init__(
        self,
        vocab_file: str | Path,
        lowercase: bool = True,
        strip_accents: bool | None = None,
        compat: str = "transformers",
    ):
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import normalizers, pre_tokenizers
        from tokenizers.models import WordPiece

        path = existing_file(vocab_file, "a BERT vocab.txt")
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            raise DataError(f"{path} is not a UTF-8 vocab.txt (one token per line)") from None
        lines = [t.rstrip("\r") for t in lines]
        self.vocab = {t: i for i, t in enumerate(lines)}  # HF's load_vocab: the last duplicate wins
        missing = [t for t in WORDPIECE_SPECIALS if t not in self.vocab]
        if missing:
            raise DataError(
                f"{path} lacks the special tokens {missing}: a BERT vocab.txt has one token per line, with "
                "[PAD] [UNK] [CLS] [SEP] [MASK] (train one with `albertlm tokenizer train --kind wordpiece`)"
            )
        self.file, self.lowercase, self.strip_accents = path, lowercase, strip_accents
        self.compat = check_compat(compat)
        self.inv_vocab = lines
        self.vocab_size = len(lines)
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            self.vocab[t] for t in WORDPIECE_SPECIALS
        )
        # tokenization.py line 368: the original WordpieceTokenizer takes words of up to 200 characters
        max_chars = 200 if self.compat == "original" else 100
        self.tk = HFTokenizer(WordPiece(self.vocab, unk_token="[UNK]", max_input_chars_per_word=max_chars))
        self.tk.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=strip_accents, lowercase=lowercase
        )
        self.tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        if self.compat == "transformers":
            # Special strings in the text are kept whole, as HF's added tokens do; the original's
            # BasicTokenizer splits "[MASK]" into "[", "mask", "]" like any other text.
            self.tk.add_special_tokens(list(WORDPIECE_SPECIALS))

    def with_compat(self, compat: str) -> WordPieceTokenizer:
        return WordPieceTokenizer(self.file, self.lowercase, self.strip_accents, compat)

    def encode_batch(self, texts: list[str], add_special_tokens: bool = False) -> list[list[int]]:
        # encode_batch_fast skips the offset bookkeeping we never read (tokenizers >= 0.20)
        encode = getattr(self.tk, "encode_batch_fast", self.tk.encode_batch)
        rows = [e.ids for e in encode(list(texts), add_special_tokens=False)]
        return [self._with_specials(r) for r in rows] if add_special_tokens else rows

    def convert_ids_to_tokens(self, ids: Iterable[int] | int) -> list[str]:
        ids = [ids] if isinstance(ids, int) else list(ids)
        return [self.inv_vocab[int(i)] for i in ids]

    def convert_tokens_to_ids(self, tokens: Iterable[str] | str) -> list[int]:
        tokens = [tokens] if isinstance(tokens, str) else tokens
        return [self.vocab.get(t, self.unk_id) for t in tokens]

    def word_start_mask(self) -> np.ndarray:
        mask = np.array([not t.startswith("##") for t in self.inv_vocab], dtype=bool)
        mask[list(self.special_ids)] = True
        return mask

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        toks = [
            t
            for i, t in zip(ids, self.convert_ids_to_tokens(ids), strict=True)
            if not (skip_special_tokens and i in self.special_ids)
        ]
        # HF joins with spaces and glues "##" pieces; we also drop the space next to a CJK character, as
        # Chinese is written without spaces (ids are unaffected: decode is for reading only).
        return _CJK_SPACE.sub("", " ".join(toks).replace(" ##", ""))

    def _hf_config(self) -> dict:
        return {
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": self.lowercase,
            "strip_accents": self.strip_accents,
            "tokenize_chinese_chars": True,
            **dict(zip(_TOKEN_KEYS, WORDPIECE_SPECIALS, strict=True)),
        }


# --- loading ---------------------------------------------------------------------------------------


def existing_file(path: str | Path, what: str) -> Path:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; expected {what}")
    if not path.is_file():
        raise DataError(f"{path} is not a file; expected {what}")
    if not os.access(path, os.R_OK):
        raise PermissionError(f"{path} is not readable; expected {what}")
    return path


def load_tokenizer(path: str | Path, compat: str | None = None) -> Tokenizer:
    """A directory holding ``spiece.model`` or ``vocab.txt`` (plus an optional HF ``tokenizer_config.json``
    for ``do_lower_case`` etc.), or the model/vocab file itself. ``compat`` overrides the behaviour the
    config records under ``albertlm_compat`` (``transformers`` when it records none, as HF directories)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist; give a directory holding {SPM_FILE} or {VOCAB_FILE}, or the file"
        )
    directory = path if path.is_dir() else path.parent
    config: dict = {}
    if (directory / CONFIG_FILE).is_file():
        try:
            config = json.loads((directory / CONFIG_FILE).read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DataError(f"{directory / CONFIG_FILE} is not valid JSON ({e}); fix or delete it") from None
    lower = bool(config.get("do_lower_case", True))
    if compat is None:
        compat = check_compat(config.get(COMPAT_KEY, "transformers"), f"{directory / CONFIG_FILE} {COMPAT_KEY}")
    else:
        check_compat(compat, "compat")
    if path.is_dir():
        if (path / SPM_FILE).is_file():
            path = path / SPM_FILE
        elif (path / VOCAB_FILE).is_file():
            path = path / VOCAB_FILE
        else:
            raise FileNotFoundError(
                f"{path} holds neither {SPM_FILE} nor {VOCAB_FILE}; point at a tokenizer directory"
            )
    if path.suffix == ".model":
        return SentencePieceTokenizer(
            path, lowercase=lower, keep_accents=bool(config.get("keep_accents", False)), compat=compat
        )
    if path.suffix == ".txt":
        return WordPieceTokenizer(path, lowercase=lower, strip_accents=config.get("strip_accents"), compat=compat)
    raise DataError(f"{path}: unknown tokenizer file; expected {SPM_FILE} (*.model) or {VOCAB_FILE} (*.txt)")
