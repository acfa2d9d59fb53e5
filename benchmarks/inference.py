"""CPU inference, side by side: transformers (SDPA) vs albertlm (torch) vs ONNX fp32 vs ONNX int8.

Speed: an albert-base-shaped sequence classifier (random weights; the same weights in every engine:
ours is saved with save_pretrained and HF loads that directory), batch 1 and batch 32 at seq 128, fixed
threads, engines timed in alternation so machine noise hits all alike. Prints latency p50/p95,
throughput (sequences/s) and the speed-up over HF (HF p50 / engine p50, > 1 = faster than HF).

Accuracy: a small ALBERT fine-tuned briefly on a slice of SST-2 (trained here on first use and kept
under runs/deploy/), exported fp32 and int8, scored on the full SST-2 dev set (872 sentences).

    nice -n 5 python benchmarks/inference.py                       # both parts
    nice -n 5 python benchmarks/inference.py --part speed --threads 2 --reps 20 --reps-large 5
    nice -n 5 python benchmarks/inference.py --part accuracy --json runs/deploy/accuracy.json
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import albertlm
from albertlm import AlbertConfig
from albertlm.export import export_onnx
from albertlm.inference import OnnxEngine, Predictor

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
SST2 = SHARED / "data" / "glue_sst2"
LABELS = {0: "negative", 1: "positive"}


def read_sst2(name: str) -> tuple[list[str], list[int]]:
    with open(SST2 / name, encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [r["sentence"].strip() for r in rows], [int(r["label"]) for r in rows]


# --------------------------------------------------------------------------- speed
def percentile(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


def speed(args: argparse.Namespace) -> list[dict]:
    import transformers

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    work = Path(tempfile.mkdtemp(prefix="albertlm-bench-"))
    config = AlbertConfig.from_preset(args.preset, id2label=LABELS)
    albertlm.AlbertForSequenceClassification(config).save_pretrained(work / "model")
    ours = albertlm.AlbertForSequenceClassification.from_pretrained(work / "model").eval()
    hf = transformers.AlbertForSequenceClassification.from_pretrained(work / "model", attn_implementation="sdpa")
    hf.eval()
    onnx = {}
    for graph in ("ort", "standard") if args.standard_graph else ("ort",):
        manifest = export_onnx(work / "model", work / graph, quantize="int8", graph=graph)
        suffix = "" if graph == "ort" else "-standard"
        for q in ("fp32", "int8"):
            onnx[f"onnx-{q}{suffix}"] = OnnxEngine(work / graph, threads=args.threads, quantized=q == "int8")
        sizes = manifest["sizes_bytes"]
        print(f"ONNX ({graph} graph) sizes: fp32 {sizes['fp32'] / 1e6:.1f} MB, int8 {sizes['int8'] / 1e6:.1f} MB "
              f"({sizes['int8'] / sizes['fp32']:.2f}x); fused {manifest['fused_ops']}; "
              f"int8 graph: {manifest['int8_report']}")  # fmt: skip

    rows = []
    for batch, reps in ((1, args.reps), (32, args.reps_large)):
        g = torch.Generator().manual_seed(batch)
        ids = torch.randint(5, config.vocab_size, (batch, args.seq_len), generator=g)
        mask, types = torch.ones_like(ids), torch.zeros_like(ids)
        engines = make_engines(hf, ours, onnx, (ids, mask, types))
        times: dict[str, list[float]] = {k: [] for k in engines}
        with torch.inference_mode():
            for fn in engines.values():  # warm-up: allocator, oneDNN / ORT kernel selection
                fn()
            for _ in range(reps):
                for name, fn in engines.items():
                    start = time.perf_counter()
                    fn()
                    times[name].append(time.perf_counter() - start)
        hf_p50 = statistics.median(times["hf-sdpa"])
        for name, ts in times.items():
            p50 = statistics.median(ts)
            rows.append({"engine": name, "batch": batch, "seq": args.seq_len, "reps": reps,
                         "p50_ms": 1e3 * p50, "p95_ms": 1e3 * percentile(ts, 95),
                         "seq_per_s": batch / p50, "speedup_vs_hf": hf_p50 / p50})  # fmt: skip
        print_table([r for r in rows if r["batch"] == batch])
    return rows


def make_engines(hf, ours, onnx: dict, inputs: tuple[torch.Tensor, ...]) -> dict:
    """name -> a no-argument forward on fixed inputs (torch tensors for torch, numpy for onnxruntime)."""
    ids, mask, types = inputs
    np_in = {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": types.numpy()}
    engines = {
        "hf-sdpa": lambda: hf(input_ids=ids, attention_mask=mask, token_type_ids=types).logits,
        "albertlm-torch": lambda: ours(input_ids=ids, attention_mask=mask, token_type_ids=types).logits,
    }
    for name, session in onnx.items():
        engines[name] = lambda session=session: session(np_in)["logits"]
    engines["fp32-gemm-floor"] = gemm_floor(hf.config, ids.shape[0], ids.shape[1])
    return engines


def gemm_floor(config, batch: int, seq: int):
    """The encoder's dense fp32 matmuls alone (q/k/v, output, FFN in and out, per computed layer).

    No fp32 engine can run the model faster than its weight matmuls, so HF p50 / this p50 is the most
    any fp32 engine could gain over HF with the same GEMM library; it is printed beside the engines.
    """
    H, inter, L = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    g = torch.Generator().manual_seed(0)
    x, a = torch.randn(batch * seq, H, generator=g), torch.randn(batch * seq, inter, generator=g)
    weights = [torch.randn(o, i, generator=g) * 0.02 for o, i in ((3 * H, H), (H, H), (inter, H), (H, inter))]

    def run() -> None:
        for _ in range(L):
            for w in weights:
                torch.nn.functional.linear(a if w.shape[1] == inter else x, w)

    return run


def print_table(rows: list[dict]) -> None:
    print("| engine | batch x seq | p50 ms | p95 ms | seq/s | vs HF |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['engine']} | {r['batch']} x {r['seq']} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | "
              f"{r['seq_per_s']:.1f} | {r['speedup_vs_hf']:.2f}x |", flush=True)  # fmt: skip


# --------------------------------------------------------------------------- accuracy
def train_sst2(out: Path, args: argparse.Namespace) -> Path:
    """Tokenizer on a corpus slice + a brief AdamW fine-tune from random init on an SST-2 slice."""
    from albertlm.tokenizer_training import train_sentencepiece

    corpus = out / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for f in sorted((SHARED / "corpus" / "en").glob("*.txt")):
        if f.name != "heldout.txt":
            with open(f, encoding="utf-8") as fh:
                (corpus / f.name).write_text("".join(itertools.islice(fh, 3000)), encoding="utf-8")
    tok = train_sentencepiece([corpus], out / "tok", vocab_size=8000, seed=0)
    texts, labels = read_sst2("train_full.tsv")
    order = list(range(len(texts)))
    random.Random(0).shuffle(order)
    torch.manual_seed(0)
    config = AlbertConfig.from_preset(args.train_preset, vocab_size=tok.vocab_size, id2label=LABELS,
                                      num_hidden_layers=args.train_layers)  # fmt: skip
    model = albertlm.AlbertForSequenceClassification(config)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    steps, bs, warm = args.train_steps, 32, max(args.train_steps // 10, 1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warm, (steps - s) / (steps - warm)))
    model.train()
    start = time.time()
    for step in range(steps):
        idx = order[step * bs : (step + 1) * bs]
        enc = tok.batch_encode([texts[i] for i in idx], max_length=64, return_tensors="pt")
        loss = model(**enc, labels=torch.tensor([labels[i] for i in idx])).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"step {step} loss {loss.item():.3f} ({(time.time() - start) / (step + 1):.2f} s/step)", flush=True)
    model.eval().save_pretrained(out / "model")
    tok.save(out / "model")
    return out / "model"


def accuracy(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    model_dir = Path(args.sst2_model)
    if not (model_dir / "config.json").is_file():
        model_dir = train_sst2(model_dir.parent, args)
    manifest = export_onnx(model_dir, model_dir.parent / "onnx", quantize="int8")
    texts, labels = read_sst2("dev.tsv")
    result: dict = {"model": str(model_dir), "dev_examples": len(texts), "sizes_bytes": manifest["sizes_bytes"]}
    for name, kw in (("torch", {"engine": "torch"}), ("onnx-fp32", {"engine": "onnx", "quantized": False}),
                     ("onnx-int8", {"engine": "onnx", "quantized": True})):  # fmt: skip
        directory = model_dir if name == "torch" else model_dir.parent / "onnx"
        preds = Predictor.load(directory, threads=args.threads, overrides={"max_seq_length": 128}, **kw).classify(texts)
        result[name] = float(np.mean([LABELS[y] == p["label"] for y, p in zip(labels, preds, strict=True)]))
    result["int8_drop_points"] = 100 * (result["onnx-fp32"] - result["onnx-int8"])
    print(json.dumps(result, indent=2))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["speed", "accuracy", "all"], default="all")
    ap.add_argument("--preset", default="albert-base-v2", help="speed: model shape")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2, help="torch and onnxruntime intra-op threads")
    ap.add_argument("--reps", type=int, default=20, help="timed rounds at batch 1")
    ap.add_argument("--reps-large", type=int, default=5, help="timed rounds at batch 32")
    ap.add_argument("--standard-graph", action="store_true",
                    help="speed: also time the plain-ONNX graph (export --graph standard)")  # fmt: skip
    ap.add_argument("--sst2-model", default=str(ROOT / "runs" / "deploy" / "sst2" / "model"),
                    help="accuracy: fine-tuned classifier dir (trained here if missing)")  # fmt: skip
    ap.add_argument("--train-preset", default="albert-small", help="accuracy: shape of the model trained")
    ap.add_argument("--train-layers", type=int, default=6)
    ap.add_argument("--train-steps", type=int, default=500)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    out: dict = {"machine": platform.processor() or platform.machine(), "threads": args.threads,
                 "torch": torch.__version__}  # fmt: skip
    if args.part in ("accuracy", "all"):
        out["accuracy"] = accuracy(args)
    if args.part in ("speed", "all"):
        out["speed"] = speed(args)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
