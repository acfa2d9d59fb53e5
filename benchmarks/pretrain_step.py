"""Pretraining step: albertlm.AlbertForPreTraining against transformers.AlbertForPreTraining, side by side.

Same config, same weights, same batch (random tokens, 15% of positions labelled for MLM, SOP labels),
same precision and the same optimizer (AdamW, torch's foreach/fused kernel). One timed step = forward,
backward, optimizer step. The two are timed in alternation, medians reported, ratio = ours / HF tokens/s.

    python benchmarks/pretrain_step.py                                      # CPU fp32, albert-base, 8 x 128
    python benchmarks/pretrain_step.py --device cuda --dtype bf16 --batch-size 256 --seq-len 128 --hf-compile
    python benchmarks/pretrain_step.py --preset albert-large-v2 --device cuda --dtype bf16 --batch-size 64 --seq-len 512
    python benchmarks/pretrain_step.py --packing-data runs/en/heldout512 --packing-preset albert-tiny --packing-only

MFU (model FLOPs utilization) counts useful work only, the formula of docs/anchors.md with P = the
masked positions: per token 3 * [L(8H^2 + 4HI + 4SH) + 2EH] over real tokens, plus 3 * (2HE + 2EV) per
masked position; divided by time and the peak (989 TFLOP/s dense bf16 on H100/H200; on CPU the measured
rate of one large matmul in the precision in use, so bf16 is held to bf16's rate). HF's own extra work
(scoring every position) earns it nothing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

import torch
from timing import measure, peak_memory, time_once, torch_gemm_tflops, write_result  # benchmarks/timing.py

import albertlm
from albertlm import AlbertConfig
from albertlm.training.distributed import DistInfo
from albertlm.training.pretrain import PretrainConfig, peak_flops, useful_flops


def make_batch(config: AlbertConfig, B: int, S: int, device: str, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, config.vocab_size, (B, S), generator=g)
    labels = torch.full_like(ids, -100)
    chosen = torch.rand(B, S, generator=g) < 0.15
    chosen[:, 0] = False
    labels[chosen] = ids[chosen]
    ids[chosen] = 4  # [MASK]
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones(B, S, dtype=torch.long),
        "token_type_ids": (torch.arange(S) >= S // 2).long().expand(B, S).contiguous(),
        "labels": labels,
        "sentence_order_label": torch.randint(0, 2, (B,), generator=g),
    }
    return {k: v.to(device) for k, v in batch.items()}


def step_fn(model, opt, batch, dtype, device):
    def step():
        with torch.autocast(device, dtype=dtype, enabled=dtype != torch.float32):
            loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def mfu_peak(device: str, dtype: str) -> tuple[float, str]:
    """FLOP/s that MFU divides by, and where it comes from: the GPU's dense bf16 datasheet peak
    (training.pretrain.PEAK_BF16_TFLOPS), or on CPU the measured rate of one large matmul in ``dtype``
    ("fp32" / "bf16"), so bf16 is held to bf16's rate. 0 where neither is known (no MFU then)."""
    peak, source = peak_flops(PretrainConfig(out="", data=""), DistInfo(False, 0, 0, 1, torch.device(device)))
    if not peak and device == "cpu":
        peak = torch_gemm_tflops(torch.bfloat16 if dtype == "bf16" else torch.float32) * 1e12
        source = f"this CPU's measured {dtype} matmul rate (4096x768 @ 768x3072)"
    return peak, source


