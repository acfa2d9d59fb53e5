"""Examples -> model inputs: token ids per input shape (text, words, options), length-bucketed batches,
dynamic padding. Which encoder a task uses is its kind's choice (``albertlm.tasks.kinds``).

A feature is a plain dict of Python lists (``input_ids``, ``token_type_ids``, the label fields); padding
happens per batch in ``collate`` so a batch of short SST-2 sentences is as wide as its longest member.
"""

from __future__ import annotations

import random

import torch

from albertlm.tasks.choice import option_text
from albertlm.tasks.examples import ChoiceExample, DataError, TaggingExample, TextExample
from albertlm.tokenizer import Tokenizer, truncate_pair

IGNORE = -100


def encode_text(examples: list[TextExample], gold: list, tok: Tokenizer, max_len: int) -> list:
    """``[CLS] a [SEP]`` or ``[CLS] a [SEP] b [SEP]`` (the pair truncated longest-first); ``gold`` holds
    each example's label id (None: unlabeled)."""
    firsts = tok.encode_batch([ex.text_a for ex in examples])
    seconds = tok.encode_batch([ex.text_b or "" for ex in examples])
    feats = []
    for i, ex in enumerate(examples):
        if ex.text_b is not None:  # a pair (an empty second text of a pair file is still a pair)
            a, b = truncate_pair(firsts[i], seconds[i], max_len - 3)
            ids = [tok.cls_id, *a, tok.sep_id, *b, tok.sep_id]
            types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
        else:
            ids = [tok.cls_id, *firsts[i][: max_len - 2], tok.sep_id]
            types = [0] * len(ids)
        d = {"input_ids": ids, "token_type_ids": types}
        if gold[i] is not None:
            d["labels"] = gold[i]
        feats.append(d)
    return feats


def encode_tagging(examples: list[TaggingExample], tok: Tokenizer, label2id: dict, max_len: int) -> list:
    """The first sub-token of each word carries the word's tag; other sub-tokens are ignored (-100).
    ``word_index`` maps those first sub-tokens back to words (words cut off by max_len are not scored
    by the model; evaluation predicts "O" for them)."""
    feats = []
    for ex in examples:
        ids, labels, word_index = [tok.cls_id], [IGNORE], [-1]
        for w, (word, pieces) in enumerate(zip(ex.words, tok.encode_batch(ex.words), strict=True)):
            pieces = pieces or [tok.unk_id]  # a word the tokenizer drops (e.g. a control char) stays aligned
            if len(ids) + len(pieces) > max_len - 1:
                break
            tag = None
            if ex.tags is not None:
                tag = ex.tags[w]
                if tag not in label2id:
                    raise DataError(f"{ex.source}: unknown tag {tag!r} on word {word!r}; known: {sorted(label2id)}")
            ids.extend(pieces)
            labels.extend([label2id[tag] if tag is not None else 0] + [IGNORE] * (len(pieces) - 1))
            word_index.extend([w] + [-1] * (len(pieces) - 1))
        ids.append(tok.sep_id)
        labels.append(IGNORE)
        word_index.append(-1)
        d = {"input_ids": ids, "token_type_ids": [0] * len(ids), "word_index": word_index}
        if ex.tags is not None:
            d["labels"] = labels
        feats.append(d)
    return feats


def encode_choice(examples: list[ChoiceExample], tok: Tokenizer, max_len: int) -> list:
    feats = []
    n_opts = len(examples[0].options) if examples else 0
    for ex in examples:
        if len(ex.options) != n_opts:
            raise DataError(f"{ex.source}: {len(ex.options)} options, but the file's first example has {n_opts}")
        ctx = tok.encode(ex.context, add_special_tokens=False)
        rows, types = [], []
        for opt in tok.encode_batch([option_text(ex, o) for o in ex.options]):
            a, b = truncate_pair(ctx, opt, max_len - 3)
            rows.append([tok.cls_id, *a, tok.sep_id, *b, tok.sep_id])
            types.append([0] * (len(a) + 2) + [1] * (len(b) + 1))
        d = {"input_ids": rows, "token_type_ids": types}
        if ex.label is not None:
            d["labels"] = ex.label
        feats.append(d)
    return feats


def length(f: dict) -> int:
    ids = f["input_ids"]
    return max(map(len, ids)) if ids and isinstance(ids[0], list) else len(ids)


def batches(
    feats: list[dict], batch_size: int, rng: random.Random | None, bucketing: bool = True, chunk_batches: int = 50
) -> list[list[int]]:
    """Index lists. Training (``rng`` given): shuffle, sort by length inside chunks of ``chunk_batches``
    batches, cut into batches, shuffle the batches: lengths inside a batch are close, the order is still
    random. Evaluation (``rng`` None): sorted by length overall, the order being irrelevant there."""
    idx = list(range(len(feats)))
    if rng is None:
        if bucketing:
            idx.sort(key=lambda i: length(feats[i]))
        return [idx[i : i + batch_size] for i in range(0, len(idx), batch_size)]
    rng.shuffle(idx)
    if bucketing:
        size = batch_size * chunk_batches
        idx = [i for c in range(0, len(idx), size) for i in sorted(idx[c : c + size], key=lambda i: length(feats[i]))]
    out = [idx[i : i + batch_size] for i in range(0, len(idx), batch_size)]
    rng.shuffle(out)
    return out


def collate(feats: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad to the longest row of this batch; ``attention_mask`` is 1 on real tokens."""
    width = max(length(f) for f in feats)
    choice = isinstance(feats[0]["input_ids"][0], list)

    def pad(rows: list, value: int) -> list:
        return [r + [value] * (width - len(r)) for r in rows]

    out: dict[str, torch.Tensor] = {}
    if choice:
        ids = [pad(f["input_ids"], pad_id) for f in feats]
        out["input_ids"] = torch.tensor(ids)
        out["token_type_ids"] = torch.tensor([pad(f["token_type_ids"], 0) for f in feats])
        lens = torch.tensor([[len(r) for r in f["input_ids"]] for f in feats])
        out["attention_mask"] = (torch.arange(width) < lens.unsqueeze(-1)).long()
    else:
        out["input_ids"] = torch.tensor(pad([f["input_ids"] for f in feats], pad_id))
        out["token_type_ids"] = torch.tensor(pad([f["token_type_ids"] for f in feats], 0))
        lens = torch.tensor([len(f["input_ids"]) for f in feats])
        out["attention_mask"] = (torch.arange(width) < lens.unsqueeze(-1)).long()
        if "p_mask" in feats[0]:
            out["p_mask"] = torch.tensor(pad([f["p_mask"] for f in feats], 1))
    if "labels" in feats[0]:
        first = feats[0]["labels"]
        if isinstance(first, list):
            out["labels"] = torch.tensor(pad([f["labels"] for f in feats], IGNORE))
        else:
            dtype = torch.float if isinstance(first, float) else torch.long
            out["labels"] = torch.tensor([f["labels"] for f in feats], dtype=dtype)
    for key in ("start_positions", "end_positions"):
        if key in feats[0]:
            out[key] = torch.tensor([f[key] for f in feats])
    if "is_impossible" in feats[0]:
        out["is_impossible"] = torch.tensor([f["is_impossible"] for f in feats])
    return out
