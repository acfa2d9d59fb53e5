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

The interface and the text helpers are in ``base.py``, one file per kind beside it (``spm.py``,
``wordpiece.py``, ``fast.py`` for a lone ``tokenizer.json``); this module picks the kind a folder holds.
"""

from __future__ import annotations

import json
from pathlib import Path

from albertlm.errors import DataError
from albertlm.tokenizer.base import (  # noqa: F401  the package's public names
    ALBERT_USER_SYMBOLS,
    COMPAT_KEY,
    COMPAT_MODES,
    CONFIG_FILE,
    JSON_FILE,
    SPIECE_UNDERLINE,
    SPM_FILE,
    VOCAB_FILE,
    Tokenizer,
    _max_length,
    check_compat,
    existing_file,
    preprocess_text,
    truncate_pair,
)
from albertlm.tokenizer.fast import TokenizerJson
from albertlm.tokenizer.spm import SentencePieceTokenizer
from albertlm.tokenizer.wordpiece import WORDPIECE_SPECIALS, WordPieceTokenizer  # noqa: F401


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
