"""benchmarks/gpu.py, the GPU check: its --smoke run on the CPU goes through every section's code (compile and the
max-batch search included), so the script is known to work before a GPU is lent; the real run is `gpu`-marked."""

from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu.py"
SECTIONS = ["parity", "pretrain_step", "finetune_step", "inference", "max_batch"]
ENGINES = ["ours", "hf", "ours_compiled", "hf_compiled"]


def run_script(*args: str, timeout: float) -> subprocess.CompletedProcess:
    # PYTHONPATH = this checkout, so a clean clone tests its own albertlm, not an installed one
    paths = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def gpu_module():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module("gpu")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def check_measured(d: dict, smoke: bool) -> None:
    """Every section that ran has finite, positive numbers of the expected kind; parity passed."""
    p = d["parity"]
    if "skipped" not in p:
        assert p["passed"] and p["fp32"]["passed"] and p["bf16"]["passed"], p
        assert p["fp32"]["max_abs_diff"] <= p["fp32"]["tolerance"] and p["bf16"]["ours_vs_hf_fp32"] > 0
    shapes = d["pretrain_step"].get("shapes", {})
    assert len(shapes) == 3 or "skipped" in d["pretrain_step"]
    for key, s in shapes.items():
        if "skipped" in s:
            assert not smoke, key
            continue
        assert not s["errors"], (key, s["errors"])
        assert not (smoke and s["skipped_engines"]), s["skipped_engines"]
        assert sorted([*s["engines"], *s["skipped_engines"]]) == sorted(ENGINES)
        for e in s["engines"].values():
            assert positive(e["tokens_per_s"]) and positive(e["median_s"]) and positive(e["first_step_s"])
            assert positive(e["mfu"]) and e["mfu"] < 1 and e["mfu_all_positions"] > e["mfu"]
            assert (e["peak_mem_gib"] is None) == smoke and (smoke or positive(e["peak_mem_gib"]))
        assert positive(s["ratio_ours_over_hf"]) and positive(s["ratio_ours_compiled_over_hf_compiled"])
    if "skipped" not in d["finetune_step"]:
        f = d["finetune_step"]
        assert all(positive(f["steps_per_s"][k]) for k in ("ours", "hf")) and positive(f["ratio_ours_over_hf"])
    if "skipped" not in d["inference"]:
        for r in d["inference"]["batches"].values():
            assert all(positive(v) for v in r["sequences_per_s"].values()) and positive(r["ratio_ours_over_hf"])
    m = d["max_batch"]
    if "skipped" not in m:
        for k in ("ours", "hf"):
            assert m[k]["largest"] >= 1 and m[k]["tries"], m[k]
            if smoke:
                assert m[k]["capped"] and m[k]["largest"] == m["cap"], m[k]


