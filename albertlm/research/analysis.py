"""Analyses of trained models.

Paper Figure 1 (``layer_transitions``): for every computed layer l, over the real tokens of sentences from a
corpus file, the mean L2 distance and cosine similarity between the layer's input h_{l-1} and output h_l;
the paper finds the transitions smooth for ALBERT (sharing stabilises the parameters) and oscillating for
BERT. Held-out intrinsic scores (``heldout_scores``, ``intrinsic_accuracy``: MLM and pair accuracy on
shards, beside the no-model baselines) and paper Table 5's contrasts on balanced held-out pairs
(``build_pair_sets``, ``pair_accuracy``: SOP and NSP, each true pair scored with its negative).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from albertlm.errors import DataError


@dataclass
class LayerStats:
    model: str
    layer: int  # 1-based computed layer
    l2_distance: float
    cosine_similarity: float


def read_sentences(path: str | Path, limit: int) -> list[str]:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: corpus file not found")
    out = []
    with open(p, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.strip():
                out.append(line.strip())
                if len(out) >= limit:
                    break
    if not out:
        raise DataError(f"{p}: no non-empty lines")
    return out


@torch.no_grad()
def layer_transitions(model_dir: str | Path, sentences: list[str], max_length: int = 128,
                      batch_size: int = 16, device: str = "auto") -> list[LayerStats]:  # fmt: skip
    from albertlm.devices import resolve_device
    from albertlm.model import AlbertModel
    from albertlm.tokenizer import load_tokenizer

    dev = resolve_device(device)
    model = AlbertModel.from_pretrained(model_dir).eval().to(dev)
    tok = load_tokenizer(model_dir)
    depth = model.config.num_hidden_layers
    l2 = torch.zeros(depth, dtype=torch.float64)
    cos = torch.zeros(depth, dtype=torch.float64)
    count = 0
    for i in range(0, len(sentences), batch_size):
        enc = tok.batch_encode(sentences[i : i + batch_size], max_length=max_length, return_tensors="pt")
        enc = {k: v.to(dev) for k, v in enc.items()}
        with torch.no_grad():
            out = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"], output_hidden_states=True)
        real = enc["attention_mask"].bool()
        states = out.hidden_states  # projected embeddings, then the output of every computed layer
        for layer in range(depth):
            a, b = states[layer][real].double(), states[layer + 1][real].double()
            l2[layer] += (b - a).norm(dim=-1).sum().cpu()
            cos[layer] += torch.nn.functional.cosine_similarity(a, b, dim=-1).sum().cpu()
        count += int(real.sum())
    name = str(model_dir)
    return [LayerStats(name, layer + 1, float(l2[layer] / count), float(cos[layer] / count))
            for layer in range(depth)]


def write_report(stats: list[LayerStats], out_dir: str | Path) -> tuple[Path, Path, Path]:
    """layers.json, layers.md and layers.png (two panels, one line per model)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "layers.json").write_text(json.dumps([asdict(s) for s in stats], indent=1))
    lines = ["| model | layer | L2 distance | cosine similarity |", "|---|---|---|---|"]
    lines += [f"| {s.model} | {s.layer} | {s.l2_distance:.4f} | {s.cosine_similarity:.4f} |" for s in stats]
    (out / "layers.md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for model in dict.fromkeys(s.model for s in stats):
        rows = [s for s in stats if s.model == model]
        label = "/".join(Path(model).parts[-3:])  # the run folders, not just "final"
        axes[0].plot([r.layer for r in rows], [r.l2_distance for r in rows], marker="o", label=label)
        axes[1].plot([r.layer for r in rows], [r.cosine_similarity for r in rows], marker="o", label=label)
    for ax, title in zip(axes, ("L2 distance (input, output)", "cosine similarity (input, output)"), strict=True):
        ax.set_title(title)
        ax.set_xlabel("layer")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "layers.png", dpi=110)
    plt.close(fig)
    return out / "layers.json", out / "layers.md", out / "layers.png"


def heldout_scores(model, dataset, batches: int, batch_size: int = 32) -> dict[str, float]:
    """``train.evaluate`` in one process on the model's device: held-out MLM / pair loss and accuracy on the
    first batches."""
    import contextlib

    from albertlm.data import PretrainingCollator
    from albertlm.training.distributed import DistInfo
    from albertlm.training.pretrain import PretrainConfig, evaluate

    cfg = PretrainConfig(out="", data="", micro_batch_size=batch_size, eval_batches=batches)
    info = DistInfo(False, 0, 0, 1, next(model.parameters()).device)
    return evaluate(model, dataset, cfg, info, PretrainingCollator(dataset.pad_id), contextlib.nullcontext)


