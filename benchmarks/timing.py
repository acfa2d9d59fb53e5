"""Timing helpers the side-by-side benchmarks share: device sync and alternating, warmed-up runs."""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from pathlib import Path

import torch


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def machine() -> str:
    """The CPU's model name (from /proc/cpuinfo), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def deny_amx() -> bool:
    """Keep this process off Intel AMX, the matrix unit of recent Xeons that no phone has: Linux lends AMX's
    registers only to a process that asks (``arch_prctl(ARCH_REQ_XCOMP_PERM)``), and onnxruntime's int8 GEMMs
    ask before choosing their AMX kernels. A seccomp filter makes that request fail, so every library in the
    process falls back to its AVX-512 VNNI kernels. Call before the first engine runs; cannot be undone.
    Returns whether the machine had AMX to deny (x86-64 Linux only)."""
    import ctypes
    import os
    import struct

    if platform.machine() != "x86_64" or "amx_int8" not in Path("/proc/cpuinfo").read_text():
        return False
    ld, jeq, ret = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K
    arch_x86_64, nr_arch_prctl, req_xcomp_perm = 0xC000003E, 158, 0x1023
    allow, eperm = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    program = b"".join(struct.pack("HBBI", *i) for i in (
        (ld, 0, 0, 4), (jeq, 0, 5, arch_x86_64),     # seccomp_data.arch: not x86-64 -> allow
        (ld, 0, 0, 0), (jeq, 0, 3, nr_arch_prctl),   # .nr: not arch_prctl -> allow
        (ld, 0, 0, 16), (jeq, 0, 1, req_xcomp_perm),  # .args[0]: not the AMX request -> allow
        (ret, 0, 0, eperm), (ret, 0, 0, allow)))  # fmt: skip

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    code = ctypes.create_string_buffer(program)
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2
    if libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) or libc.prctl(
            pr_set_seccomp, seccomp_mode_filter, ctypes.byref(SockFprog(len(program) // 8, ctypes.addressof(code))),
            0, 0):  # fmt: skip
        raise OSError(ctypes.get_errno(), f"seccomp filter refused: {os.strerror(ctypes.get_errno())}")
    if libc.syscall(nr_arch_prctl, req_xcomp_perm, 18) != -1:  # 18: XFEATURE_XTILEDATA
        raise RuntimeError("AMX was granted after the filter: AMX stays on")
    return True


def peak_memory(fn: Callable[[], object], device: str) -> float | None:
    """GiB of CUDA memory allocated at the peak of one call of ``fn`` (everything resident counts); None off CUDA."""
    if device != "cuda":
        return None
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    fn()
    sync(device)
    return torch.cuda.max_memory_allocated() / 2**30


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


def torch_gemm_tflops(dtype: torch.dtype, m: int = 4096, k: int = 768, n: int = 3072, reps: int = 10) -> float:
    """TFLOP/s of one large torch matmul in ``dtype`` on the CPU (the ceiling a CPU engine in that precision
    can approach; 4096x768 @ 768x3072 is albert-base's FFN-in product at 32 x 128 tokens). Stated as what it
    is, a measured rate, not a datasheet peak."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=g).to(dtype), torch.randn(k, n, generator=g).to(dtype)
    a @ b
    ts = []
    for _ in range(reps):
        start = time.perf_counter()
        a @ b
        ts.append(time.perf_counter() - start)
    ts.sort()
    return 2 * m * k * n / ts[len(ts) // 2] / 1e12


def write_result(result: dict, path: str | Path | None, next_step: str) -> None:
    """The end of every benchmark: ``result`` as JSON, atomically, at ``path`` (when one is given; its folder
    made), then the one line that says what was written where and what to read or run next."""
    import json

    from albertlm.files import write_text_atomic

    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(result, indent=2) + "\n")
    print(f"wrote {path or 'nothing (no --json)'}; next: {next_step}")
