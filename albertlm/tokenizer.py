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

Every saved tokenizer folder also carries a ``tokenizer.json`` (the ``tokenizers`` pipeline of this very behaviour)
and a ``tokenizer_config.json`` with ``model_max_length``, so HF's tokenizer and pipelines give albertlm's ids and
truncate where ``albertlm predict`` does; a folder holding only a ``tokenizer.json`` (transformers 5 saves no
spiece.model) loads through ``tokenizers`` (``TokenizerJson``).

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
from typing import Any

import numpy as np

from albertlm.errors import DataError, UserError

SPIECE_UNDERLINE = "▁"
SPM_FILE, VOCAB_FILE, CONFIG_FILE = "spiece.model", "vocab.txt", "tokenizer_config.json"
JSON_FILE = "tokenizer.json"  # the `tokenizers` pipeline, what HF's fast tokenizers load
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
    model_max_length: int = 512  # tokenizer_config.json's: where HF's pipelines truncate

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

    @abstractmethod
    def tokenizer_json(self) -> str:
        """This tokenizer as a ``tokenizers`` pipeline (tokenizer.json): the same ids for the same text."""

    def browser_json(self) -> tuple[str, bool]:
        """(the tokenizer.json that tokenizers.js, the browser's tokenizer, runs to give this tokenizer's ids;
        whether the page must re-split pieces ending in <digit>, as the original does). The pipeline of
        ``tokenizer_json`` unless a subclass needs another."""
        return self.tokenizer_json(), False

    def save(self, directory: str | Path, model_max_length: int | None = None) -> None:
        """The vocabulary file, ``tokenizer.json`` and a ``tokenizer_config.json`` that ``AutoTokenizer`` reads:
        with ``model_max_length`` (default: the one loaded, else 512) HF's pipelines truncate where the model's
        ``max_seq_length`` does. The original behaviour's config names no ALBERT / BERT class: transformers'
        classes rebuild their own normalizer (AlbertTokenizer turns `` and '' into "), so HF loads our
        tokenizer.json as it is (PreTrainedTokenizerFast) and gives our ids."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / self.file_name
        if self.file.resolve() != target.resolve():
            shutil.copyfile(self.file, target)
        if self.file_name != JSON_FILE:
            (directory / JSON_FILE).write_text(self.tokenizer_json(), encoding="utf-8")
        config = {**self._hf_config(), "model_max_length": int(model_max_length or self.model_max_length),
                  "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],  # the segment ids too
                  COMPAT_KEY: self.compat}  # fmt: skip
        if self.compat == "original":
            config["tokenizer_class"] = "PreTrainedTokenizerFast"
        text = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
        (directory / CONFIG_FILE).write_text(text, encoding="utf-8")

    def _template(self) -> Any:
        """[CLS] A [SEP] (B [SEP]), token types 0 then 1: what ``pair_ids`` builds."""
        from tokenizers import processors

        cls, sep = self.convert_ids_to_tokens([self.cls_id, self.sep_id])
        return processors.TemplateProcessing(single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
                                             special_tokens=[(cls, self.cls_id), (sep, self.sep_id)])  # fmt: skip

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


NEVER_MATCHED = -1e9  # a unigram score no segmentation takes while any other exists
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

    def browser_json(self) -> tuple[str, bool]:
        """Under ``original``, the pipeline with SentencePiece's own scores, and with its control pieces (<pad>,
        <unk>, [CLS], ...) never matched in text, as SentencePiece never matches them: the page then re-splits
        <digit>, pieces as ``_digit_comma_original`` does, exactly (a score stands for that rule only roughly)."""
        if self.compat != "original":
            return self.tokenizer_json(), False
        return self.tokenizer_json(browser=True), True

    def tokenizer_json(self, browser: bool = False) -> str:
        """HF's ALBERT pipeline (quotes, NFKD and accents, lowercase, SentencePiece's own map, Metaspace, Unigram)
        over this model's pieces and scores; under ``original``, no quote rule, and pieces ending in <digit>,
        scored down by 100 as transformers' converter does, which stands for the original's digit-comma re-split
        (``browser``: the exact scores and no special-token matching, see ``browser_json``)."""
        from tokenizers import Regex, decoders, normalizers, pre_tokenizers
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers.models import Unigram

        original = self.compat == "original"
        vocab = []
        for i in range(self.vocab_size):
            piece, score = self.sp.id_to_piece(i), self.sp.get_score(i)
            if browser:
                score = NEVER_MATCHED if self.sp.is_control(i) or self.sp.is_unknown(i) else score
            elif original and _DIGIT_COMMA.fullmatch(piece[-2:]):
                score -= 100
            vocab.append((piece, score))
        tk = HFTokenizer(Unigram(vocab, unk_id=self.unk_id, byte_fallback=False))
        steps = [] if original else [normalizers.Replace("``", '"'), normalizers.Replace("''", '"')]
        if not self.keep_accents:
            steps += [normalizers.NFKD(), normalizers.StripAccents()]
        if self.lowercase:
            steps.append(normalizers.Lowercase())
        if charsmap := _spm_charsmap(self.file):
            steps.append(normalizers.Precompiled(charsmap))
        steps.append(normalizers.Replace(Regex(" {2,}"), " "))
        tk.normalizer = normalizers.Sequence(steps)
        tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                    pre_tokenizers.Metaspace(replacement=SPIECE_UNDERLINE)])
        tk.decoder = decoders.Metaspace(replacement=SPIECE_UNDERLINE)
        tk.post_processor = self._template()
        if not browser:
            tk.add_special_tokens(self.convert_ids_to_tokens(sorted(self.special_ids)))
        return tk.to_str(pretty=True)

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


def _spm_charsmap(path: Path) -> bytes:
    """The SentencePiece model's precompiled normalization map (ModelProto field 3, NormalizerSpec field 2), read
    from the protobuf wire format directly: no protobuf package needed."""

    def varint(buf: bytes, i: int) -> tuple[int, int]:
        shift = value = 0
        while True:
            b = buf[i]
            value |= (b & 0x7F) << shift
            i, shift = i + 1, shift + 7
            if b < 0x80:
                return value, i

    def fields(buf: bytes) -> Iterable[tuple[int, bytes | None]]:
        i = 0
        while i < len(buf):
            key, i = varint(buf, i)
            wire = key & 7
            if wire == 0:
                i = varint(buf, i)[1]
                yield key >> 3, None
            elif wire == 2:
                n, i = varint(buf, i)
                yield key >> 3, buf[i : i + n]
                i += n
            else:
                i += 8 if wire == 1 else 4
                yield key >> 3, None

    for number, value in fields(Path(path).read_bytes()):
        if number == 3 and value is not None:
            return next((v for n, v in fields(value) if n == 2 and v is not None), b"")
    return b""


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

    def browser_json(self) -> tuple[str, bool]:
        """The pipeline as it runs here: under ``original`` without the special tokens HF's added-token matching
        would find in text (the original's BasicTokenizer splits "[MASK]" like any other text)."""
        return self.tokenizer_json(browser=True), False

    def tokenizer_json(self, browser: bool = False) -> str:
        """The very pipeline this tokenizer runs on, with BERT's template and decoder (``browser``: see
        ``browser_json``)."""
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders

        tk = HFTokenizer.from_str(self.tk.to_str())
        tk.post_processor = self._template()
        tk.decoder = decoders.WordPiece(prefix="##")
        if not (browser and self.compat == "original"):
            tk.add_special_tokens(list(WORDPIECE_SPECIALS))
        return tk.to_str(pretty=True)

    def _hf_config(self) -> dict:
        return {
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": self.lowercase,
            "strip_accents": self.strip_accents,
            "tokenize_chinese_chars": True,
            **dict(zip(_TOKEN_KEYS, WORDPIECE_SPECIALS, strict=True)),
        }


# --- tokenizer.json alone ----------------------------------------------------------------------------

_SPECIAL_DEFAULTS = {"Unigram": ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"), "WordPiece": WORDPIECE_SPECIALS}


class TokenizerJson(Tokenizer):
    """A folder with only HF's ``tokenizer.json`` (transformers 5 writes no spiece.model): its ``tokenizers``
    pipeline run as it is, the ids HF gives. The special tokens are the config's
    (``cls_token``...), else ALBERT's or BERT's by the model type (Unigram / WordPiece)."""

    file_name = JSON_FILE
    compat = "transformers"

    def __init__(self, path: str | Path, config: dict | None = None):
        from tokenizers import Tokenizer as HFTokenizer

        path = existing_file(path, "a tokenizer.json")
        config = config or {}
        try:
            self.tk = HFTokenizer.from_file(str(path))
            model = json.loads(path.read_text(encoding="utf-8")).get("model", {}).get("type")
        except Exception as e:  # tokenizers raises its own Exception for a malformed pipeline
            raise DataError(f"{path} is not a tokenizers pipeline ({str(e)[:200]}); save the tokenizer again") from None
        if model not in _SPECIAL_DEFAULTS:
            raise DataError(f"{path}: a {model} tokenizer; ALBERT uses a Unigram (SentencePiece) or WordPiece one")
        self.file, self.kind = path, "sentencepiece" if model == "Unigram" else "wordpiece"
        self.lowercase = bool(config.get("do_lower_case", True))
        self.model_max_length = _max_length(config)
        self.vocab_size = self.tk.get_vocab_size(with_added_tokens=True)
        ids = []
        for key, default in zip(_TOKEN_KEYS, _SPECIAL_DEFAULTS[model], strict=True):
            token = config.get(key) or default
            token = token.get("content", default) if isinstance(token, dict) else str(token)
            if self.tk.token_to_id(token) is None:
                raise DataError(f"{path}: the {key} {token!r} is not in the vocabulary; fix {CONFIG_FILE}")
            ids.append(self.tk.token_to_id(token))
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = ids
        self._config = config

    def with_compat(self, compat: str) -> TokenizerJson:
        """The pipeline is run as it is: ``compat`` only records the behaviour it was written for (an albertlm
        folder's tokenizer.json encodes its own, as far as a pipeline can; see ``Tokenizer.save``)."""
        self.compat = check_compat(compat)
        return self

    def encode_batch(self, texts: list[str], add_special_tokens: bool = False) -> list[list[int]]:
        rows = [e.ids for e in self.tk.encode_batch(list(texts), add_special_tokens=False)]
        return [self._with_specials(r) for r in rows] if add_special_tokens else rows

    def convert_ids_to_tokens(self, ids: Iterable[int] | int) -> list[str]:
        ids = [ids] if isinstance(ids, int) else list(ids)
        return [self.tk.id_to_token(int(i)) for i in ids]

    def convert_tokens_to_ids(self, tokens: Iterable[str] | str) -> list[int]:
        tokens = [tokens] if isinstance(tokens, str) else tokens
        return [self.tk.token_to_id(t) if self.tk.token_to_id(t) is not None else self.unk_id for t in tokens]

    def word_start_mask(self) -> np.ndarray:
        pieces = self.convert_ids_to_tokens(range(self.vocab_size))
        starts = _is_start_piece_sp if self.kind == "sentencepiece" else (lambda p: not p.startswith("##"))
        mask = np.array([starts(p) for p in pieces], dtype=bool)
        mask[list(self.special_ids)] = True
        return mask

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.tk.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def tokenizer_json(self) -> str:
        return self.tk.to_str(pretty=True)

    def _hf_config(self) -> dict:
        keep = {k: v for k, v in self._config.items() if k not in ("model_max_length", COMPAT_KEY)}
        return {"tokenizer_class": "PreTrainedTokenizerFast", **keep,
                **dict(zip(_TOKEN_KEYS, self.convert_ids_to_tokens([self.pad_id, self.unk_id, self.cls_id,
                                                                     self.sep_id, self.mask_id]), strict=True))}


def _max_length(config: dict) -> int:
    """tokenizer_config.json's model_max_length (transformers writes a huge number for "none": kept at 512)."""
    value = config.get("model_max_length")
    return int(value) if isinstance(value, int) and 0 < value <= 1 << 20 else 512


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
        found = next((path / f for f in (SPM_FILE, VOCAB_FILE, JSON_FILE) if (path / f).is_file()), None)
        if found is None:
            raise FileNotFoundError(
                f"{path} holds neither {SPM_FILE}, {VOCAB_FILE} nor {JSON_FILE}; point at a tokenizer directory"
            )
        path = found
    if path.suffix == ".model":
        tok: Tokenizer = SentencePieceTokenizer(
            path, lowercase=lower, keep_accents=bool(config.get("keep_accents", False)), compat=compat
        )
    elif path.suffix == ".txt":
        tok = WordPieceTokenizer(path, lowercase=lower, strip_accents=config.get("strip_accents"), compat=compat)
    elif path.suffix == ".json":
        tok = TokenizerJson(path, config).with_compat(compat)
    else:
        raise DataError(f"{path}: unknown tokenizer file; expected {SPM_FILE} (*.model), {VOCAB_FILE} (*.txt) or "
                        f"{JSON_FILE}")  # fmt: skip
    tok.model_max_length = _max_length(config)
    return tok