def copy_or_unigram_baseline(dataset, epochs: int = 1) -> dict[str, float]:
    """MLM accuracy of a predictor that needs no model: copy the input piece where it is not [MASK]
    (the 10% kept and the lucky random replacements), else answer the most frequent target piece.

    A small model's MLM accuracy plateaus here before it learns context; the target counts come from the
    same held-out instances, so this is the best such predictor can do (slightly optimistic).
    """
    from collections import Counter

    mask_id = dataset.special.mask_id
    rounds = epochs if dataset.mode == "dynamic" else 1
    copied = total = at_mask = 0
    counts: Counter[int] = Counter()
    for epoch in range(rounds):
        dataset.set_epoch(epoch)
        for i in range(len(dataset)):
            item = dataset[i]
            target = item["labels"] >= 0
            ids, labels = item["input_ids"][target], item["labels"][target]
            masked = ids == mask_id
            copied += int((ids[~masked] == labels[~masked]).sum())
            total += int(target.sum())
            at_mask += int(masked.sum())
            counts.update(labels[masked].tolist())
    top = counts.most_common(1)[0][1] if counts else 0
    return {"mlm_acc": (copied + top) / max(total, 1), "mlm_acc_at_mask": top / max(at_mask, 1)}


def intrinsic_accuracy(model_dir: str | Path, shards: str | Path, epochs: int = 5, batch_size: int = 32,
                       device: str = "auto") -> dict:  # fmt: skip
    """Held-out MLM and sentence-pair (SOP / NSP) accuracy over every instance of ``epochs`` re-drawings.

    Dynamic shards draw new pairs and masks each epoch, so several epochs of a small held-out file give a
    tighter estimate; the 95% interval is the normal approximation over the pair labels.
    """
    import math

    from albertlm.data import PretrainingDataset
    from albertlm.devices import resolve_device
    from albertlm.heads import AlbertForPreTraining

    model = AlbertForPreTraining.from_pretrained(model_dir).to(resolve_device(device))
    ds = PretrainingDataset(shards)
    totals = {"mlm_acc": 0.0, "mlm_acc_at_mask": 0.0, "pair_correct": 0.0, "pair_total": 0.0, "majority": 0.0}
    rounds = epochs if ds.mode == "dynamic" else 1
    for epoch in range(rounds):
        ds.set_epoch(epoch)
        r = heldout_scores(model, ds, math.ceil(len(ds) / batch_size), batch_size)
        pairs = len(ds)
        totals["mlm_acc"] += r["valid_mlm_acc"] / rounds
        totals["mlm_acc_at_mask"] += r["valid_mlm_acc_at_mask"] / rounds
        totals["pair_correct"] += r["valid_sop_acc"] * pairs
        totals["pair_total"] += pairs
        totals["majority"] += r["valid_sop_majority"] * pairs
    acc = totals["pair_correct"] / totals["pair_total"]
    half = 1.96 * math.sqrt(acc * (1 - acc) / totals["pair_total"])
    base = copy_or_unigram_baseline(ds, rounds)
    return {"model": str(model_dir), "data": str(shards), "epochs": rounds, "pairs": int(totals["pair_total"]),
            "mlm_acc": totals["mlm_acc"], "mlm_acc_at_mask": totals["mlm_acc_at_mask"],
            "mlm_acc_baseline": base["mlm_acc"], "mlm_acc_at_mask_baseline": base["mlm_acc_at_mask"],
            "pair_acc": acc, "pair_acc_ci95": half,
            "majority_baseline": totals["majority"] / totals["pair_total"]}


# ------------------------------------------------------------------------------- balanced pair accuracy


@dataclass
class PairSet:
    """Held-out sentence pairs of one contrast, balanced: every true pair comes with its one negative.

    ``sop``: ``[CLS] A [SEP] B [SEP]`` of consecutive segments of one document (label 0) and the same two
    segments swapped (label 1), so topic cannot tell them apart. ``nsp``: the true ``A, B`` (label 0) and
    ``A`` with a segment of another document (label 1). A model that answers one label scores 0.5.
    """

    kind: str
    input_ids: list[list[int]]
    token_type_ids: list[list[int]]
    labels: list[int]


