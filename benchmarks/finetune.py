"""Fine-tuning throughput on SST-2: our AlbertForSequenceClassification vs transformers', side by side.

Same config, same weights (ours saved, HF loads the directory), same fp32 precision, same real SST-2
batches (length-bucketed, dynamic padding), the same optimizer (torch AdamW, as ``albertlm finetune``
builds it), timed in alternation so machine noise hits both. Reported: steps/s from the medians, and
the median of the per-batch ratios (HF time / ours on the same batch, measured back to back), which
drift of the machine's speed during the run does not bias. Then our model with length bucketing vs
plain file-order batches on the same examples.

    python benchmarks/finetune.py --tokenizer runs/tok/en --preset albert-tiny --reps 20
    python benchmarks/finetune.py --tokenizer runs/tok/en --preset albert-base-v2 --reps 5 --json out.json
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

from albertlm import AlbertConfig, AlbertForSequenceClassification
from albertlm.tasks import RowPolicy, get_task, read_split
from albertlm.tasks import features as F
from albertlm.tokenizer import load_tokenizer
from albertlm.training.optim import build_optimizer

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "glue_sst2"


def _train_step(model, opt, batch) -> None:  # noqa: ANN001
    out = model(**batch)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def _timed(fn) -> float:  # noqa: ANN001
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokenizer", required=True, help="SentencePiece tokenizer dir (e.g. runs/tok/en)")
    p.add_argument("--data", default=str(SHARED), help="SST-2 folder")
    p.add_argument("--preset", default="albert-tiny", help="model shape (albert-tiny, albert-base-v2, ...)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--eval-batch-size", type=int, default=64)
    p.add_argument("--reps", type=int, default=40, help="training steps timed per model")
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    tok = load_tokenizer(args.tokenizer)
    task = get_task("sst2")
    train_ex = read_split(task, Path(args.data), "train", RowPolicy())[0][:20000]
    dev_ex = read_split(task, Path(args.data), "dev", RowPolicy())[0]
    label2id = {"0": 0, "1": 1}
    train_feats, _ = F.encode(task, train_ex, tok, label2id, 128)
    dev_feats, _ = F.encode(task, dev_ex, tok, label2id, 128)

    config = AlbertConfig.from_preset(args.preset, vocab_size=tok.vocab_size, id2label={0: "0", 1: "1"})
    torch.manual_seed(0)
    ours = AlbertForSequenceClassification(config)
    with tempfile.TemporaryDirectory() as d:
        ours.save_pretrained(d)
        hf = transformers.AlbertForSequenceClassification.from_pretrained(d)
    # The same model with the last block computing every position: what [CLS]-only (pooled_only) saves.
    ours_full = copy.deepcopy(ours)
    ours_full.pooled_only = False
    models = {"ours": ours, "ours_full_last_block": ours_full, "hf": hf}
    opts = {k: build_optimizer(m, "adamw", 1e-5) for k, m in models.items()}

    rng = random.Random(0)
    order = F.batches(train_feats, args.batch_size, rng)[: args.reps + 2]
    batches = [F.collate([train_feats[i] for i in idx], tok.pad_id) for idx in order]
    times: dict[str, list[float]] = {k: [] for k in models}
    for k, m in models.items():
        m.train()
        _train_step(m, opts[k], batches[0])  # warm-up
    names = list(models)
    for i, b in enumerate(batches[1 : args.reps + 1]):
        for k in names[i % len(names) :] + names[: i % len(names)]:  # who goes first rotates
            times[k].append(_timed(lambda k=k, b=b: _train_step(models[k], opts[k], b)))
    train_sps = {k: 1.0 / statistics.median(v) for k, v in times.items()}
    train_paired = statistics.median(h / o for h, o in zip(times["hf"], times["ours"], strict=True))

    eval_batches = [
        F.collate([dev_feats[i] for i in idx], tok.pad_id) for idx in F.batches(dev_feats, args.eval_batch_size, None)
    ]
    eval_t: dict[str, list[float]] = {k: [] for k in models}
    with torch.no_grad():
        for m in models.values():
            m.eval()
        for _ in range(5):
            for k, m in models.items():
                eval_t[k].append(_timed(lambda m=m: [m(**b) for b in eval_batches]))
    eval_eps = {k: len(dev_feats) / statistics.median(v) for k, v in eval_t.items()}

    # bucketing vs file order: same examples, our model, one pass of N batches each, alternated
    n = min(args.reps, 30)
    sub = train_feats[: n * args.batch_size]
    plain = [F.collate([sub[i] for i in idx], tok.pad_id) for idx in F.batches(sub, args.batch_size, None, False)]
    bucketed = [
        F.collate([sub[i] for i in idx], tok.pad_id) for idx in F.batches(sub, args.batch_size, random.Random(0))
    ]
    pad_frac = {
        k: 1 - sum(int(b["attention_mask"].sum()) for b in bs) / sum(b["input_ids"].numel() for b in bs)
        for k, bs in (("file_order", plain), ("bucketed", bucketed))
    }
    ours.train()
    bt: dict[str, list[float]] = {"file_order": [], "bucketed": []}
    for _ in range(2):
        for k, bs in (("file_order", plain), ("bucketed", bucketed)):
            bt[k].append(_timed(lambda bs=bs: [_train_step(ours, opts["ours"], b) for b in bs]))
    bucket_eps = {k: len(sub) / statistics.median(v) for k, v in bt.items()}

    result = {
        "config": f"{args.preset} (H={config.hidden_size}, L={config.num_hidden_layers}, E={config.embedding_size},"
        f" V={config.vocab_size}), fp32, {args.threads} threads",
        "batch_size": args.batch_size,
        "train_steps_per_s": train_sps,
        "train_ratio_ours_over_hf": train_sps["ours"] / train_sps["hf"],
        "train_ratio_paired_median": train_paired,
        "train_ratio_pooled_only_over_full_last_block": train_sps["ours"] / train_sps["ours_full_last_block"],
        "eval_examples_per_s": eval_eps,
        "eval_ratio_ours_over_hf": eval_eps["ours"] / eval_eps["hf"],
        "bucketing_train_examples_per_s": bucket_eps,
        "bucketing_speedup": bucket_eps["bucketed"] / bucket_eps["file_order"],
        "padding_fraction": pad_frac,
        "hf_attn_implementation": getattr(hf.config, "_attn_implementation", "?"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    print(f"model: {result['config']}, batch {args.batch_size}, SST-2 train batches (median of {args.reps})")
    print(f"train steps/s   ours {train_sps['ours']:.2f}   hf {train_sps['hf']:.2f}   "
          f"ratio {result['train_ratio_ours_over_hf']:.2f}x (per-batch median {train_paired:.2f}x)")  # fmt: skip
    print(f"[CLS]-only last block: training {result['train_ratio_pooled_only_over_full_last_block']:.2f}x, "
          f"evaluation {eval_eps['ours'] / eval_eps['ours_full_last_block']:.2f}x the full last block")  # fmt: skip
    print(f"eval examples/s ours {eval_eps['ours']:.0f}   hf {eval_eps['hf']:.0f}   "
          f"ratio {result['eval_ratio_ours_over_hf']:.2f}x  (SST-2 dev, {len(dev_feats)} examples)")  # fmt: skip
    print(f"bucketing: train examples/s file-order {bucket_eps['file_order']:.0f} vs bucketed "
          f"{bucket_eps['bucketed']:.0f} ({result['bucketing_speedup']:.2f}x); padding "
          f"{pad_frac['file_order']:.0%} -> {pad_frac['bucketed']:.0%}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
