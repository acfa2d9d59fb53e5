"""A tokenizer folder holding only HF's ``tokenizer.json``, run through ``tokenizers`` as it is."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from albertlm.errors import DataError
from albertlm.tokenizer.base import (
    _TOKEN_KEYS,
    COMPAT_KEY,
    CONFIG_FILE,
    JSON_FILE,
    Tokenizer,
    _max_length,
    check_compat,
    existing_file,
)
from albertlm.tokenizer.spm import _is_start_piece_sp
from albertlm.tokenizer.wordpiece import WORDPIECE_SPECIALS

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
