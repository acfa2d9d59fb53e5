"""TinyBERT's data augmentation for distillation: more sentences for the teacher to label, so a small task
set teaches more (Jiao et al. 2020, section 3.2 and Algorithm 1).

Each sentence is cut into words (whitespace-separated runs; every CJK character is a word, as WordPiece's
basic tokenizer does), and each word the teacher's vocab holds as one whole token is replaced, with
probability ``p`` (TinyBERT's 0.4), by one of its ``K`` (TinyBERT's 15) nearest neighbours: the tokens
of the same script whose teacher word embeddings have the highest cosine with its own. TinyBERT takes a
masked LM's predictions for such words and GloVe neighbours for the others; a teacher fine-tuned on the
task has no MLM head left (all-MiniLM-L6-v2 never had one), and its own embedding space replaces GloVe, so
nothing else is downloaded. Words of several pieces stay as they are.

The augmented copies keep their example's gold label (the soft loss learns the teacher's answer on them;
the gold one weighs only with ``--hard-weight``). They are drawn from ``seed`` and cached in
``OUT/augment/<key>.jsonl`` (the key hashes the teacher, the training file, its examples and the settings),
so a rerun or ``--resume`` reads the same sentences instead of drawing them again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from albertlm.errors import UserError
from albertlm.files import write_text_atomic
from albertlm.tasks.examples import TextExample

_log = logging.getLogger(__name__)

WORDS = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]|[^\s\u3400-\u9fff\uf900-\ufaff]+|\s+")
SCRIPTS = {"latin": re.compile(r"^[a-z]+$"), "cjk": re.compile(r"^[\u3400-\u9fff\uf900-\ufaff]$")}


def _script(token: str) -> str | None:
    return next((name for name, rule in SCRIPTS.items() if rule.match(token)), None)


class Neighbours:
    """The K nearest whole-word tokens of each token, by cosine in the teacher's word embeddings."""

    def __init__(self, embeddings: torch.Tensor, tokenizer: Any, k: int):
        self.tok, self.k = tokenizer, k
        tokens = tokenizer.convert_ids_to_tokens(list(range(embeddings.shape[0])))
        self.scripts = [_script(t) for t in tokens]
        self.tokens = tokens
        self.unit = F.normalize(embeddings.detach().float(), dim=-1)
        self.cache: dict[int, list[int]] = {}

    def of(self, token_id: int) -> list[int]:
        if token_id not in self.cache:
            script = self.scripts[token_id]
            same = torch.tensor([s == script for s in self.scripts])
            same[token_id] = False
            cos = (self.unit @ self.unit[token_id]).masked_fill(~same, -2.0)
            top = cos.topk(min(self.k, int(same.sum()))).indices.tolist()
            self.cache[token_id] = top
        return self.cache[token_id]

    def whole_word(self, word: str) -> int | None:
        """The token id of ``word`` when the vocab holds it as one whole word of a known script."""
        ids = self.tok.encode(word, add_special_tokens=False)
        if len(ids) == 1 and self.scripts[ids[0]] is not None:
            return ids[0]
        return None


def augment_text(text: str, nb: Neighbours, rng: random.Random, p: float) -> str:
    out = []
    for word in WORDS.findall(text):
        if not word.isspace() and rng.random() < p:
            token = nb.whole_word(word)
            if token is not None and nb.of(token):
                word = nb.tokens[rng.choice(nb.of(token))]
        out.append(word)
    return "".join(out)


def augment(train: list, embeddings: torch.Tensor, tokenizer: Any, copies: int, p: float, k: int, seed: int,
            cache_dir: Path, key_parts: dict[str, Any]) -> list:  # fmt: skip
    """``copies`` augmented copies of every sentence (or pair) example of ``train``, after the originals."""
    if copies <= 0:
        return train
    if train and not isinstance(train[0], TextExample):
        raise UserError("--augment replaces words of sentences: it is for classification, pair and regression "
                        "tasks, whose labels do not point into the text")  # fmt: skip
    key = hashlib.sha256(json.dumps({**key_parts, "copies": copies, "p": p, "k": k, "seed": seed, "n": len(train),
                                     "first": [ex.text_a for ex in train[:3]]}, sort_keys=True,
                                    default=str).encode()).hexdigest()[:16]  # fmt: skip
    cache = cache_dir / f"{key}.jsonl"
    texts = _read_cache(cache, copies * len(train))
    if texts is None:
        nb, rng = Neighbours(embeddings, tokenizer, k), random.Random(seed)
        texts = [(augment_text(ex.text_a, nb, rng, p), augment_text(ex.text_b, nb, rng, p) if ex.text_b else None)
                 for _ in range(copies) for ex in train]  # fmt: skip
        cache_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(cache, "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in texts))
        _log.info("augmented %d examples x%d (p=%g, K=%d, seed %d) into %s", len(train), copies, p, k, seed, cache)
    else:
        _log.info("read the %d augmented examples cached in %s", len(texts), cache)
    extra = [replace(ex, text_a=a, text_b=b, source=f"{ex.source} (augmented {i // len(train) + 1})")
             for i, ((a, b), ex) in enumerate(zip(texts, train * copies, strict=True))]  # fmt: skip
    return train + extra


def _read_cache(path: Path, n: int) -> list[tuple[str, str | None]] | None:
    """The cached sentences, or None when there are none or they are not whole (then they are drawn again)."""
    if not path.is_file():
        return None
    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    except (json.JSONDecodeError, UnicodeDecodeError):
        _log.warning("%s is not a cache this command wrote; drawing the augmented examples again", path)
        return None
    if len(rows) != n or not all(isinstance(r, list) and len(r) == 2 and isinstance(r[0], str) for r in rows):
        _log.warning("%s holds %d rows, not the %d expected; drawing the augmented examples again", path, len(rows), n)
        return None
    return [(a, b) for a, b in rows]
