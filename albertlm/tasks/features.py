"""Examples -> model inputs: label ids, token ids per task kind, length-bucketed batches, dynamic padding.

A feature is a plain dict of Python lists (``input_ids``, ``token_type_ids``, the label fields); padding
happens per batch in ``collate`` so a batch of short SST-2 sentences is as wide as its longest member.
"""

from __future__ import annotations

import random

import torch

from albertlm.tasks import squad
from albertlm.tasks.choice import option_text
from albertlm.tasks.examples import ChoiceExample, DataError, TaggingExample, TextExample
from albertlm.tasks.registry import Task
from albertlm.tokenizer import Tokenizer, truncate_pair

IGNORE = -100


def label_set(task: Task, train_examples: list) -> list[str]:
    """The task's fixed labels, else the sorted labels seen in training ("O" first for tagging)."""
    if task.labels is not None:
        return list(task.labels)
    if task.kind == "tagging":
        tags = sorted({t for ex in train_examples for t in ex.tags or []} - {"O"})
        return ["O", *tags]
    found = {task.aliases.get(ex.label, ex.label) for ex in train_examples if ex.label is not None}
    if not found:
        raise DataError(f"task {task.name}: the training file has no labels")
    return sorted(found)


def _label_id(task: Task, label2id: dict[str, int], ex: TextExample) -> int | float:
    if task.kind == "regression":
        try:
            return float(ex.label)
        except (TypeError, ValueError):
            msg = f"{ex.source}: label {ex.label!r} is not a number (task {task.name} is regression)"
            raise DataError(msg) from None
    name = task.aliases.get(ex.label, ex.label)
    if name not in label2id:
        raise DataError(f"{ex.source}: unknown label {ex.label!r}; task {task.name} has labels {sorted(label2id)}")
    return label2id[name]


def encode(
    task: Task,
    examples: list,
    tokenizer: Tokenizer,
    label2id: dict[str, int],
    max_seq_length: int,
    training: bool = False,
    doc_stride: int = 128,
    max_query_length: int = 64,
) -> tuple[list[dict], list | None]:
    """Features for the model, plus (QA only) the window records needed to map logits back to text.
    Unlabeled examples get no label field (prediction)."""
    if task.kind in ("classification", "regression"):
        return _encode_text(task, examples, tokenizer, label2id, max_seq_length), None
    if task.kind == "tagging":
        return _encode_tagging(examples, tokenizer, label2id, max_seq_length), None
    if task.kind == "choice":
        return _encode_choice(examples, tokenizer, max_seq_length), None
    qa, dropped = squad.make_features(examples, tokenizer, max_seq_length, doc_stride, max_query_length, training)
    feats = []
    for f in qa:
        d = {"input_ids": f.input_ids, "token_type_ids": f.token_type_ids}
        if task.kind == "qa_v2":
            d["p_mask"] = f.p_mask
        if training:
            d["start_positions"], d["end_positions"] = f.start_position, f.end_position
            if task.kind == "qa_v2":
                d["is_impossible"] = float(f.is_impossible)
        feats.append(d)
    if training and not feats:
        raise DataError(f"task {task.name}: no training windows ({dropped} answers not found in their context)")
    return feats, qa


def _encode_text(task: Task, examples: list[TextExample], tok: Tokenizer, label2id: dict, max_len: int) -> list:
    firsts = tok.encode_batch([ex.text_a for ex in examples])
    has_b = any(ex.text_b is not None for ex in examples)
    seconds = tok.encode_batch([ex.text_b or "" for ex in examples]) if has_b else None
    feats = []
    for i, ex in enumerate(examples):
        if seconds is not None:
            a, b = truncate_pair(firsts[i], seconds[i], max_len - 3)
            ids = [tok.cls_id, *a, tok.sep_id, *b, tok.sep_id]
            types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
        else:
            ids = [tok.cls_id, *firsts[i][: max_len - 2], tok.sep_id]
            types = [0] * len(ids)
        d = {"input_ids": ids, "token_type_ids": types}
        if ex.label is not None:
            d["labels"] = _label_id(task, label2id, ex)
        feats.append(d)
    return feats


def _encode_tagging(examples: list[TaggingExample], tok: Tokenizer, label2id: dict, max_len: int) -> list:
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


def _encode_choice(examples: list[ChoiceExample], tok: Tokenizer, max_len: int) -> list:
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
