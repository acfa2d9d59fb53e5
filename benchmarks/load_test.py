"""Load test of ``albertlm serve``: start it on loopback, send a bounded number of concurrent requests,
report errors (must be 0), latency p50/p95 and requests/s, stop the server.

    nice -n 5 python benchmarks/load_test.py --model runs/deploy/sst2/onnx --engine onnx
    nice -n 5 python benchmarks/load_test.py --model runs/deploy/sst2/model --engine torch --clients 8 --requests 25

Each of ``--clients`` threads sends ``--requests`` POSTs of ``--texts-per-request`` SST-2 dev sentences
to /v1/classify over its own keep-alive connection. The server only ever binds 127.0.0.1.
"""

from __future__ import annotations

import argparse
import csv
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SST2_DEV = ROOT.parent / "shared" / "data" / "glue_sst2" / "dev.tsv"
HOST = "127.0.0.1"  # loopback only: a load test must never expose the server


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def sentences() -> list[str]:
    if not SST2_DEV.is_file():
        return [f"sentence number {i} of a synthetic load test ." for i in range(872)]
    with open(SST2_DEV, encoding="utf-8") as f:
        return [r["sentence"].strip() for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]


def wait_healthy(httpx, url: str, server: subprocess.Popen, timeout: float = 120.0) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"server exited with code {server.returncode} before becoming healthy")
        try:
            return httpx.get(f"{url}/health", timeout=2.0).json()
        except httpx.TransportError:
            time.sleep(0.5)
    raise SystemExit(f"server not healthy after {timeout:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="model dir (torch) or exported dir (onnx)")
    ap.add_argument("--engine", choices=["torch", "onnx"], default="onnx")
    ap.add_argument("--threads", type=int, default=2, help="server intra-op threads")
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients")
    ap.add_argument("--requests", type=int, default=25, help="requests per client")
    ap.add_argument("--texts-per-request", type=int, default=4)
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args()
    import httpx

    port = free_port()
    url = f"http://{HOST}:{port}"
    cmd = [sys.executable, "-m", "albertlm", "serve", "--model", args.model, "--engine", args.engine,
           "--host", HOST, "--port", str(port), "--threads", str(args.threads)]  # fmt: skip
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        health = wait_healthy(httpx, url, server)
        texts = sentences()
        latencies: list[float] = []
        errors: list[str] = []
        lock = threading.Lock()

        def client(c: int) -> None:
            with httpx.Client(base_url=url, timeout=60.0) as http:
                for r in range(args.requests):
                    k = (c * args.requests + r) * args.texts_per_request
                    batch = [texts[(k + j) % len(texts)] for j in range(args.texts_per_request)]
                    start = time.perf_counter()
                    try:
                        resp = http.post("/v1/classify", json={"texts": batch})
                        ok = resp.status_code == 200 and len(resp.json()["results"]) == len(batch)
                        problem = None if ok else f"HTTP {resp.status_code}: {resp.text[:200]}"
                    except httpx.HTTPError as e:
                        problem = f"{type(e).__name__}: {e}"
                    with lock:
                        latencies.append(time.perf_counter() - start)
                        if problem:
                            errors.append(problem)

        wall = time.perf_counter()
        threads = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - wall
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
    total = args.clients * args.requests
    result = {
        "architecture": health["architecture"], "engine": args.engine, "clients": args.clients,
        "requests": total, "texts_per_request": args.texts_per_request, "errors": len(errors),
        "p50_ms": 1e3 * float(np.percentile(latencies, 50)), "p95_ms": 1e3 * float(np.percentile(latencies, 95)),
        "requests_per_s": total / wall, "texts_per_s": total * args.texts_per_request / wall,
    }  # fmt: skip
    print(json.dumps(result, indent=2))
    for e in errors[:5]:
        print("error:", e, file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