def packing_comparison(path: str, config: AlbertConfig, micro: int, reps: int, device: str) -> dict:
    """Real-token throughput on real shards: dynamic padding vs packing rows to the max length.

    Instances are drawn in a seeded random order, as the training sampler draws them, ``micro`` per
    step. Padded: each batch padded to its longest instance (what ``albertlm pretrain`` does without
    --pack). Packed: instances first-fit into rows of the shards' max length. The padding fraction is
    the share of the padded batches' slots that hold padding; removing it all would raise real-token
    throughput by 1 / (1 - padding fraction), the target. Packing leaves the tails of its rows empty
    (the fill), so the most it can reach is fill / (1 - padding fraction). Steps alternate between the
    two so machine noise hits both alike.
    """
    import random

    from albertlm.data import PackingCollator, PretrainingCollator, PretrainingDataset, load_manifest

    ds = PretrainingDataset(path)
    max_len = int(load_manifest(path)["settings"]["max_seq_length"])
    cfg = config.replace(vocab_size=ds.special.vocab_size)
    torch.manual_seed(0)
    model = albertlm.AlbertForPreTraining(cfg).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    order = list(range(len(ds)))
    random.Random(0).shuffle(order)
    order = (order * (micro * reps // len(order) + 1))[: micro * reps]
    collators = {"padded": PretrainingCollator(ds.pad_id), "packed": PackingCollator(max_len, ds.pad_id)}
    seconds = {k: 0.0 for k in collators}
    slots = {k: 0 for k in collators}
    rows = {k: 0 for k in collators}
    real = 0
    for r in range(reps):
        items = [ds[i] for i in order[r * micro : (r + 1) * micro]]
        real += sum(len(x["input_ids"]) for x in items)
        for name, collate in collators.items():
            batch = {k: v.to(device) for k, v in collate(items).items()}
            rows[name] += batch["input_ids"].shape[0]
            slots[name] += batch["input_ids"].numel()
            fn = step_fn(model, opt, batch, torch.float32, device)
            if r == 0:
                fn()  # warm-up (allocator, kernel choice per shape)
            seconds[name] += time_once(fn, device)
    out: dict = {name: {"real_tokens_per_s": real / seconds[name], "rows": rows[name], "slots": slots[name]}
                 for name in collators}  # fmt: skip
    out["instances"] = micro * reps
    out["padding_fraction"] = 1 - real / slots["padded"]
    out["packed_fill"] = real / slots["packed"]
    out["target_ratio"] = 1 / (1 - out["padding_fraction"])
    out["best_possible_ratio"] = out["packed_fill"] / (1 - out["padding_fraction"])
    out["ratio_packed_over_padded"] = out["packed"]["real_tokens_per_s"] / out["padded"]["real_tokens_per_s"]
    return out


def step_comparison(args: argparse.Namespace) -> dict:
    """Ours vs HF (SDPA, optionally compiled) on one random batch; prints the table, returns the result."""
    import transformers

    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    config = AlbertConfig.from_preset(args.preset)
    torch.manual_seed(0)
    hf_cfg = transformers.AlbertConfig(**{k: v for k, v in config.to_dict().items() if k != "model_type"})
    hf_cfg._attn_implementation = "sdpa"
    hf = transformers.AlbertForPreTraining(hf_cfg)
    with tempfile.TemporaryDirectory() as d:
        hf.save_pretrained(d)
        ours = albertlm.AlbertForPreTraining.from_pretrained(d)
    hf, ours = hf.to(args.device).train(), ours.to(args.device).train()
    fused = {"fused": True} if args.device == "cuda" else {"foreach": True}
    opt_h = torch.optim.AdamW(hf.parameters(), lr=1e-5, **fused)
    opt_o = torch.optim.AdamW(ours.parameters(), lr=1e-5, **fused)
    B, S = args.batch_size, args.seq_len
    batch = make_batch(config, B, S, args.device)
    runs = {"ours": step_fn(ours, opt_o, batch, dtype, args.device),
            "hf_sdpa": step_fn(hf, opt_h, batch, dtype, args.device)}
    if args.compile:
        runs["ours_compile"] = step_fn(torch.compile(ours), opt_o, batch, dtype, args.device)
    if args.hf_compile:
        runs["hf_compile"] = step_fn(torch.compile(hf), opt_h, batch, dtype, args.device)
    mem = {k: peak_memory(fn, args.device) for k, fn in runs.items()}
    times = measure(runs, args.reps, args.warmup, args.device)
    peak, peak_src = mfu_peak(args.device, args.dtype)
    flops = useful_flops(config, {k: v.cpu() for k, v in batch.items()})
    print(f"{args.preset} pretraining step (fwd+bwd+AdamW), batch {B} x seq {S}, {args.device} {args.dtype}, "
          f"{torch.get_num_threads()} threads, median of {args.reps}; MFU vs {peak_src}"
          + (f" ({peak / 1e12:.2f} TFLOP/s)" if peak else ""))
    result = {"preset": args.preset, "batch_size": B, "seq_len": S, "device": args.device, "dtype": args.dtype,
              "threads": torch.get_num_threads(), "torch": torch.__version__,
              "transformers": transformers.__version__, "peak": peak_src, "engines": {}}
    for k, ts in times.items():
        med = statistics.median(ts)
        row = {"median_s": med, "tokens_per_s": B * S / med, "mfu": flops / med / peak if peak else None,
               "peak_mem_gib": mem[k]}
        result["engines"][k] = row
        m = f"  peak {mem[k]:.1f} GiB" if mem[k] is not None else ""
        print(f"  {k:13s} {med * 1000:9.1f} ms  {row['tokens_per_s']:10,.0f} tokens/s"
              + (f"  MFU {row['mfu']:6.1%}" if peak else "") + m)
    base = statistics.median(times["hf_sdpa"])
    for k in times:
        if k != "hf_sdpa":
            r = base / statistics.median(times[k])
            result[f"ratio_{k}_over_hf_sdpa"] = r
            print(f"ratio {k} / HF SDPA (tokens/s): {r:.2f}x")
    if "hf_compile" in times:
        r = statistics.median(times["hf_compile"]) / statistics.median(times["ours"])
        result["ratio_ours_over_hf_compile"] = r
        print(f"ratio ours / HF+compile (tokens/s): {r:.2f}x")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="albert-base-v2")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--hf-compile", action="store_true", help="also time HF under torch.compile")
    ap.add_argument("--compile", action="store_true", help="also time ours under torch.compile")
    ap.add_argument("--packing-data", help="real shards for the packing comparison")
    ap.add_argument("--packing-preset", help="model for the packing comparison (default: --preset)")
    ap.add_argument("--packing-batch", type=int, default=32, help="instances per step in the packing comparison")
    ap.add_argument("--packing-reps", type=int, default=6, help="steps per side in the packing comparison")
    ap.add_argument("--packing-only", action="store_true", help="skip the ours-vs-HF step comparison")
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args()

    result = {} if args.packing_only else step_comparison(args)
    config = AlbertConfig.from_preset(args.preset)
    if args.packing_data:
        pcfg = AlbertConfig.from_preset(args.packing_preset) if args.packing_preset else config
        p = packing_comparison(args.packing_data, pcfg, args.packing_batch, args.packing_reps, args.device)
        result["packing"] = {"preset": args.packing_preset or args.preset, **p}
        print(f"packing on {args.packing_data} ({p['instances']} instances, {args.packing_batch} per step): "
              f"padding fraction {p['padding_fraction']:.1%} (target {p['target_ratio']:.2f}x), packed rows "
              f"{p['packed_fill']:.1%} full (best possible {p['best_possible_ratio']:.2f}x); real tokens/s "
              f"padded {p['padded']['real_tokens_per_s']:,.0f} vs packed {p['packed']['real_tokens_per_s']:,.0f} "
              f"-> {p['ratio_packed_over_padded']:.2f}x")
    write_result(result, args.json, "docs/results/README.md lists the committed measurements")


if __name__ == "__main__":
    main()