def test_smoke_run_measures_every_section(tmp_path):
    out = tmp_path / "gpu_smoke.json"
    proc = run_script("--smoke", "--json", str(out), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith(f"wrote {out}: 5 of 5 sections") and "next:" in last, last
    d = json.loads(out.read_text())
    assert d["complete"] and d["smoke"] and d["device"] == "cpu" and d["gpu"].startswith("cpu")
    assert {"python", "torch", "transformers", "albertlm", "cuda"} <= set(d["versions"])
    assert d["versions"]["torch"] == torch.__version__ and "--smoke" in d["command"] and d["date"]
    assert d["precision"] in ("bf16", "fp32") and d["plan"]["compile_backend"]
    for name in SECTIONS:
        assert "skipped" not in d[name] and "error" not in d[name], (name, d[name])
        assert positive(d[name]["wall_s"])
    check_measured(d, smoke=True)


def test_budget_too_small_skips_with_the_reason(tmp_path):
    out = tmp_path / "skipped.json"
    proc = run_script("--smoke", "--json", str(out), "--budget", "0", "--sections", "parity,max_batch", timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    d = json.loads(out.read_text())
    assert d["complete"] and "pretrain_step" not in d
    for name in ("parity", "max_batch"):
        assert "budget" in d[name]["skipped"], d[name]
    assert "skipped parity, max_batch" in proc.stdout.strip().splitlines()[-1]


def test_without_cuda_and_smoke_it_refuses_in_one_line(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("CUDA is here: the script would run")
    proc = run_script("--json", str(tmp_path / "x.json"), timeout=120)
    assert proc.returncode != 0 and not (tmp_path / "x.json").exists()
    assert proc.stderr.strip().count("\n") == 0 and "--smoke" in proc.stderr, proc.stderr


@pytest.mark.parametrize("limit", [0, 1, 2, 37, 100, 1000, 4095])
def test_largest_batch_search_finds_the_limit(limit):
    gpu = gpu_module()
    seen = []
    result = gpu.largest_batch(lambda b: seen.append(b) or b <= limit, 4096, gpu.Budget(60))
    assert limit - max(1, limit // 32) <= result["largest"] <= limit, result
    assert result["smallest_failing"] > result["largest"] and not result["capped"]
    assert [t[0] for t in result["tries"]] == seen and len(seen) <= 2 * 13


def test_largest_batch_search_stops_at_the_cap_and_the_budget():
    gpu = gpu_module()
    capped = gpu.largest_batch(lambda b: True, 6, gpu.Budget(60))
    assert capped["largest"] == 6 and capped["capped"] and capped["smallest_failing"] is None
    assert max(t[0] for t in capped["tries"]) == 6
    spent = gpu.largest_batch(lambda b: True, 4096, gpu.Budget(-1))
    assert spent["stopped_by"] == "budget" and not spent["tries"] and spent["largest"] == 0


def test_out_of_memory_is_told_from_other_errors():
    gpu = gpu_module()
    assert gpu.out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert gpu.out_of_memory(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"))
    assert not gpu.out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_run_with_a_short_budget(tmp_path):
    """The real shapes on the real device, a 150 s budget: what fits is measured, the rest skipped with reasons."""
    out = tmp_path / "gpu.json"
    proc = run_script("--json", str(out), "--budget", "150", timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    d = json.loads(out.read_text())
    assert d["complete"] and d["device"] == "cuda" and d["gpu"] == torch.cuda.get_device_name(0)
    assert d["versions"]["cuda"] == torch.version.cuda and positive(d["gpu_memory_gib"])
    assert "skipped" not in d["parity"], "parity is first and cheap: it must run"
    for name in SECTIONS:
        assert "error" not in d[name], (name, d[name])
    check_measured(d, smoke=False)


def test_json_is_strict_even_when_a_number_is_not_finite(tmp_path):
    gpu = gpu_module()
    path = tmp_path / "out.json"
    gpu.write(path, {"parity": {"max_abs_diff": float("nan"), "tries": [[1, True, float("inf")]]}})
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"parity": {"max_abs_diff": "nan", "tries": [[1, True, "inf"]]}}


class _Fits(torch.nn.Module):
    """A model that runs out of memory above ``limit`` rows, or fails otherwise with ``other``."""

    def __init__(self, limit: int, other: bool = False):
        super().__init__()
        self.w, self.limit, self.other = torch.nn.Parameter(torch.ones(3)), limit, other

    def forward(self, input_ids, **_):
        if input_ids.shape[0] > self.limit:
            raise RuntimeError("shapes cannot be multiplied") if self.other else torch.cuda.OutOfMemoryError(
                "CUDA out of memory. Tried to allocate 80.00 GiB")
        return type("Out", (), {"loss": (self.w * input_ids.shape[0]).sum()})()


def test_a_step_out_of_memory_means_it_does_not_fit_and_other_errors_propagate():
    import argparse

    gpu = gpu_module()
    plan = gpu.make_plan(argparse.Namespace(smoke=True, precision="fp32", max_batch_cap=None, compile_backend=None,
                                            reps=None, warmup=None))  # fmt: skip
    config = plan.config(plan.max_batch[0])
    model = _Fits(limit=11)
    opt = torch.optim.AdamW(model.parameters())
    found = gpu.largest_batch(lambda b: gpu.fits(model, opt, config, b, 8, plan), 64, gpu.Budget(60))
    assert found["largest"] == 11 and found["smallest_failing"] == 12, found
    assert model.w.grad is None  # freed after every try
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        gpu.fits(_Fits(limit=1, other=True), opt, config, 4, 8, plan)
