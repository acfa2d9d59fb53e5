"""Paper Figure 1: how much each layer changes its input, for shared (ALBERT) and unshared (BERT) models.

For every computed layer l, over the real tokens of sentences from a corpus file: the mean L2 distance
and the mean cosine similarity between the layer's input h_{l-1} and output h_l. The paper finds the
transitions smooth for ALBERT (sharing stabilises the parameters) and oscillating for BERT.
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
                      batch_size: int = 16) -> list[LayerStats]:
    from albertlm.model import AlbertModel
    from albertlm.tokenizer import load_tokenizer

    model = AlbertModel.from_pretrained(model_dir).eval()
    tok = load_tokenizer(model_dir)
    depth = model.config.num_hidden_layers
    l2 = torch.zeros(depth, dtype=torch.float64)
    cos = torch.zeros(depth, dtype=torch.float64)
    count = 0
    for i in range(0, len(sentences), batch_size):
        enc = tok.batch_encode(sentences[i : i + batch_size], max_length=max_length, return_tensors="pt")
        out = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"], output_hidden_states=True)
        real = enc["attention_mask"].bool()
        states = out.hidden_states  # projected embeddings, then the output of every computed layer
        for layer in range(depth):
            a, b = states[layer][real].double(), states[layer + 1][real].double()
            l2[layer] += (b - a).norm(dim=-1).sum()
            cos[layer] += torch.nn.functional.cosine_similarity(a, b, dim=-1).sum()
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
    """``train.evaluate`` in one CPU process: held-out MLM / pair loss and accuracy on the first batches."""
    import contextlib

    from albertlm.data import PretrainingCollator
    from albertlm.distributed import DistInfo
    from albertlm.train import PretrainConfig, evaluate

    cfg = PretrainConfig(out="", data="", micro_batch_size=batch_size, eval_batches=batches)
    info = DistInfo(False, 0, 0, 1, torch.device("cpu"))
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


def intrinsic_accuracy(model_dir: str | Path, shards: str | Path, epochs: int = 5, batch_size: int = 32) -> dict:
    """Held-out MLM and sentence-pair (SOP / NSP) accuracy over every instance of ``epochs`` re-drawings.

    Dynamic shards draw new pairs and masks each epoch, so several epochs of a small held-out file give a
    tighter estimate; the 95% interval is the normal approximation over the pair labels.
    """
    import math

    from albertlm.data import PretrainingDataset
    from albertlm.heads import AlbertForPreTraining

    model = AlbertForPreTraining.from_pretrained(model_dir)
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
