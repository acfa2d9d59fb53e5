"""Built shards -> training examples: the memory-mapped Dataset (dynamic pairs and masks drawn per epoch,
or a static build's stored copies), the padding collator and instance packing."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from albertlm.data.instances import DocumentPool, InstanceConfig, SpecialIds, build_instance, plan_instances
from albertlm.data.manifest import load_manifest, memmap

_log = logging.getLogger(__name__)

class PretrainingDataset(torch.utils.data.Dataset):
    """O(1) random access to instances of a built directory, static or dynamic.

    Dynamic mode re-plans pairs at ``set_epoch(e)`` from generators seeded ``(seed, shard, e)`` (random-B
    segments from any shard) and masks instance ``j`` with ``(seed, shard, e, j)``, so any worker can make
    any item. The training loop (``training.data_order.StepBatches``) calls ``set_epoch`` before each epoch
    and reads items in the main process; a ``torch.utils.data.DataLoader`` with non-persistent workers works too (the
    dataset pickles without its memory maps, tested). Items are dicts of
    numpy arrays: ``input_ids``, ``token_type_ids``, ``labels`` (-100 = no prediction) and, except for
    task ``none``, ``sentence_order_label``. Static mode serves all stored dupe copies every epoch, as the
    original's TFRecords were read; ``set_epoch`` does not change it.
    """

    def __init__(self, path: str | Path, epoch: int = 0, verify: bool = False) -> None:
        self.root = Path(path)
        self.manifest = m = load_manifest(self.root, verify)
        self.mode = m["mode"]
        s = dict(m["settings"])
        self.seed = s.pop("seed")
        self.cfg = InstanceConfig(**{k: s[k] for k in InstanceConfig.__dataclass_fields__})
        t = m["tokenizer"]
        self.special = SpecialIds(t["cls_id"], t["sep_id"], t["mask_id"], t["vocab_size"])
        self.pad_id = t["pad_id"]
        sdir = self.root / m["shard_dir"]
        self.word_start = np.fromfile(sdir / "word_start.bin", dtype=np.uint8).astype(bool)
        self.shards = self._open_shards()
        self.epoch = -1
        self.set_epoch(epoch)

    def _open_shards(self) -> list[dict[str, np.ndarray]]:
        sdir = self.root / self.manifest["shard_dir"]
        return [
            {k: memmap(sdir / f"{i:05d}.{k}.bin", f) for k, f in sh["files"].items()}
            for i, sh in enumerate(self.manifest["shards"])
        ]

    # Pickling a memmap copies its data: a copy in another process (a spawned worker) re-opens the files.
    def __getstate__(self) -> dict:
        return {**self.__dict__, "shards": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.shards = self._open_shards()

    def set_epoch(self, epoch: int) -> None:
        if epoch == self.epoch:
            return
        self.epoch = epoch
        if self.mode == "static":
            sizes = [len(a["offsets"]) - 1 for a in self.shards]
        else:
            pool = DocumentPool([(a["sent"], a["doc"]) for a in self.shards])
            self.plans = [
                plan_instances(
                    np.asarray(a["sent"]), np.asarray(a["doc"]), self.cfg, np.random.default_rng([self.seed, i, epoch]),
                    pool=pool, shard=i,
                )
                for i, a in enumerate(self.shards)
            ]
            sizes = [len(p) for p in self.plans]
        self.cum = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)

    def __len__(self) -> int:
        return int(self.cum[-1])

    def __getitem__(self, i: int) -> dict[str, np.ndarray | int]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"index {i} out of range for {len(self)} instances")
        i %= len(self)
        k = int(np.searchsorted(self.cum, i, side="right")) - 1
        j = i - int(self.cum[k])
        a = self.shards[k]
        pair = self.cfg.task != "none"
        if self.mode == "dynamic":
            rng = np.random.default_rng([self.seed, k, self.epoch, j])
            row = self.plans[k][j]
            b = self.shards[int(row[5])]
            it = build_instance(
                a["tokens"], row, a.get("wstart"), self.word_start, self.cfg, self.special, rng,
                flat_b=b["tokens"], word_start_of_b=b.get("wstart"),
            )
            ids, pos, lab = it["input_ids"], it["masked_positions"], it["masked_labels"]
            token_type = it["token_type_ids"]
            sop = it.get("sentence_order_label", 0)
        else:
            o0, o1 = int(a["offsets"][j]), int(a["offsets"][j + 1])
            ids = np.asarray(a["input_ids"][o0:o1], dtype=np.int64)
            m0, m1 = int(a["mask_offsets"][j]), int(a["mask_offsets"][j + 1])
            pos = np.asarray(a["mask_pos"][m0:m1], dtype=np.int64)
            lab = np.asarray(a["mask_ids"][m0:m1], dtype=np.int64)
            token_type = np.zeros(len(ids), dtype=np.int64)
            token_type[int(a["type_split"][j]) :] = 1
            sop = int(a["sop"][j])
        labels = np.full(len(ids), -100, dtype=np.int64)
        labels[pos] = lab
        item: dict[str, np.ndarray | int] = {"input_ids": ids, "token_type_ids": token_type, "labels": labels}
        if pair:
            item["sentence_order_label"] = int(sop)
        return item


# ---------------------------------------------------------------------------------------------- collators


class PretrainingCollator:
    """Dynamic padding to the longest instance of the batch (optionally a multiple of 8 for tensor cores).

    Returns ``input_ids`` (B,S) long, ``token_type_ids`` (B,S) long, ``attention_mask`` (B,S) long 1/0,
    ``labels`` (B,S) long with -100, and ``sentence_order_label`` (B,) long unless the task is ``none``.
    """

    def __init__(self, pad_id: int = 0, pad_to_multiple_of: int | None = None) -> None:
        self.pad_id, self.multiple = pad_id, pad_to_multiple_of

    def __call__(self, items: list[dict]) -> dict[str, torch.Tensor]:
        s = max(len(x["input_ids"]) for x in items)
        if self.multiple:
            s = -(-s // self.multiple) * self.multiple
        b = len(items)
        ids = np.full((b, s), self.pad_id, dtype=np.int64)
        tt = np.zeros((b, s), dtype=np.int64)
        am = np.zeros((b, s), dtype=np.int64)
        lab = np.full((b, s), -100, dtype=np.int64)
        for r, x in enumerate(items):
            n = len(x["input_ids"])
            ids[r, :n], tt[r, :n], lab[r, :n], am[r, :n] = x["input_ids"], x["token_type_ids"], x["labels"], 1
        out = {
            "input_ids": torch.from_numpy(ids),
            "token_type_ids": torch.from_numpy(tt),
            "attention_mask": torch.from_numpy(am),
            "labels": torch.from_numpy(lab),
        }
        if "sentence_order_label" in items[0]:
            out["sentence_order_label"] = torch.tensor([x["sentence_order_label"] for x in items])
        return out


def pack_instances(lengths: list[int], max_length: int) -> list[list[int]]:
    """First-fit decreasing: groups of instance indices whose lengths sum to at most ``max_length``."""
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        if lengths[i] > max_length:
            raise ValueError(f"instance of length {lengths[i]} does not fit max_length {max_length}")
        for r, free in enumerate(room):
            if lengths[i] <= free:
                rows[r].append(i)
                room[r] -= lengths[i]
                break
        else:
            rows.append([i])
            room.append(max_length - lengths[i])
    return [sorted(r) for r in rows]


class PackingCollator:
    """Packs several instances into each row of ``max_length`` tokens (no per-instance padding).

    The batch has as many rows as packing needs. Keys: ``input_ids``, ``token_type_ids``, ``labels``,
    ``position_ids`` (B,S) restarting at 0 per instance; ``attention_mask`` (B,S,S) bool block-diagonal
    (True = may attend); ``cls_positions`` (B,M) long (padded with 0); ``sentence_order_label`` (B,M) long
    with -100 for padding entries. Unused row tails form one block of their own so no query row is fully
    masked (softmax over nothing would be NaN); their labels are -100.
    """

    def __init__(self, max_length: int, pad_id: int = 0) -> None:
        self.max_length, self.pad_id = max_length, pad_id

    def __call__(self, items: list[dict]) -> dict[str, torch.Tensor]:
        groups = pack_instances([len(x["input_ids"]) for x in items], self.max_length)
        b, s = len(groups), self.max_length
        mm = max(len(g) for g in groups)
        ids = np.full((b, s), self.pad_id, dtype=np.int64)
        tt = np.zeros((b, s), dtype=np.int64)
        lab = np.full((b, s), -100, dtype=np.int64)
        pos = np.zeros((b, s), dtype=np.int64)
        seg = np.full((b, s), -1, dtype=np.int64)
        cls = np.zeros((b, mm), dtype=np.int64)
        sop = np.full((b, mm), -100, dtype=np.int64)
        for r, g in enumerate(groups):
            p = 0
            for m, i in enumerate(g):
                x = items[i]
                n = len(x["input_ids"])
                ids[r, p : p + n], tt[r, p : p + n], lab[r, p : p + n] = (
                    x["input_ids"],
                    x["token_type_ids"],
                    x["labels"],
                )
                pos[r, p : p + n] = np.arange(n)
                seg[r, p : p + n] = m
                cls[r, m] = p
                sop[r, m] = x.get("sentence_order_label", -100)
                p += n
            pos[r, p:] = np.arange(s - p)
        seg_t = torch.from_numpy(seg)
        out = {
            "input_ids": torch.from_numpy(ids),
            "token_type_ids": torch.from_numpy(tt),
            "attention_mask": seg_t[:, :, None] == seg_t[:, None, :],
            "position_ids": torch.from_numpy(pos),
            "labels": torch.from_numpy(lab),
            "cls_positions": torch.from_numpy(cls),
        }
        if "sentence_order_label" in items[0]:
            out["sentence_order_label"] = torch.from_numpy(sop)
        return out
