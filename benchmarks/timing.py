"""Timing helpers the side-by-side benchmarks share: device sync and alternating, warmed-up runs."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_once(fn: Callable[[], object], device: str) -> float:
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def measure(runs: dict[str, Callable[[], object]], reps: int, warmup: int, device: str) -> dict[str, list[float]]:
    """Warm every engine up, then time them in alternation so machine noise hits all of them alike."""
    for fn in runs.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(reps):
        for k, fn in runs.items():
            times[k].append(time_once(fn, device))
    return times
