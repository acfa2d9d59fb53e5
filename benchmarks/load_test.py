"""Load tests of ``albertlm serve`` on loopback: start it, send requests, report errors (must be 0), latency
p50/p95 and requests/s, stop it. The server only ever binds 127.0.0.1; sentences are SST-2 dev.

Dynamic batching (``--mode compare``): on the same server settings, (a) one client sends single-sentence
requests one at a time (a lone request's latency, and the throughput of one-at-a-time processing), then
(b) ``--clients`` (16) clients send single-sentence requests at once, as fast as they are answered.
Reported: both phases' requests/s and p50/p95, the inputs per batch the server ran (from /stats), and
the ratios: throughput (b) / (a) (target >= 2) and p95 under load / the lone request's p95, and / its p50
(target <= 2). ``--with-unbatched`` repeats both phases on a server with batching off
(``--batch-window-ms 0 --max-batch 1``) for the difference; ``--paced 2`` adds a phase (c): the same
clients pacing themselves to 2x phase (a)'s throughput in all, the latency of carrying twice the load
(16 clients that never wait between requests always queue: mean latency = 16 / throughput).

    nice -n 5 python benchmarks/load_test.py --mode compare --model runs/deploy/sst2/onnx --engine onnx \
        --with-unbatched --json runs/deploy/batching.json
    nice -n 5 python benchmarks/load_test.py --mode compare --model runs/deploy/sst2/onnx --engine onnx \
        --batch-window-ms 0 --max-batch 1                                   # batching off alone
    nice -n 5 python benchmarks/load_test.py --model runs/deploy/sst2/model --engine torch --clients 8 --requests 25

The default ``--mode load``: each of ``--clients`` (8) threads sends ``--requests`` POSTs of
``--texts-per-request`` sentences to /v1/classify over its own keep-alive connection.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from albertlm.deploy.engines import ENGINES

ROOT = Path(__file__).resolve().parents[1]
SST2_DEV = ROOT.parent / "shared" / "data" / "glue_sst2" / "dev.tsv"
HOST = "127.0.0.1"  # loopback only: a load test must never expose the server
OFF = (0.0, 1)  # --batch-window-ms, --max-batch: batching off


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def sentences() -> list[str]:
    if not SST2_DEV.is_file():
        return [f"sentence number {i} of a synthetic load test ." for i in range(872)]
    with open(SST2_DEV, encoding="utf-8") as f:
        return [r["sentence"].strip() for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]


def machine() -> dict:
    """What the numbers were measured on: the CPU, the cores this process may use, how busy they were."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"cpu": cpu, "logical_cpus": os.cpu_count(), "usable_cpus": usable, "load_average_1min": load,
            "python": platform.python_version()}  # fmt: skip


class Server:
    """``albertlm serve`` in a subprocess on a free loopback port, healthy once started."""

    def __init__(self, args: argparse.Namespace, window_ms: float | None = None, max_batch: int | None = None):
        import httpx

        self.httpx = httpx
        self.url = f"http://{HOST}:{free_port()}"
        cmd = [sys.executable, "-m", "albertlm", "serve", "--model", args.model, "--engine", args.engine,
               "--host", HOST, "--port", self.url.rsplit(":", 1)[1], "--threads", str(args.threads)]  # fmt: skip
        if window_ms is not None:  # else the server's default
            cmd += ["--batch-window-ms", str(window_ms)]
        if max_batch is not None:
            cmd += ["--max-batch", str(max_batch)]
        self.process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def __enter__(self) -> Server:
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"server exited with code {self.process.returncode} before becoming healthy:\n"
                                 f"{self.process.stderr.read()[-2000:]}")  # fmt: skip
            try:
                self.health = self.httpx.get(f"{self.url}/health", timeout=2.0).json()
                return self
            except self.httpx.TransportError:
                time.sleep(0.5)
        raise SystemExit("server not healthy after 120 s")

    def stats(self) -> dict:
        return self.httpx.get(f"{self.url}/stats", timeout=10.0).json()

    def __exit__(self, *_: object) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()


