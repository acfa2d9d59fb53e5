"""SentencePiece (English ALBERT's ``spiece.model``), in the original's or transformers' behaviour."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from albertlm.errors import DataError
from albertlm.tokenizer.base import (
    _DIGIT_COMMA,
    _START_ALLOWED,
    _START_PUNCT,
    _TOKEN_KEYS,
    SPIECE_UNDERLINE,
    SPM_FILE,
    Tokenizer,
    check_compat,
    existing_file,
    preprocess_text,
)

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
