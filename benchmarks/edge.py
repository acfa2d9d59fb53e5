"""The phone-sized deployments side by side: ExecuTorch ``.pte`` (XNNPACK) against our ONNX and HF -> ONNX, and
the latency of one input on a CPU standing in for a phone.

For each preset shape (random weights, a two-label sequence classifier saved once with save_pretrained): the
file sizes of ``albertlm export --format executorch`` (fp32, int8) and ``--format onnx`` (fp32, int8) and of HF's
model through torch.onnx.export + onnxruntime's optimizer + quantize_dynamic (benchmarks/inference.py's
"peer"); then seq 128, batch 1 on 1 and 2 threads: .pte fp32 / int8 through ExecuTorch's Python runtime,
our ONNX fp32 / int8 through onnxruntime, albertlm in torch fp32, timed in alternation (medians), with the
process's peak resident memory after each engine's build.

    nice -n 10 python benchmarks/edge.py --presets albert-tiny albert-base-v2 --json docs/results/edge/edge_cpu.json

``--no-amx`` keeps the process off Intel AMX (``timing.deny_amx``): onnxruntime's int8 GEMMs use AMX's
matrix tiles where a Xeon has them, which no phone has; the run then compares the engines on AVX-512 VNNI.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from inference import alternate, build_peer, feed_of, file_mb
from timing import deny_amx, machine

import albertlm
from albertlm import AlbertConfig
from albertlm.deploy.engines import OnnxEngine, TorchEngine
from albertlm.deploy.executorch import ExecuTorchEngine, export_executorch
from albertlm.deploy.export import export_onnx

LABELS = {0: "negative", 1: "positive"}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one_preset(preset: str, work: Path, threads: list[int], rounds: int, seq: int) -> dict:
    torch.manual_seed(0)
    config = AlbertConfig.from_preset(preset, id2label=LABELS)
    model = albertlm.AlbertForSequenceClassification(config)
    model.save_pretrained(work / "model")
    params = sum(p.numel() for p in model.parameters())
    layer = sum(p.numel() for p in model.albert.encoder.albert_layer_groups.parameters())
    start = time.time()
    pte = export_executorch(work / "model", work / "pte", quantize="int8")
    pte_s = time.time() - start
    start = time.time()
    export_onnx(work / "model", work / "onnx", quantize="int8")
    onnx_s = time.time() - start
    peer = build_peer(work / "model", work / "peer", threads[0])
    sizes = {
        "pte_fp32_mb": file_mb(work / "pte" / "model.pte"),
        "pte_int8_mb": file_mb(work / "pte" / "model.int8.pte"),
        "ours_onnx_fp32_mb": file_mb(work / "onnx" / "model.onnx"),
        "ours_onnx_int8_mb": file_mb(work / "onnx" / "model.int8.onnx"),
        "hf_onnx_fp32_mb": file_mb(peer["peer-onnx-fp32"].path),
        "hf_onnx_int8_mb": file_mb(peer["peer-onnx-int8"].path),
        "params_fp32_mb": params * 4 / 1e6,
        "stored_layer_fp32_mb": layer * 4 / 1e6,
    }
    print(f"{preset}: " + ", ".join(f"{k} {v:.1f}" for k, v in sizes.items()), flush=True)
    out = {"preset": preset, "layers": config.num_hidden_layers, "sizes": sizes, "export_seconds":
           {"pte_fp32_and_int8": round(pte_s, 1), "onnx_fp32_and_int8": round(onnx_s, 1)},
           "pte_max_abs_diff": {k: pte[f"{k}_max_abs_diff"] for k in ("fp32", "int8")}, "latency": []}  # fmt: skip
    g = torch.Generator().manual_seed(1)
    feed = feed_of(torch.randint(5, config.vocab_size, (1, seq), generator=g).numpy())
    for n in threads:
        torch.set_num_threads(n)
        engines, memory = {}, {}
        for name, build in (
            ("pte-fp32", lambda n=n: ExecuTorchEngine(work / "pte", n, "fp32")),
            ("pte-int8", lambda n=n: ExecuTorchEngine(work / "pte", n, "int8")),
            ("ours-onnx-fp32", lambda n=n: OnnxEngine(work / "onnx", n, "fp32")),
            ("ours-onnx-int8", lambda n=n: OnnxEngine(work / "onnx", n, "int8")),
            ("torch-fp32", lambda n=n: TorchEngine.load(work / "model", n, precision="fp32")),
        ):
            engines[name] = build()
            engines[name](feed)
            memory[name] = round(peak_rss_mb(), 1)  # the process's peak so far (engines accumulate)
        times = alternate({k: (lambda e=e: e(feed)) for k, e in engines.items()}, rounds)
        row = {"threads": n, "seq": seq, "batch": 1,
               "p50_ms": {k: round(statistics.median(v) * 1e3, 2) for k, v in times.items()},
               "process_peak_rss_mb_after_build": memory}  # fmt: skip
        print(f"  {n} thread(s): " + ", ".join(f"{k} {v:.1f} ms" for k, v in row["p50_ms"].items()), flush=True)
        out["latency"].append(row)
        ref = engines["torch-fp32"](feed)["logits"]
        out.setdefault("logits_max_abs_diff_vs_torch", {k: float(np.abs(e(feed)["logits"] - ref).max())
                                                        for k, e in engines.items()})  # fmt: skip
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", nargs="+", default=["albert-tiny", "albert-base-v2"])
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--no-amx", action="store_true", help="keep the process off Intel AMX (as a phone is)")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    import os

    amx_denied = deny_amx() if args.no_amx else False
    results = {"machine": machine(), "amx_denied": amx_denied, "load_average_at_start": os.getloadavg(),
               "date": time.strftime("%Y-%m-%d"),
               "torch": torch.__version__, "presets": []}  # fmt: skip
    for preset in args.presets:
        with tempfile.TemporaryDirectory(prefix="albertlm-edge-") as work:
            results["presets"].append(one_preset(preset, Path(work), args.threads, args.rounds, args.seq_len))
        results["load_average_at_end"] = os.getloadavg()
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.json}" if args.json else json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