def run_clients(url: str, clients: int, requests: int, texts_for, interval: float | None = None) -> dict:
    """``clients`` threads, each sending ``requests`` POSTs to /v1/classify over its own keep-alive connection;
    ``texts_for(client, i)`` is a request's sentences. With ``interval``, each client sends on a schedule (one
    request every ``interval`` s, latency counted from the scheduled time) instead of as soon as answered."""
    import httpx

    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def client(c: int) -> None:
        with httpx.Client(base_url=url, timeout=120.0) as http:
            due = time.perf_counter() + (interval or 0) * c / clients  # spread the clients over one interval
            for i in range(requests):
                if interval is not None:
                    time.sleep(max(0.0, due - time.perf_counter()))
                texts = texts_for(c, i)
                start = due if interval is not None else time.perf_counter()
                try:
                    resp = http.post("/v1/classify", json={"texts": texts})
                    ok = resp.status_code == 200 and len(resp.json()["results"]) == len(texts)
                    problem = None if ok else f"HTTP {resp.status_code}: {resp.text[:200]}"
                except httpx.HTTPError as e:
                    problem = f"{type(e).__name__}: {e}"
                with lock:
                    latencies.append(time.perf_counter() - start)
                    if problem:
                        errors.append(problem)
                due += interval or 0

    wall = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - wall
    for e in errors[:5]:
        print("error:", e, file=sys.stderr)
    return {"clients": clients, "requests": clients * requests, "errors": len(errors), "seconds": wall,
            "requests_per_s": clients * requests / wall, "p50_ms": 1e3 * float(np.percentile(latencies, 50)),
            "p95_ms": 1e3 * float(np.percentile(latencies, 95))}  # fmt: skip


def phase(server: Server, **kw) -> dict:
    """One run of clients, with the inputs per batch the server ran meanwhile."""
    before = server.stats()
    result = run_clients(server.url, **kw)
    after = server.stats()
    batches = after["batches"] - before["batches"]
    result["inputs_per_batch"] = (after["examples"] - before["examples"]) / batches if batches else None
    return result


# --------------------------------------------------------------------------- compare: batching under concurrency
def compare(args: argparse.Namespace) -> dict:
    texts = sentences()

    def one(c: int, i: int) -> list[str]:  # a single sentence, a different one per client and request
        return [texts[(c * 7919 + i) % len(texts)]]

    settings = [(args.batch_window_ms, args.max_batch), *([OFF] if args.with_unbatched else [])]
    runs = []
    for window_ms, max_batch in settings:
        with Server(args, window_ms, max_batch) as server:
            configured = server.stats()
            run_clients(server.url, 1, args.warmup, one)  # first calls allocate; not measured
            run_clients(server.url, args.clients, 2, one)
            lone = phase(server, clients=1, requests=args.lone_requests, texts_for=one)
            loaded = phase(server, clients=args.clients, requests=args.requests, texts_for=one)
            run = {"batch_window_ms": configured["batch_window_ms"], "max_batch": configured["max_batch"],
                   "architecture": server.health["architecture"], "one_at_a_time": lone, "concurrent": loaded}
            if args.paced:
                rate = args.paced * lone["requests_per_s"]
                run["paced"] = phase(server, clients=args.clients, requests=args.requests, texts_for=one,
                                     interval=args.clients / rate)  # fmt: skip
                run["paced"]["offered_requests_per_s"] = rate
            run["ratios"] = ratios(run)
            runs.append(run)
    return {"mode": "compare", "machine": machine(), "model": args.model, "engine": args.engine,
            "server_threads": args.threads, "runs": runs}  # fmt: skip


def ratios(run: dict) -> dict:
    lone, loaded = run["one_at_a_time"], run["concurrent"]
    out = {"throughput_concurrent_over_one_at_a_time": loaded["requests_per_s"] / lone["requests_per_s"],
           "p95_concurrent_over_lone_p95": loaded["p95_ms"] / lone["p95_ms"],
           "p95_concurrent_over_lone_p50": loaded["p95_ms"] / lone["p50_ms"]}  # fmt: skip
    if "paced" in run:
        out["throughput_paced_over_one_at_a_time"] = run["paced"]["requests_per_s"] / lone["requests_per_s"]
        out["p95_paced_over_lone_p95"] = run["paced"]["p95_ms"] / lone["p95_ms"]
    return out


