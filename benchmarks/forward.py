"""Forward pass: albertlm.AlbertModel against transformers.AlbertModel (SDPA), side by side.

Same weights (ours is loaded from the HF model's save), same inputs, same threads, one process;
the two models are timed in alternation so machine noise hits both alike. Prints medians, the
ratio (ours / HF tokens/s, > 1 means ours is faster) and the achieved GFLOP/s against a plain
matmul of the FFN's shape.

    python benchmarks/forward.py                                  # CPU fp32, albert-base, batch 8, seq 128
    python benchmarks/forward.py --device cuda --dtype bf16 --batch-size 64
    python benchmarks/forward.py --json docs/results/forward_cpu.json

Forward FLOPs per token (matmuls only): L*K*(8H^2 + 4HI + 4SH) + 2EH.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile

import torch
from timing import measure, time_once, write_result  # benchmarks/timing.py (the script's own folder is on sys.path)

import albertlm
from albertlm import AlbertConfig
from albertlm.model import flops_per_token


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="albert-base-v2")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", help="also write the result as JSON here")
    args = ap.parse_args()

    import transformers

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = AlbertConfig.from_preset(args.preset)
    hf_config = transformers.AlbertConfig(**{k: v for k, v in config.to_dict().items() if k != "model_type"})
    hf_config._attn_implementation = "sdpa"
    hf = transformers.AlbertModel(hf_config).eval()
    with tempfile.TemporaryDirectory() as d:
        hf.save_pretrained(d)
        ours = albertlm.AlbertModel.from_pretrained(d).eval()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    hf, ours = hf.to(args.device, dtype), ours.to(args.device, dtype)

    B, S = args.batch_size, args.seq_len
    ids = torch.randint(5, config.vocab_size, (B, S), device=args.device)
    mask = torch.ones(B, S, dtype=torch.long, device=args.device)
    mask[B // 2 :, S - S // 4 :] = 0  # padding in half the batch, as in real fine-tuning batches

    with torch.inference_mode():
        diff = (ours(ids, mask).last_hidden_state - hf(input_ids=ids, attention_mask=mask).last_hidden_state)
        max_diff = diff[mask.bool()].abs().max().item()
        runs = {"ours": lambda: ours(ids, mask), "hf_sdpa": lambda: hf(input_ids=ids, attention_mask=mask)}
        times = measure(runs, args.reps, args.warmup, args.device)

        H, I = config.hidden_size, config.intermediate_size
        x = torch.randn(B * S, H, device=args.device, dtype=dtype)
        w = torch.randn(H, I, device=args.device, dtype=dtype)
        mm = statistics.median(time_once(lambda: x @ w, args.device) for _ in range(args.reps))
    matmul_gflops = 2 * B * S * H * I / mm / 1e9

    per_token = flops_per_token(config, S, scored_positions=0, training=False)  # the encoder's forward
    result = {
        "preset": args.preset, "batch_size": B, "seq_len": S, "device": args.device, "dtype": args.dtype,
        "threads": args.threads, "torch": torch.__version__, "transformers": transformers.__version__,
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "max_abs_diff": max_diff,
    }
    print(f"{args.preset} forward, batch {B} x seq {S}, {args.device} {args.dtype}, {args.threads} threads, "
          f"median of {args.reps} (max |ours - HF| = {max_diff:.2e})")
    for k, ts in times.items():
        med = statistics.median(ts)
        result[k] = {"median_s": med, "tokens_per_s": B * S / med, "gflops": per_token * B * S / med / 1e9}
        print(f"  {k:8s} {med * 1000:8.1f} ms  {B * S / med:10,.0f} tokens/s  "
              f"{result[k]['gflops']:7.1f} GFLOP/s ({result[k]['gflops'] / matmul_gflops:.0%} of matmul)")
    result["matmul_gflops"] = matmul_gflops
    result["ratio_ours_over_hf_sdpa"] = statistics.median(times["hf_sdpa"]) / statistics.median(times["ours"])
    print(f"  plain matmul ({B * S}x{H} @ {H}x{I}): {matmul_gflops:.1f} GFLOP/s")
    print(f"ratio ours / HF SDPA (tokens/s): {result['ratio_ours_over_hf_sdpa']:.2f}x")
    write_result(result, args.json, "docs/results/README.md lists the committed measurements")


if __name__ == "__main__":
    main()
