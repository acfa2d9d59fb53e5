"""The interface every albertlm tokenizer keeps, the constants its folders use, and the text helpers
the original ALBERT applies before any segmentation."""

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
    compat: str  # "original" (google-research/albert) or "transformers": see the package docstring (__init__.py)
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
        from albertlm.tokenizer import load_tokenizer  # the package imports this module: load it when called

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


def _max_length(config: dict) -> int:
    """tokenizer_config.json's model_max_length (transformers writes a huge number for "none": kept at 512)."""
    value = config.get("model_max_length")
    return int(value) if isinstance(value, int) and 0 < value <= 1 << 20 else 512


def existing_file(path: str | Path, what: str) -> Path:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; expected {what}")
    if not path.is_file():
        raise DataError(f"{path} is not a file; expected {what}")
    if not os.access(path, os.R_OK):
        raise PermissionError(f"{path} is not readable; expected {what}")
    return path
