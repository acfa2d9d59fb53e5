"""Does an int8 answer depend on the other rows of its batch? Each dev sentence answered alone (batch 1) and in
the Predictor's length-bucketed batches, on each int8 engine of the given exports, with fp32 beside it.

For every engine: the largest |score alone - score batched| and the labels that differ, and the dev accuracy
of int8 (batched) against fp32. onnxruntime's dynamic int8 picks one activation scale per batch, so a row's
answer moves with the rows around it; the .pte's dynamic int8 is quantized per row by XNNPACK, and OpenVINO's
static int8 has fixed ranges.

    python benchmarks/int8_batch.py --onnx runs/sst2-onnx --pte runs/sst2-pte --data ../shared/data/glue_sst2 \\
        --json docs/results/edge/int8_batch.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from albertlm.deploy.inference import Predictor
from albertlm.tasks import RowPolicy, read_split


def measure(folder: Path, engine: str, examples: list, limit_alone: int) -> dict:
    fp32 = Predictor.load(folder, engine=engine, precision="fp32")
    int8 = Predictor.load(folder, engine=engine, precision="int8")
    gold = [ex.label for ex in examples]
    ref = fp32.predict(examples)
    batched = int8.predict(examples)
    alone = [int8.predict([ex])[0] for ex in examples[:limit_alone]]
    batched_head = batched[: len(alone)]
    diffs = [abs(a["score"] - b["score"]) if a["label"] == b["label"] else abs(a["score"] - (1 - b["score"]))
             for a, b in zip(alone, batched_head, strict=True)]  # fmt: skip
    return {
        "engine": engine,
        "examples": len(examples),
        "alone_vs_batched_examples": len(alone),
        "alone_vs_batched_max_abs_score_diff": float(max(diffs)),
        "alone_vs_batched_labels_differing": sum(a["label"] != b["label"]
                                                 for a, b in zip(alone, batched_head, strict=True)),  # fmt: skip
        "fp32_accuracy": float(np.mean([r["label"] == g for r, g in zip(ref, gold, strict=True)])),
        "int8_accuracy": float(np.mean([r["label"] == g for r, g in zip(batched, gold, strict=True)])),
        "int8_labels_differing_from_fp32": sum(a["label"] != b["label"] for a, b in zip(ref, batched, strict=True)),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--onnx", type=Path, help="an `albertlm export --quantize int8` folder")
    p.add_argument("--pte", type=Path, help="an `albertlm export --format executorch --quantize int8` folder")
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--alone", type=int, default=872, help="how many dev examples to also answer alone")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    probe = Predictor.load(args.onnx or args.pte, engine="onnx" if args.onnx else "executorch", precision="fp32")
    examples, path = read_split(probe.task, args.data, "dev", RowPolicy(False))
    out = {"data": str(path), "date": time.strftime("%Y-%m-%d"), "load_average": os.getloadavg(), "engines": []}
    for folder, engine in ((args.onnx, "onnx"), (args.pte, "executorch")):
        if folder is not None:
            out["engines"].append(measure(folder, engine, examples, args.alone))
            print(json.dumps(out["engines"][-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
