"""The web export in Chromium against onnxruntime on the same graphs: folder sizes and per-input latency.

For each preset shape (random weights, a two-class head; the page's cost does not depend on what the weights
learned), ``albertlm export --format web`` in fp32 and int8; the page answers N sentences one at a time in
headless Chromium (onnxruntime-web, WebAssembly, one thread: a static server gives no cross-origin isolation),
and ``Predictor`` on onnxruntime answers the same sentences one at a time on 1 thread. Sentences are cut or
repeated to ``--seq`` tokens. Needs ``npm ci --prefix web`` and Debian's chromium.

    python benchmarks/web_page.py --presets albert-tiny albert-base-v2 albert-zh-tiny --json docs/results/web/page.json
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from albertlm.cli import main as cli  # noqa: E402
from albertlm.deploy.inference import Predictor  # noqa: E402
from albertlm.tasks import InferenceSettings, get_task  # noqa: E402
from albertlm.tokenizer import load_tokenizer  # noqa: E402
from albertlm.training.finetune import Settings, build_model, save  # noqa: E402

TOKENIZERS = ROOT / "tests" / "fixtures" / "original"
TASKS = ROOT / "tests" / "data" / "tasks"


def sentences(lang: str, n: int, seq: int) -> list[str]:
    """Dev sentences, each repeated until it is at least ``seq`` tokens (the model cuts it to ``seq``)."""
    path, column = (("glue_sst2/dev.tsv", "sentence") if lang == "en" else ("chnsenticorp/dev.tsv", "text_a"))
    lines = (TASKS / path).read_text(encoding="utf-8").splitlines()
    at = lines[0].split("\t").index(column)
    texts = [line.split("\t")[at] for line in lines[1:]]
    return [" ".join([texts[i % len(texts)]] * (1 + seq // 8)) for i in range(n)]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def in_chromium(folder: Path, texts: list[str], work: Path) -> dict:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        spec = work / "inputs.json"
        spec.write_text(json.dumps([[t, None] for t in texts], ensure_ascii=False), encoding="utf-8")
        url = f"http://127.0.0.1:{server.server_address[1]}/index.html"
        done = subprocess.run(["node", str(ROOT / "web" / "drive.mjs"), url, str(spec)], capture_output=True,
                              text=True, check=True)  # fmt: skip
        return json.loads(done.stdout)
    finally:
        server.shutdown()


def folder_bytes(folder: Path, manifest: dict, precision: str) -> dict[str, int]:
    graphs = manifest["files"][precision]
    runtime = {"ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm", "tokenizers.min.mjs"}
    page = sum(f.stat().st_size for f in folder.iterdir() if f.is_file() and f.name not in runtime)
    exit_files = manifest.get("exit", {}).get("files", {}).get(precision, {})
    other = {manifest["files"][p] for p in manifest["files"] if p != precision}
    other |= {n for p, fs in manifest.get("exit", {}).get("files", {}).items() if p != precision
              for n in [fs["embed"], *fs["layers"]]}  # fmt: skip
    served = page - sum((folder / n).stat().st_size for n in other if (folder / n).is_file())
    return {"graph": (folder / graphs).stat().st_size,
            "exit_graphs": sum((folder / n).stat().st_size for n in [exit_files.get("embed"), *exit_files.get(
                "layers", [])] if n),
            "page_without_runtime": served,
            "runtime": sum((folder / n).stat().st_size for n in runtime if (folder / n).is_file())}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--presets", nargs="+", default=["albert-tiny", "albert-base-v2", "albert-zh-tiny"])
    ap.add_argument("--sentences", type=int, default=20)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for preset in args.presets:
            lang = "zh" if "zh" in preset else "en"
            task, tok = get_task("sst2" if lang == "en" else "chnsenticorp"), load_tokenizer(TOKENIZERS / lang)
            torch.manual_seed(0)
            model = build_model(task, preset, tok, ["0", "1"], {"exit_heads": "per-layer"})
            model_dir = work / preset / "model"
            save(model, tok, model_dir, task, Settings(inference=InferenceSettings(max_seq_length=args.seq)))
            texts = sentences(lang, args.sentences, args.seq)
            for precision in ("fp32", "int8"):
                out = work / preset / precision
                flags = ["--quantize", "int8"] if precision == "int8" else []
                cli(["export", "--model", str(model_dir), "--format", "web", "--out", str(out),
                     "--web-runtime", str(ROOT / "web" / "node_modules"), *flags])  # fmt: skip
                manifest = json.loads((out / "deploy.json").read_text())
                page = in_chromium(out, texts, work)
                predictor = Predictor.load(out, engine="onnx", threads=1, precision=precision)
                examples = [predictor.parse(t) for t in texts]
                predictor.predict(examples[:2])  # warm-up
                ms = []
                for ex in examples:
                    t0 = time.perf_counter()
                    predictor.predict([ex])
                    ms.append((time.perf_counter() - t0) * 1e3)
                row = {"preset": preset, "precision": precision, "seq": args.seq, "sentences": len(texts),
                       "bytes": folder_bytes(out, manifest, precision),
                       "page_ms_median": statistics.median(page["ms"][2:]), "page_load_ms": page["load_ms"],
                       "onnxruntime_ms_median": statistics.median(ms[2:])}  # fmt: skip
                row["page_over_onnxruntime"] = row["page_ms_median"] / row["onnxruntime_ms_median"]
                results.append(row)
                print(json.dumps(row), flush=True)
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else None
    info = {"machine": platform.processor() or platform.machine(), "cpus": torch.get_num_threads(),
            "loadavg_at_end": load, "chromium": subprocess.run(["chromium", "--version"], capture_output=True,
                                                               text=True).stdout.strip(),
            "torch": torch.__version__, "rows": results}  # fmt: skip
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(info, indent=2) + "\n")
    print(f"wrote {len(results)} rows to {args.json}; the table for the README: docs/results/web/README.md")


if __name__ == "__main__":
    main()
