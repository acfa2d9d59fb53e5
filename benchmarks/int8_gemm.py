"""Where the albert-base int8 .pte loses to onnxruntime: one dynamic-int8 linear alone, XNNPACK against MLAS.

The linears of albert-base's layer at seq 128, batch 1 (128 x 768 -> 2304, 768 -> 768, 768 -> 3072, 3072 -> 768),
each as its own program: the .pte (PT2E, XNNPACKQuantizer, per-channel weights, dynamic activations, as
``albertlm export --format executorch --quantize int8`` makes it) through ExecuTorch's runtime, and
torch.onnx.export + onnxruntime's quantize_dynamic (per channel) through onnxruntime, both on the same threads,
timed in alternation (medians of ``--rounds`` calls after a warm-up).

    python benchmarks/int8_gemm.py --threads 1 --json docs/results/edge/int8_gemm.json
    python benchmarks/int8_gemm.py --threads 1 --no-amx --json docs/results/edge/int8_gemm_no_amx.json

``--no-amx`` keeps the process off Intel AMX (``timing.deny_amx``), as on a CPU with AVX-512 VNNI and no
matrix unit: onnxruntime's int8 GEMMs use AMX where the CPU has it; phones have no AMX.
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


def pte_linear(linear: torch.nn.Linear, x: torch.Tensor, path: Path):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime
    from torch.export import export
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))
    prepared = prepare_pt2e(export(linear, (x,), strict=False).module(), quantizer)
    prepared(x)
    program = export(convert_pt2e(prepared), (x,), strict=False)
    path.write_bytes(to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)
    method = Runtime.get().load_program(path).load_method("forward")
    return lambda: method.execute([x])


def ort_linear(linear: torch.nn.Linear, x: torch.Tensor, path: Path, threads: int):
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    torch.onnx.export(linear, (x,), path, input_names=["x"], dynamo=False)
    quantize_dynamic(str(path), str(path.with_suffix(".int8.onnx")), weight_type=QuantType.QInt8, per_channel=True)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path.with_suffix(".int8.onnx")), options, providers=["CPUExecutionProvider"])
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
    ap.add_argument("--no-amx", action="store_true", help="keep the process off Intel AMX (as a phone is)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    amx_denied = deny_amx() if args.no_amx else False
    from executorch.extension.pybindings import portable_lib

    portable_lib._unsafe_reset_threadpool(args.threads)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows = []
    with tempfile.TemporaryDirectory(prefix="albertlm-gemm-") as work, torch.no_grad():
        for k, n in SHAPES:
            linear, x = torch.nn.Linear(k, n).eval(), torch.randn(1, args.seq_len, k)
            ms = median_ms({"xnnpack_pte_int8": pte_linear(linear, x, Path(work) / f"{k}x{n}.pte"),
                            "onnxruntime_int8": ort_linear(linear, x, Path(work) / f"{k}x{n}.onnx", args.threads)},
                           args.rounds)  # fmt: skip
            ratio = round(ms["xnnpack_pte_int8"] / ms["onnxruntime_int8"], 2)
            rows.append({"in": k, "out": n, "p50_ms": ms, "ratio": ratio})
            print(f"{args.seq_len} x {k} -> {n}: .pte {ms['xnnpack_pte_int8']} ms, onnxruntime "
                  f"{ms['onnxruntime_int8']} ms ({ratio}x)", flush=True)  # fmt: skip
    from importlib.metadata import version

    import onnxruntime

    out = {"what": "one dynamic-int8 linear, XNNPACK (.pte) vs onnxruntime, batch 1", "machine": machine(),
           "threads": args.threads, "amx_denied": amx_denied, "seq_len": args.seq_len, "rounds": args.rounds,
           "linears": rows,
           "versions": {"torch": torch.__version__, "executorch": version("executorch"),
                        "onnxruntime": onnxruntime.__version__}}  # fmt: skip
    write_result(out, args.json, "docs/results/edge/README.md reads it")


if __name__ == "__main__":
    main()
