"""Peak memory of each phone-sized engine on its own: a fresh process per engine loads it and answers one input.

For each preset shape (random weights, a two-label classifier, as benchmarks/edge.py builds it): the .pte (fp32,
int8) on ExecuTorch's runtime, our ONNX (fp32, int8) on onnxruntime and the model in torch fp32, each loaded by a
new Python process that then answers one input of ``--seq-len`` token ids (batch 1); reported: that process's
peak resident memory (``VmHWM`` in /proc/self/status; ``ru_maxrss`` would keep the parent's peak across exec)
and, for scale, the same of a process that only imports numpy and albertlm, and of one that also imports
ExecuTorch's Python runtime (whose module imports ExecuTorch's compiler, exir, and torch's: a cost of Python
here, not of a phone's C++ runtime). With each .pte, the activation memory it plans (deploy.json's
``planned_memory_bytes``, allocated when a method loads).

    python benchmarks/edge_memory.py --json docs/results/edge/edge_memory.json   # the three presets
    python benchmarks/edge_memory.py --exits --json docs/results/edge/edge_memory_exits.json

``--exits`` gives the classifiers per-layer exits: the .pte engine then runs full depth as the device's loop
(``embed``, then ``layer_0`` per computed layer), never loading ``forward``, whose computed layers each hold
XNNPACK's own packed copy of the shared layer.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from timing import machine, write_result

import albertlm
from albertlm import AlbertConfig

ENGINES = (("pte", "executorch", "fp32"), ("pte", "executorch", "int8"), ("onnx", "onnx", "fp32"),
           ("onnx", "onnx", "int8"), ("model", "torch", "fp32"), (None, "imports", None),
           (None, "imports-executorch", None))  # fmt: skip
NO_ENGINE = {"imports": "python, numpy and albertlm imported, no engine",
             "imports-executorch": "the same and executorch.runtime imported, no program"}
CHILD = """
import sys
import numpy as np
folder, engine, precision, seq = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ids = np.random.default_rng(1).integers(5, 1000, (1, seq))
feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
if engine == "executorch":
    from albertlm.deploy.executorch import ExecuTorchEngine
    ExecuTorchEngine(folder, 1, precision)(feed)
elif engine == "onnx":
    from albertlm.deploy.engines import OnnxEngine
    OnnxEngine(folder, 1, precision)(feed)
elif engine == "torch":
    from albertlm.deploy.engines import TorchEngine
    TorchEngine.load(folder, 1, precision=precision)(feed)
elif engine == "imports-executorch":
    import albertlm
    from executorch.runtime import Runtime
else:
    import albertlm
hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]
print(int(hwm.split()[1]) / 1024)
"""


def one_preset(preset: str, work: Path, seq: int, exits: bool) -> dict:
    from albertlm.deploy.executorch import export_executorch
    from albertlm.deploy.export import export_onnx

    torch.manual_seed(0)
    config = AlbertConfig.from_preset(preset, id2label={0: "negative", 1: "positive"},
                                      exit_heads="per-layer" if exits else "none")
    albertlm.AlbertForSequenceClassification(config).save_pretrained(work / "model")
    planned = export_executorch(work / "model", work / "pte", quantize="int8")["planned_memory_bytes"]
    export_onnx(work / "model", work / "onnx", quantize="int8")
    peaks = {}
    for folder, engine, precision in ENGINES:
        name = f"{engine}-{precision}" if precision else NO_ENGINE[engine]
        out = subprocess.run([sys.executable, "-c", CHILD, str(work / (folder or "model")), str(engine),
                              str(precision), str(seq)], capture_output=True, text=True, check=True)  # fmt: skip
        peaks[name] = round(float(out.stdout.strip().splitlines()[-1]), 1)
        print(f"{preset}: {name} peak {peaks[name]} MB", flush=True)
    return {"preset": preset, "peak_rss_mb": peaks,
            "pte_planned_memory_mb": {k: round(v / 2**20, 1) for k, v in planned.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", nargs="+", default=["albert-base-v2", "albert-tiny", "albert-zh-tiny"])
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--exits", action="store_true", help="classifiers with per-layer exits")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    results = {"what": "peak resident memory of one process per engine: load, then answer one input",
               "machine": machine(), "date": time.strftime("%Y-%m-%d"), "seq_len": args.seq_len, "exits": args.exits,
               "torch": torch.__version__, "presets": []}  # fmt: skip
    for preset in args.presets:
        with tempfile.TemporaryDirectory(prefix="albertlm-edge-memory-") as work:
            results["presets"].append(one_preset(preset, Path(work), args.seq_len, args.exits))
    print(json.dumps(results["presets"], indent=1))
    write_result(results, args.json, "docs/results/edge/README.md reads it")


if __name__ == "__main__":
    main()