def _segments(docs: list[list], max_num_tokens: int, rng) -> list[tuple[int, object, object]]:
    """(document, A, B) for consecutive chunks of each document, split at a random sentence, A trimmed at
    its front and B at its back so the junction the pair is about survives truncation."""
    import numpy as np

    out = []
    for d, sents in enumerate(docs):
        c0, length = 0, 0
        for i, s in enumerate(sents):
            length += len(s)
            if length < max_num_tokens and i < len(sents) - 1:
                continue
            if i - c0 >= 1:  # at least two sentences in the chunk
                cut = int(rng.integers(c0 + 1, i + 1))
                a, b = np.concatenate(sents[c0:cut]), np.concatenate(sents[cut : i + 1])
                budget_a = max(max_num_tokens // 2, max_num_tokens - len(b))
                a = a[max(0, len(a) - budget_a) :]
                b = b[: max_num_tokens - len(a)]
                if len(a) and len(b):
                    out.append((d, a, b))
            c0, length = i + 1, 0
    return out


def build_pair_sets(
    heldout: str | Path, tokenizer, max_seq_length: int = 128, max_pairs: int = 1000, seed: int = 0
) -> dict[str, PairSet]:
    """Balanced SOP and NSP sets from the documents of a held-out corpus file (same true pairs in both)."""
    import numpy as np

    from albertlm.data.corpus import detect_format, iter_documents
    from albertlm.data.instances import DocumentEncoder

    path = Path(heldout)
    docs = [d for d in iter_documents(path, detect_format(path))]
    encoded = [sents for sents, _ in DocumentEncoder(tokenizer).encode(docs)]
    rng = np.random.default_rng(seed)
    max_num_tokens = max_seq_length - 3
    segs = _segments(encoded, max_num_tokens, rng)
    if len({d for d, _, _ in segs}) < 2:
        raise DataError(f"{path}: pair evaluation needs at least two documents with two or more sentences")
    picked = [segs[i] for i in sorted(rng.permutation(len(segs))[:max_pairs])]
    sets = {k: PairSet(k, [], [], []) for k in ("sop", "nsp")}

    def add(kind: str, a, b, label: int) -> None:
        ids, types = tokenizer.pair_ids(a.tolist(), b.tolist(), None)
        sets[kind].input_ids.append(ids)
        sets[kind].token_type_ids.append(types)
        sets[kind].labels.append(label)

    for d, a, b in picked:
        add("sop", a, b, 0)
        add("sop", b, a, 1)
        add("nsp", a, b, 0)
        while True:  # a segment of another document, as long as B where it can be
            o = int(rng.integers(len(encoded)))
            if o != d and encoded[o]:
                break
        sents = encoded[o]
        j = int(rng.integers(len(sents)))
        r = np.concatenate(sents[j:])[: max(len(b), 1)]
        add("nsp", a, r[: max_num_tokens - len(a)], 1)
    return sets


def wilson_interval(correct: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion (sound near 0 and 1, unlike the normal one)."""
    import math

    if n == 0:
        return 0.0, 1.0
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


@torch.no_grad()
def pair_accuracy(model, pairs: PairSet, pad_id: int, batch_size: int = 64) -> dict[str, float]:
    """Accuracy of the model's sentence-pair head on a balanced set, with its 95% interval."""
    from albertlm.heads import IGNORE

    model.eval()
    dev = next(model.parameters()).device
    correct = 0
    for i in range(0, len(pairs.labels), batch_size):
        rows = pairs.input_ids[i : i + batch_size]
        width = max(map(len, rows))
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        types = torch.zeros_like(ids)
        for r, (x, t) in enumerate(zip(rows, pairs.token_type_ids[i : i + batch_size], strict=True)):
            ids[r, : len(x)], types[r, : len(t)] = torch.tensor(x), torch.tensor(t)
        ids, types = ids.to(dev), types.to(dev)
        with torch.no_grad():
            out = model(ids, attention_mask=(ids != pad_id).long(), token_type_ids=types,
                        labels=torch.full_like(ids, IGNORE))  # no MLM logits: only the pair head is scored
        labels = torch.tensor(pairs.labels[i : i + batch_size], device=dev)
        correct += int((out.sop_logits.argmax(-1) == labels).sum())
    n = len(pairs.labels)
    lo, hi = wilson_interval(correct, n)
    return {f"{pairs.kind}_acc": correct / max(n, 1), f"{pairs.kind}_ci95_low": lo, f"{pairs.kind}_ci95_high": hi,
            f"{pairs.kind}_n": n}
