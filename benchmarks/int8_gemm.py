"""Where the albert-base .pte loses to onnxruntime: one dynamic-int8 (or fp32) linear alone, XNNPACK against MLAS.

The linears of albert-base's layer at seq 128, batch 1 (128 x 768 -> 2304, 768 -> 768, 768 -> 3072, 3072 -> 768),
each as its own program: the .pte (PT2E, XNNPACKQuantizer, per-channel weights, dynamic activations, as
``albertlm export --format executorch --quantize int8`` makes it) through ExecuTorch's runtime, and
torch.onnx.export + onnxruntime's quantize_dynamic (per channel) through onnxruntime, both on the same threads,
timed in alternation (medians of ``--rounds`` calls after a warm-up).

    python benchmarks/int8_gemm.py --threads 1 --json docs/results/edge/int8_gemm.json
    python benchmarks/int8_gemm.py --threads 1 --no-amx --json docs/results/edge/int8_gemm_no_amx.json
    python benchmarks/int8_gemm.py --threads 1 --fp32 --json docs/results/edge/fp32_gemm.json

``--no-amx`` keeps the process off Intel AMX (``timing.deny_amx``), as on a CPU with AVX-512 VNNI and no
matrix unit: onnxruntime's int8 GEMMs use AMX where the CPU has it; phones have no AMX. ``--fp32``: the
same linears unquantized, XNNPACK's fp32 GEMM against onnxruntime's.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from timing import deny_amx, machine, write_result

SHAPES = ((768, 2304), (768, 768), (768, 3072), (3072, 768))


def pte_linear(linear: torch.nn.Linear, x: torch.Tensor, path: Path, int8: bool = True):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime
    from torch.export import export
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    program = export(linear, (x,), strict=False)
    if int8:
        config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)
        prepared = prepare_pt2e(program.module(), XNNPACKQuantizer().set_global(config))
        prepared(x)
        program = export(convert_pt2e(prepared), (x,), strict=False)
    path.write_bytes(to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)
    method = Runtime.get().load_program(path).load_method("forward")
    return lambda: method.execute([x])


def ort_linear(linear: torch.nn.Linear, x: torch.Tensor, path: Path, threads: int, int8: bool = True):
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    torch.onnx.export(linear, (x,), path, input_names=["x"], dynamo=False)
    if int8:
        quantize_dynamic(str(path), str(path.with_suffix(".int8.onnx")), weight_type=QuantType.QInt8, per_channel=True)
        path = path.with_suffix(".int8.onnx")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feed = {"x": x.numpy()}
    return lambda: session.run(None, feed)


def median_ms(fns: dict, rounds: int) -> dict[str, float]:
    for fn in fns.values():
        for _ in range(5):
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {k: round(statistics.median(v) * 1e3, 3) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--fp32", action="store_true", help="the linears unquantized")
    ap.add_argument("--no-amx", action="store_true", help="keep the process off Intel AMX (as a phone is)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    amx_denied = deny_amx() if args.no_amx else False
    from executorch.extension.pybindings import portable_lib

    portable_lib._unsafe_reset_threadpool(args.threads)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    int8, precision = not args.fp32, "fp32" if args.fp32 else "int8"
    rows = []
    with tempfile.TemporaryDirectory(prefix="albertlm-gemm-") as work, torch.no_grad():
        for k, n in SHAPES:
            linear, x = torch.nn.Linear(k, n).eval(), torch.randn(1, args.seq_len, k)
            ms = median_ms({f"xnnpack_pte_{precision}": pte_linear(linear, x, Path(work) / f"{k}x{n}.pte", int8),
                            f"onnxruntime_{precision}": ort_linear(linear, x, Path(work) / f"{k}x{n}.onnx",
                                                                   args.threads, int8)}, args.rounds)  # fmt: skip
            ours, theirs = ms[f"xnnpack_pte_{precision}"], ms[f"onnxruntime_{precision}"]
            rows.append({"in": k, "out": n, "p50_ms": ms, "ratio": round(ours / theirs, 2)})
            print(f"{args.seq_len} x {k} -> {n}: .pte {ours} ms, onnxruntime {theirs} ms ({ours / theirs:.2f}x)",
                  flush=True)  # fmt: skip
    from importlib.metadata import version

    import onnxruntime

    kind = "fp32" if args.fp32 else "dynamic-int8"
    out = {"what": f"one {kind} linear, XNNPACK (.pte) vs onnxruntime, batch 1", "machine": machine(),
           "threads": args.threads, "amx_denied": amx_denied, "seq_len": args.seq_len, "rounds": args.rounds,
           "linears": rows,
           "versions": {"torch": torch.__version__, "executorch": version("executorch"),
                        "onnxruntime": onnxruntime.__version__}}  # fmt: skip
    write_result(out, args.json, "docs/results/edge/README.md reads it")


if __name__ == "__main__":
    main()
