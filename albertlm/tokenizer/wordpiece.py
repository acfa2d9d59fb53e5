"""WordPiece (Chinese ALBERT's and BERT's ``vocab.txt``) on the ``tokenizers`` backend."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from albertlm.errors import DataError
from albertlm.tokenizer.base import _TOKEN_KEYS, VOCAB_FILE, Tokenizer, check_compat, existing_file

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
