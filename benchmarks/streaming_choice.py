"""Why `pretrain --data s3://` fetches whole shard files instead of streaming through litdata: the two side by
side, from the same moto S3 server on 127.0.0.1, on the same instances, held to what issue 31 asks of the data
path (the samples of a global step depend on the seed and the step only, whatever the world size, fresh or
resumed at another world size).

  order   fresh runs at world size 2 and 4 against world size 1 (global batch --batch; one loader per rank,
          litdata's own rank split; also with its num_canonical_nodes=1): how many of the first --steps global
          batches hold the same instances; then a run at 2 processes stopped after half the steps and resumed
          on 1 (litdata's elastic state_dict): how many batches after the resume are the uninterrupted run's.
          Ours: StepBatches, the sampler `albertlm pretrain` draws from.
  read    --reads instances, cold (an empty cache: the whole-file fetch, or litdata's chunk downloads, inside
          the time) and warm (cached), instances/s; ours in a seeded random order over the build, litdata in
          its own shuffled order (chunk by chunk, which favours it).

    pip install --no-deps litdata lightning-utilities obstore   # only this comparison needs them (litdata's
                                                                # own requirements would replace torch)
    python benchmarks/streaming_choice.py --data runs/ee/static --json docs/results/distributed/streaming_choice.json

The litdata copy is made with ``litdata.optimize`` from the build's instances (of epoch 0: litdata items are
fixed, so a dynamic build's fresh pairs and masks every epoch cannot be expressed); use a static build, so that
both sides read stored instances.
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
from object_store import s3_bucket  # benchmarks/object_store.py, beside this script
from timing import machine, write_result

_SOURCE: dict = {}


def _item(i: int) -> dict:
    """One instance as a litdata item (run in litdata.optimize's worker processes)."""
    from albertlm.data import PretrainingDataset

    if "ds" not in _SOURCE:
        _SOURCE["ds"] = PretrainingDataset(os.environ["STREAMING_CHOICE_DATA"])
    x = _SOURCE["ds"][i]
    return {"id": i, "input_ids": x["input_ids"].astype(np.int32), "labels": x["labels"].astype(np.int32),
            "token_type_ids": x["token_type_ids"].astype(np.int8), "sop": int(x["sentence_order_label"])}  # fmt: skip


def lit_dataset(where: str, world: int, rank: int, seed: int, cache: Path | None = None, **options):
    from litdata import StreamingDataset
    from litdata.utilities.env import _DistributedEnv

    ds = StreamingDataset(where, shuffle=True, seed=seed, drop_last=True, cache_dir=str(cache) if cache else None,
                          **options)  # fmt: skip
    ds.distributed_env = _DistributedEnv(world, rank, 1)  # what torch.distributed would report on that rank
    return ds


def _ids(items: list[dict]) -> list[int]:
    return [int(x["id"]) for x in items]


def lit_steps(where: str, world: int, batch: int, steps: int, seed: int, resume_at: int | None = None,
              resume_world: int | None = None, **options) -> list[set[int]]:  # fmt: skip
    """The instance ids of each global batch: every rank's loader gives batch // world per step; with
    ``resume_at`` the run stops there (rank 0's loader state) and goes on at ``resume_world``."""
    from litdata import StreamingDataLoader

    def run(w: int, n: int, state: dict | None = None) -> tuple[list[set[int]], dict]:
        per_rank, last = [], None
        for r in range(w):
            ds = lit_dataset(where, w, r, seed, **options)
            loader = StreamingDataLoader(ds, batch_size=batch // w, num_workers=0, collate_fn=_ids)
            if state is not None:
                loader.load_state_dict(state)
            it = iter(loader)
            per_rank.append([set(next(it)) for _ in range(n)])
            if r == 0:
                last = loader.state_dict()
        return [set().union(*(p[k] for p in per_rank)) for k in range(n)], last

    if resume_at is None:
        return run(world, steps)[0]
    first, state = run(world, resume_at)
    return first + run(resume_world or world, steps - resume_at, state)[0]


def ours_steps(n: int, world: int, batch: int, steps: int, seed: int, resume_at: int | None = None,
               resume_world: int | None = None) -> list[set[int]]:  # fmt: skip
    """The same for albertlm's sampler (StepBatches, what pretraining draws from): each rank's share of every
    global batch, unioned; a resume starts the sampler at the saved step, as a checkpoint does."""
    import torch

    from albertlm.training.data_order import StepBatches
    from albertlm.training.distributed import DistInfo
    from albertlm.training.pretrain import PretrainConfig

    class Fixed:  # a build of n fixed instances
        def __len__(self) -> int:
            return n

    def run(w: int, start: int, count: int) -> list[set[int]]:
        cfg = PretrainConfig(out="", data="d", global_batch_size=batch, micro_batch_size=batch // w, seed=seed)
        per = n // batch
        plans = [StepBatches(Fixed(), cfg, DistInfo(w > 1, r, r, w, torch.device("cpu")), 1, *divmod(start, per))
                 for r in range(w)]  # fmt: skip
        return [{i for p in plans for m in p.next() for i in m} for _ in range(count)]

    if resume_at is None:
        return run(world, 0, steps)
    return run(world, 0, resume_at) + run(resume_world or world, resume_at, steps - resume_at)


def same(a: list[set[int]], b: list[set[int]]) -> int:
    return sum(x == y for x, y in zip(a, b, strict=True))


def read_ours(url: str, cache: Path, order: np.ndarray) -> float:
    from albertlm.data import PretrainingDataset
    from albertlm.data.remote import fetch

    t0 = time.perf_counter()
    ds = PretrainingDataset(str(fetch(url, cache_dir=cache)))
    for i in order:
        ds[int(i)]
    return len(order) / (time.perf_counter() - t0)


def read_lit(url: str, cache: Path, n: int, seed: int) -> float:
    t0 = time.perf_counter()
    ds = lit_dataset(url, 1, 0, seed, cache)
    for k, _ in enumerate(ds):
        if k + 1 == n:
            break
    return n / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="a local build (`albertlm data build`)")
    ap.add_argument("--batch", type=int, default=32, help="the global batch of the order comparison")
    ap.add_argument("--steps", type=int, default=40, help="global steps compared")
    ap.add_argument("--reads", type=int, default=20000, help="instances per read pass")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    import boto3
    import litdata
    from litdata import optimize

    from albertlm.data import PretrainingDataset
    from albertlm.data.remote import upload

    n = len(PretrainingDataset(args.data))
    work = Path(tempfile.mkdtemp(prefix="streaming-choice-"))
    stack = contextlib.ExitStack()
    endpoint = stack.enter_context(s3_bucket("bench", "moto", work))
    os.environ["STREAMING_CHOICE_DATA"] = str(Path(args.data).resolve())  # (for litdata.optimize's workers)
    import litdata.streaming.downloader as lit_downloader  # its obstore client refuses plain http (loopback here)

    lit_downloader._OBSTORE_CLIENT_OPTIONS = {**lit_downloader._OBSTORE_CLIENT_OPTIONS, "allow_http": True}
    s3 = boto3.client("s3", endpoint_url=endpoint)
    try:
        lit_local = work / "litdata"
        t0 = time.perf_counter()
        optimize(fn=_item, inputs=list(range(n)), output_dir=str(lit_local), chunk_bytes="4MB", num_workers=2)
        convert_s = time.perf_counter() - t0
        for f in sorted(lit_local.iterdir()):
            s3.upload_file(str(f), "bench", f"litdata/{f.name}")
        upload(Path(args.data), "s3://bench/shards")

        B, S, seed = args.batch, args.steps, args.seed
        order = {"litdata": {}, "albertlm": {}}
        lit_ref, our_ref = lit_steps(str(lit_local), 1, B, S, seed), ours_steps(n, 1, B, S, seed)
        for w in (2, 4):
            order["litdata"][f"fresh_world_{w}_same_as_1"] = same(lit_steps(str(lit_local), w, B, S, seed), lit_ref)
            order["albertlm"][f"fresh_world_{w}_same_as_1"] = same(ours_steps(n, w, B, S, seed), our_ref)
            # litdata's knob for a shuffle that does not follow the world size (the first run's node count)
            canonical = [lit_steps(str(lit_local), v, B, S, seed, num_canonical_nodes=1) for v in (1, w)]
            order["litdata"][f"fresh_world_{w}_same_as_1_num_canonical_nodes_1"] = same(*canonical)
        lit2, our2 = lit_steps(str(lit_local), 2, B, S, seed), ours_steps(n, 2, B, S, seed)
        lit_resumed = lit_steps(str(lit_local), 2, B, S, seed, resume_at=S // 2, resume_world=1)
        our_resumed = ours_steps(n, 2, B, S, seed, resume_at=S // 2, resume_world=1)
        after = S - S // 2  # the batches after the resume
        key = f"resumed_2_to_1_same_as_uninterrupted_of_{after}"
        order["litdata"][key] = same(lit_resumed[-after:], lit2[-after:])
        order["albertlm"][key] = same(our_resumed[-after:], our2[-after:])
        print(f"  order over {S} global batches of {B}: {json.dumps(order)}", file=sys.stderr)

        reads = {k: [] for k in ("albertlm_cold", "albertlm_warm", "litdata_cold", "litdata_warm")}
        perm = np.random.default_rng(seed).permutation(n)[: args.reads]
        for r in range(args.rounds):
            ours_cache, lit_cache = work / f"ours{r}", work / f"lit{r}"
            reads["albertlm_cold"].append(read_ours("s3://bench/shards", ours_cache, perm))
            reads["albertlm_warm"].append(read_ours("s3://bench/shards", ours_cache, perm))
            reads["litdata_cold"].append(read_lit("s3://bench/litdata", lit_cache, args.reads, seed))
            reads["litdata_warm"].append(read_lit("s3://bench/litdata", lit_cache, args.reads, seed))
            print("  read " + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in reads.items()), file=sys.stderr)
    finally:
        stack.close()
        shutil.rmtree(work, ignore_errors=True)  # this script's own scratch copies
    med = statistics.median
    result = {"machine": machine(), "command": " ".join(sys.argv), "litdata": litdata.__version__, "instances": n,
              "global_batch": args.batch, "steps": args.steps, "litdata_convert_s": convert_s, "order": order,
              "read_instances_per_s": {k: med(v) for k, v in reads.items()}, "rounds": args.rounds}  # fmt: skip
    print(json.dumps(result, indent=1))
    write_result(result, args.json, "read docs/results/distributed/README.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