def print_compare(result: dict) -> None:
    m = result["machine"]
    print(f"machine: {m['cpu']}, {m['usable_cpus']} of {m['logical_cpus']} logical CPUs usable, load average "
          f"{m['load_average_1min']:.2f} at the start; server: {result['engine']} engine, --threads "
          f"{result['server_threads']}, {result['model']}")  # fmt: skip
    print("| server batching | phase | clients | requests | errors | req/s | p50 ms | p95 ms | inputs/batch |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run in result["runs"]:
        name = (f"window {run['batch_window_ms']:g} ms, max {run['max_batch']}" if run["max_batch"] > 1
                else "off (max 1)")  # fmt: skip
        for key in ("one_at_a_time", "concurrent", "paced"):
            if key not in run:
                continue
            p = run[key]
            label = {"one_at_a_time": "one at a time", "concurrent": f"{p['clients']} at once",
                     "paced": f"paced to {p.get('offered_requests_per_s', 0):.1f} req/s"}[key]  # fmt: skip
            per_batch = "-" if p["inputs_per_batch"] is None else f"{p['inputs_per_batch']:.2f}"
            print(f"| {name} | {label} | {p['clients']} | {p['requests']} | {p['errors']} | {p['requests_per_s']:.1f} "
                  f"| {p['p50_ms']:.1f} | {p['p95_ms']:.1f} | {per_batch} |")  # fmt: skip
    for run in result["runs"]:
        r = run["ratios"]
        line = (f"{'batching off' if run['max_batch'] == 1 else 'batching on'}: throughput concurrent / one at a "
                f"time {r['throughput_concurrent_over_one_at_a_time']:.2f}x (target >= 2); p95 under load / lone "
                f"p95 {r['p95_concurrent_over_lone_p95']:.2f}x, / lone p50 {r['p95_concurrent_over_lone_p50']:.2f}x "
                "(target <= 2; lone = the one-at-a-time phase)")  # fmt: skip
        if "throughput_paced_over_one_at_a_time" in r:
            line += (f"; paced: throughput {r['throughput_paced_over_one_at_a_time']:.2f}x at p95 / lone p95 "
                     f"{r['p95_paced_over_lone_p95']:.2f}x")  # fmt: skip
        print(line)


# --------------------------------------------------------------------------- load: fixed-size requests
def load(args: argparse.Namespace) -> dict:
    texts = sentences()
    n = args.texts_per_request

    def batch(c: int, i: int) -> list[str]:
        k = (c * args.requests + i) * n
        return [texts[(k + j) % len(texts)] for j in range(n)]

    with Server(args, args.batch_window_ms, args.max_batch) as server:
        result = phase(server, clients=args.clients, requests=args.requests, texts_for=batch)
    return {"architecture": server.health["architecture"], "engine": args.engine, "texts_per_request": n,
            **result, "texts_per_s": result["requests_per_s"] * n, "machine": machine()}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["load", "compare"], default="load",
                    help="load: fixed-size requests from --clients; compare: one client one at a time vs --clients "
                    "at once, single sentences")  # fmt: skip
    ap.add_argument("--model", required=True, help="model dir (torch) or exported dir (onnx)")
    ap.add_argument("--engine", choices=ENGINES, default="onnx")
    ap.add_argument("--threads", type=int, default=2, help="server intra-op threads")
    ap.add_argument("--batch-window-ms", type=float, default=None, help="server flag (default: the server's)")
    ap.add_argument("--max-batch", type=int, default=None, help="server flag (default: the server's)")
    ap.add_argument("--clients", type=int, default=None, help="concurrent clients (default: load 8, compare 16)")
    ap.add_argument("--requests", type=int, default=25, help="requests per concurrent client")
    ap.add_argument("--texts-per-request", type=int, default=4, help="load: sentences per request")
    ap.add_argument("--lone-requests", type=int, default=100, help="compare: requests sent one at a time")
    ap.add_argument("--warmup", type=int, default=10, help="compare: unmeasured requests first")
    ap.add_argument("--with-unbatched", action="store_true",
                    help="compare: also run a server with batching off (--batch-window-ms 0 --max-batch 1)")
    ap.add_argument("--paced", type=float, default=None, metavar="X",
                    help="compare: also a phase where the clients together offer X times the one-at-a-time rate")
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args()
    if args.clients is None:
        args.clients = 16 if args.mode == "compare" else 8
    result = compare(args) if args.mode == "compare" else load(args)
    if args.mode == "compare":
        print_compare(result)
    else:
        print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    phases = [run[k] for run in result["runs"] for k in ("one_at_a_time", "concurrent", "paced") if k in run] \
        if args.mode == "compare" else [result]  # fmt: skip
    sys.exit(1 if any(p["errors"] for p in phases) else 0)


if __name__ == "__main__":
    main()
