"""Does the graph we hand OpenVINO matter? Our onnxruntime-fused export, our plain-ONNX export
(``--graph standard``) and the HF peer's torch.onnx.export graph, each under OpenVINO in f32, bf16 and NNCF
static int8 (the same 64 calibration sequences), albert-base-v2 shape with random weights, seq 128,
2 threads, medians of alternating runs. Other albertlm processes on the machine are paused (SIGSTOP) while
it times and resumed after.

    python docs/results/deploy/openvino-int8/graphs.py WORKDIR docs/results/deploy/openvino-int8/graphs.json
"""

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "benchmarks"))
import inference as bench  # noqa: E402  (benchmarks/inference.py: the peer's build)

import albertlm  # noqa: E402
from albertlm.config import AlbertConfig  # noqa: E402
from albertlm.deploy.engines import OpenVinoSession  # noqa: E402
from albertlm.deploy.export import export_onnx, quantize_openvino_int8  # noqa: E402


def main(work: Path, out: Path) -> None:
    torch.manual_seed(0)
    if not (work / "model" / "config.json").exists():
        config = AlbertConfig.from_preset("albert-base-v2", id2label={0: "0", 1: "1"})
        albertlm.AlbertForSequenceClassification(config).save_pretrained(work / "model")
    config = AlbertConfig.load(work / "model")
    calibration = bench.random_calibration(config.vocab_size, 64, 128)
    for graph, folder in (("ort", "ours"), ("standard", "std")):
        if not (work / folder / "model.onnx").exists():
            export_onnx(work / "model", work / folder, graph=graph)
    if not (work / "peer" / "peer.onnx").exists():
        bench.build_peer(work / "model", work / "peer", 2)
    graphs = {
        "ours-ort": work / "ours" / "model.onnx",
        "ours-standard": work / "std" / "model.onnx",
        "peer": work / "peer" / "peer.onnx",
    }
    sessions = {}
    for name, path in graphs.items():
        xml = work / f"{name}-int8.xml"
        if not xml.exists():
            quantize_openvino_int8(path, calibration, xml)
        sessions[f"{name} int8"] = OpenVinoSession(xml, 2, "bf16", ["logits"])
        sessions[f"{name} f32"] = OpenVinoSession(path, 2, "f32", ["logits"])
        sessions[f"{name} bf16"] = OpenVinoSession(path, 2, "bf16", ["logits"])
    others = subprocess.run(["pgrep", "-f", "bin/albertlm"], capture_output=True, text=True).stdout.split()
    stopped = []
    for pid in map(int, others):
        try:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        except ProcessLookupError:
            pass
    try:
        time.sleep(3)
        result = {"machine": bench.machine(), "ms_p50": {}}
        for batch, rounds in ((1, 30), (32, 5)):
            ids = np.random.default_rng(batch).integers(5, config.vocab_size, (batch, 128))
            feed = bench.feed_of(ids)
            times = bench.alternate({k: (lambda s=s, feed=feed: s(feed)) for k, s in sessions.items()}, rounds)
            result["ms_p50"][f"batch {batch}"] = {k: round(statistics.median(v) * 1000, 1) for k, v in times.items()}
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    for batch, row in result["ms_p50"].items():
        print(batch + ": " + ", ".join(f"{k} {v}" for k, v in row.items()))
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
