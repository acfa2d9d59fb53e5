"""Shards from object storage against the same shards on local disk, in one process: an S3-compatible server
started here on 127.0.0.1 (`--server moto`, or `seaweedfs`: a storage system people deploy), the build uploaded
as `data build --out s3://...` does, then

  fetch      cold: the whole build into an empty cache (MB/s); warm: the same call again (a cache hit)
  read       instances/s of PretrainingDataset over a seeded random permutation, local folder vs the cached copy
  pretrain   tokens/s of `albertlm pretrain` steps from --data s3://... vs the local folder (alternated, medians)

    python benchmarks/object_store.py --data runs/ee/shards --json docs/results/distributed/object_store.json
    python benchmarks/object_store.py --data runs/ee/shards --server seaweedfs \
        --json docs/results/distributed/object_store_seaweedfs.json

Loopback has no network latency or bandwidth limit: the fetch rate is the server's and s3fs's, an upper bound
of what a store across a network gives; the read and step numbers do not depend on the store (the loop reads the cache).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from timing import machine, write_result  # benchmarks/timing.py, beside this script

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from s3_servers import KEY, SECRET, moto_server, seaweedfs  # noqa: E402 - the object-storage tests' servers

from albertlm.cli import main as cli


@contextlib.contextmanager
def s3_bucket(bucket: str, server: str, work: Path):
    """An S3 server of tests/s3_servers.py (moto's, or SeaweedFS with its data in ``work``) on free loopback
    ports with ``bucket`` made and the AWS_* variables every S3 client reads set for it; yields its endpoint."""
    import boto3

    with moto_server() if server == "moto" else seaweedfs(work / "seaweedfs") as endpoint:
        os.environ.update(AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET, AWS_DEFAULT_REGION="us-east-1",
                          AWS_ENDPOINT_URL=endpoint)  # fmt: skip
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
        yield endpoint


def read_rate(path: str, n: int, seed: int = 0) -> float:
    from albertlm.data import PretrainingDataset

    ds = PretrainingDataset(path)
    order = np.random.default_rng(seed).permutation(len(ds))[:n]
    t0 = time.perf_counter()
    for i in order:
        ds[int(i)]
    return n / (time.perf_counter() - t0)


def step_rate(data: str, out: Path, steps: int) -> float:
    args = ["pretrain", "--data", data, "--out", str(out), "--max-steps", str(steps), "--global-batch-size", "16",
            "--micro-batch-size", "16", "--save-every", "100000", "--eval-every", "100000", "--log-every", "1",
            "--no-progress", "--overwrite", "--set=hidden_size=128", "--set=num_attention_heads=2",
            "--set=intermediate_size=512", "--set=num_hidden_layers=4"]  # fmt: skip
    assert cli(args) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return statistics.median(r["tokens_per_s"] for r in rows[1:] if "tokens_per_s" in r)  # (step 1 warms up)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="a local build (`albertlm data build`)")
    ap.add_argument("--reads", type=int, default=20000, help="instances read per read measurement")
    ap.add_argument("--steps", type=int, default=8, help="pretraining steps per run")
    ap.add_argument("--rounds", type=int, default=3, help="alternated rounds of each measurement")
    ap.add_argument("--server", choices=("moto", "seaweedfs"), default="moto", help="the S3 server started here")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    from albertlm.data.remote import fetch, upload

    work = Path(tempfile.mkdtemp(prefix="objstore-bench-"))  # this script's scratch: caches, runs, the server's data
    os.environ["ALBERTLM_CACHE"] = str(work / "cache")
    url = "s3://bench/shards"
    stack = contextlib.ExitStack()
    try:
        stack.enter_context(s3_bucket("bench", args.server, work))
        t0 = time.perf_counter()
        upload(Path(args.data), url)
        up = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in Path(args.data).rglob("*.bin"))
        cold, warm = [], []
        for r in range(args.rounds):
            t0 = time.perf_counter()
            local = fetch(url, cache_dir=work / f"cold{r}")
            cold.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            fetch(url, cache_dir=work / f"cold{r}")
            warm.append(time.perf_counter() - t0)
        reads = {"local": [], "cached": []}
        steps = {"local": [], "s3": []}
        for _ in range(args.rounds):
            reads["local"].append(read_rate(args.data, args.reads))
            reads["cached"].append(read_rate(str(local), args.reads))
            steps["local"].append(step_rate(args.data, work / "run-local", args.steps))
            steps["s3"].append(step_rate(url, work / "run-s3", args.steps))
            print(f"  read {reads['local'][-1]:,.0f} / {reads['cached'][-1]:,.0f} instances/s, pretrain "
                  f"{steps['local'][-1]:,.0f} / {steps['s3'][-1]:,.0f} tokens/s (local / object store)",
                  file=sys.stderr)  # fmt: skip
    finally:
        stack.close()
        shutil.rmtree(work, ignore_errors=True)
    med = statistics.median
    result = {
        "machine": machine(), "command": " ".join(sys.argv), "server": args.server, "build": args.data,
        "build_mb": size / 1e6,
        "upload_s": up, "fetch_cold_s": med(cold), "fetch_cold_mb_per_s": size / 1e6 / med(cold),
        "fetch_warm_s": med(warm),
        "read_instances_per_s": {k: med(v) for k, v in reads.items()},
        "read_ratio_cached_over_local": med(reads["cached"]) / med(reads["local"]),
        "pretrain_tokens_per_s": {k: med(v) for k, v in steps.items()},
        "pretrain_ratio_s3_over_local": med(steps["s3"]) / med(steps["local"]), "rounds": args.rounds,
    }  # fmt: skip
    print(json.dumps(result, indent=1))
    write_result(result, args.json, "read docs/results/distributed/README.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
