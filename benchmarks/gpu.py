"""The GPU check: everything ../shared/docs/anchors.md asks of a GPU, ours against transformers side by side,
in one command, held to 8 minutes on one H200 by a 450 s budget (not yet run on a GPU: none has been lent).

    python benchmarks/gpu.py --json docs/results/gpu/h200.json          # the real thing, on CUDA
    python benchmarks/gpu.py --smoke --json /tmp/gpu_smoke.json          # CPU, tiny shapes, the same code paths
    python benchmarks/gpu.py --json out.json --sections parity,max_batch # a subset (a rerun)

Sections, each one function and one key of the JSON, run in this order:
  parity         ours vs HF outputs (MLM logits at real positions, SOP logits), same weights, on the device in
                 fp32 and under bf16 autocast; the tolerance used and pass / fail
  pretrain_step  fwd + bwd + fused AdamW, plain and torch.compile'd, ours vs HF (SDPA): albert-base batch 256 x
                 seq 128, albert-large 64 x 512, albert-xxlarge 16 x 512; tokens/s (median), MFU by
                 albertlm.model.flops_per_token over the GPU's dense bf16 peak (PEAK_BF16_TFLOPS), peak memory
  finetune_step  AlbertForQuestionAnswering on a SQuAD-shaped batch (32 x 384): steps/s ours vs HF
  inference      AlbertForSequenceClassification forward, sequences/s at batch 32 and 256 (seq 128)
  max_batch      the largest pretraining batch that fits at seq 512 for albert-large, ours vs HF: doubling,
                 then bisection, each model alone on the device, an out-of-memory error meaning "does not fit"
Precision is the project's rule, albertlm.training.precision.resolve("auto", device): bf16 autocast on a GPU
that has bf16. Weights are random (transformers' init, copied into ours): speed does not depend on them.
Each section records its wall time; one that would not fit in what is left of --budget is recorded as skipped,
with the reason. The JSON is rewritten (atomically) after every section, so a crash keeps what was measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import math
import platform
import shlex
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch
from pretrain_step import make_batch, mfu_peak, step_fn  # benchmarks/, beside this script
from timing import machine, measure, peak_memory, sync, time_once

import albertlm
from albertlm import AlbertConfig
from albertlm.files import write_text_atomic
from albertlm.hf import load_into
from albertlm.model import flops_per_token
from albertlm.training.precision import resolve
from albertlm.training.pretrain import useful_flops

ROOT = Path(__file__).resolve().parents[1]
# Smoke: every preset shrunk to this (its sharing layout kept), so the CPU runs each path in seconds.
TINY = dict(hidden_size=64, num_attention_heads=2, intermediate_size=128, embedding_size=32, num_hidden_layers=2,
            vocab_size=1000, max_position_embeddings=64)  # fmt: skip
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one run measures: the shapes, repetitions and limits of the GPU run or of the CPU smoke run."""

    device: str
    precision: str  # "bf16" or "fp32", resolved
    shrink: dict  # config overrides applied to every preset (TINY in smoke, none on the GPU)
    pretrain: tuple[tuple[str, int, int], ...]  # (preset, batch, seq)
    parity: tuple[str, int, int]
    finetune: tuple[str, int, int]
    inference: tuple[str, tuple[int, ...], int]  # (preset, batches, seq)
    max_batch: tuple[str, int]  # (preset, seq)
    max_batch_cap: int
    compile_backend: str
    reps: int
    warmup: int
    estimates: dict  # seconds expected of a section, of one pretrain_step shape ("pretrain_shape") and of one
    # compiled engine's first step ("compile"): what the budget left is held against before each starts

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.precision]

    def config(self, preset: str, **kw) -> AlbertConfig:
        return AlbertConfig.from_preset(preset, **{**self.shrink, **kw})


def make_plan(args: argparse.Namespace) -> Plan:
    device = "cpu" if args.smoke else "cuda"
    common = dict(device=device, precision=resolve(args.precision, device))
    if args.smoke:  # the GPU plan's shapes scaled down; a handful of steps
        plan = Plan(**common, shrink=TINY, pretrain=(("albert-base-v2", 4, 32), ("albert-large-v2", 2, 64),
                    ("albert-xxlarge-v2", 2, 64)), parity=("albert-base-v2", 4, 32),
                    finetune=("albert-base-v2", 4, 48), inference=("albert-base-v2", (1, 4), 32),
                    max_batch=("albert-large-v2", 64), max_batch_cap=6, compile_backend="aot_eager", reps=3,
                    warmup=1, estimates=dict.fromkeys([*SECTIONS, "pretrain_shape", "compile"], 1.0))  # fmt: skip
    else:
        plan = Plan(**common, shrink={}, pretrain=(("albert-base-v2", 256, 128), ("albert-large-v2", 64, 512),
                    ("albert-xxlarge-v2", 16, 512)), parity=("albert-base-v2", 8, 128),
                    finetune=("albert-base-v2", 32, 384), inference=("albert-base-v2", (32, 256), 128),
                    max_batch=("albert-large-v2", 512), max_batch_cap=4096, compile_backend="inductor", reps=10,
                    warmup=3, estimates={"parity": 20.0, "pretrain_step": 60.0, "pretrain_shape": 60.0,
                                         "finetune_step": 30.0, "inference": 25.0, "max_batch": 80.0,
                                         "compile": 40.0})  # fmt: skip
    overrides = {k: v for k, v in (("max_batch_cap", args.max_batch_cap), ("compile_backend", args.compile_backend),
                                   ("reps", args.reps), ("warmup", args.warmup)) if v is not None}  # fmt: skip
    return dataclasses.replace(plan, **overrides)


class Budget:
    """Seconds left of the run's budget, counted from the start of the process's work."""

    def __init__(self, seconds: float):
        self.seconds, self.start = seconds, time.monotonic()

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.start)

    def refuse(self, estimate: float) -> str | None:
        """Why something expected to take ``estimate`` seconds may not start now, or None when it may."""
        left = self.left()
        return f"needs ~{estimate:.0f} s, {max(left, 0):.0f} s of the {self.seconds:.0f} s budget left" \
            if left < estimate else None  # fmt: skip


# --------------------------------------------------------------------------- shared pieces
def pair(head: str, config: AlbertConfig) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Ours and transformers' ``head`` (on the CPU) with the same random weights: HF's init, copied into ours by
    albertlm.hf's key map. HF runs SDPA attention, its fastest built-in."""
    import transformers

    hf_cfg = transformers.AlbertConfig(**{k: v for k, v in config.to_dict().items() if k != "model_type"})
    hf_cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    hf = getattr(transformers, head)(hf_cfg)
    ours = getattr(albertlm, head)(config)
    load_into(ours, hf.state_dict(), f"transformers.{head}")
    return ours, hf


def optimizer(model: torch.nn.Module, device: str) -> torch.optim.Optimizer:
    """AdamW as the anchors measured it: torch's fused kernel on CUDA (foreach on the CPU, which has no fused one)."""
    kernel = {"fused": True} if device == "cuda" else {"foreach": True}
    return torch.optim.AdamW(model.parameters(), lr=1e-5, **kernel)


def free(device: str) -> None:
    """Return what dropped models, batches and failed steps held to the device (cycles included)."""
    if device == "cuda":  # on the CPU the allocator frees at once, and a full gc costs ~0.4 s a call
        gc.collect()
        torch.cuda.empty_cache()


def first_calls(runs: dict, device: str, errors: dict, budget: Budget | None = None, needs: dict | None = None,
                skipped: dict | None = None) -> dict[str, float]:  # fmt: skip
    """Seconds of each run's first call (a compiled run compiles in it); a run that raises is dropped from
    ``runs`` and its error kept in ``errors``, so one engine's failure does not cost the others' numbers. A run
    ``needs`` more seconds than the ``budget`` has left is dropped too, the reason kept in ``skipped``."""
    seconds = {}
    for name in list(runs):
        why = budget.refuse(needs.get(name, 0.0)) if budget is not None and needs else None
        if why:
            skipped[name] = why
            print(f"    {name} skipped: {why}", flush=True)
            del runs[name]
            continue
        try:
            seconds[name] = time_once(runs[name], device)
        except Exception as e:  # noqa: BLE001 - any failure of one engine is recorded, not fatal
            errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            print(f"    {name} failed: {errors[name]}", flush=True)
            del runs[name]
            free(device)
    return seconds


def medians(times: dict[str, list[float]]) -> dict[str, float]:
    return {k: statistics.median(v) for k, v in times.items()}


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b where both exist (an engine that failed leaves its ratios out)."""
    return a / b if a and b else None


# --------------------------------------------------------------------------- sections
# What each parity check holds to its tolerance: (how it reads, its key in the section's JSON)
CHECKED = {"fp32": ("max |ours - HF|", "max_abs_diff"), "bf16": ("max |ours bf16 - HF fp32|", "ours_vs_hf_fp32")}


def parity(plan: Plan, budget: Budget) -> dict:
    """Max |ours - HF| on the device: fp32 within 1e-4 of the outputs' scale; under bf16 autocast, ours may be
    no farther from HF's fp32 outputs than HF's own bf16 run is (2x, plus the fp32 tolerance): bf16's rounding
    is the noise floor, and an implementation error shows as a distance far above it."""
    preset, B, S = plan.parity
    config = plan.config(preset)
    ours, hf = (m.to(plan.device).eval() for m in pair("AlbertForPreTraining", config))
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, config.vocab_size, (B, S), generator=g)
    mask = torch.ones(B, S, dtype=torch.long)
    mask[B // 2 :, S - S // 4 :] = 0  # padding in half the batch
    types = (torch.arange(S) >= S // 2).long().expand(B, S)
    feed = {k: v.to(plan.device) for k, v in (("input_ids", ids), ("attention_mask", mask), ("token_type_ids", types))}
    keep = feed["attention_mask"].bool()

    def outputs(model, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        with torch.inference_mode(), torch.autocast(plan.device, dtype=dtype, enabled=dtype != torch.float32):
            out = model(**feed)
        return {"mlm_logits": out.prediction_logits[keep].float(), "sop_logits": out.sop_logits.float()}

    def dist(a: dict, b: dict) -> float:
        return max((a[k] - b[k]).abs().max().item() for k in a)

    ref, got = outputs(hf, torch.float32), outputs(ours, torch.float32)
    scale = max(t.abs().max().item() for t in ref.values())
    tol32 = 1e-4 * max(1.0, scale)
    fp32 = {"max_abs_diff": dist(got, ref), "tolerance": tol32, "rule": "1e-4 x max(1, max |HF output|)"}
    fp32["passed"] = fp32["max_abs_diff"] <= tol32
    hf16, ours16 = outputs(hf, torch.bfloat16), outputs(ours, torch.bfloat16)
    floor = dist(hf16, ref)
    bf16 = {"max_abs_diff": dist(ours16, hf16), "ours_vs_hf_fp32": dist(ours16, ref), "hf_bf16_vs_hf_fp32": floor,
            "tolerance": 2 * floor + tol32, "rule": "ours bf16 vs HF fp32 <= 2 x (HF bf16 vs HF fp32) + fp32 tolerance"}
    bf16["passed"] = bf16["ours_vs_hf_fp32"] <= bf16["tolerance"]
    allow_tf32 = torch.backends.cuda.matmul.allow_tf32 if plan.device == "cuda" else None
    result = {"preset": preset, "batch": B, "seq": S, "outputs": list(ref), "output_scale": scale,
              "cuda_matmul_allow_tf32": allow_tf32, "fp32": fp32, "bf16": bf16,
              "passed": fp32["passed"] and bf16["passed"]}  # fmt: skip
    for k, (what, checked) in CHECKED.items():
        r = result[k]
        print(f"  {k}: {what} {r[checked]:.2e} (tolerance {r['tolerance']:.2e}) {'pass' if r['passed'] else 'FAIL'}",
              flush=True)  # fmt: skip
    return result


def pretrain_step(plan: Plan, budget: Budget) -> dict:
    """The three anchor shapes, each checked against the budget before it starts."""
    peak, source = mfu_peak(plan.device, plan.precision)
    out = {"precision": plan.precision, "optimizer": "AdamW (fused on CUDA)", "compile_backend": plan.compile_backend,
           "reps": plan.reps, "warmup": plan.warmup, "peak_tflops": peak / 1e12, "peak_source": source, "shapes": {}}
    estimate = plan.estimates["pretrain_shape"]
    for preset, B, S in plan.pretrain:
        key = f"{preset} {B}x{S}"
        why = budget.refuse(estimate)
        if why:
            out["shapes"][key] = {"skipped": why}
            print(f"  {key}: skipped ({why})", flush=True)
            continue
        start = time.perf_counter()
        out["shapes"][key] = pretrain_shape(plan, budget, preset, B, S, peak)
        out["shapes"][key]["wall_s"] = time.perf_counter() - start
        estimate = max(estimate, out["shapes"][key]["wall_s"])  # the shapes grow: the last one is a floor
        torch.compiler.reset()  # drop this shape's graphs (and their hold on its models)
        free(plan.device)
    return out


def pretrain_shape(plan: Plan, budget: Budget, preset: str, B: int, S: int, peak: float) -> dict:
    """One shape: ours and HF, each plain and compiled (static shapes; a compile the budget cannot hold is
    skipped), timed in alternation."""
    config = plan.config(preset)
    ours, hf = (m.to(plan.device).train() for m in pair("AlbertForPreTraining", config))
    opts = {"ours": optimizer(ours, plan.device), "hf": optimizer(hf, plan.device)}
    batch = make_batch(config, B, S, plan.device)
    compiled = {k: torch.compile(m, dynamic=False, backend=plan.compile_backend)
                for k, m in (("ours", ours), ("hf", hf))}
    runs = {"ours": step_fn(ours, opts["ours"], batch, plan.dtype, plan.device),
            "hf": step_fn(hf, opts["hf"], batch, plan.dtype, plan.device),
            "ours_compiled": step_fn(compiled["ours"], opts["ours"], batch, plan.dtype, plan.device),
            "hf_compiled": step_fn(compiled["hf"], opts["hf"], batch, plan.dtype, plan.device)}  # fmt: skip
    print(f"  {preset} batch {B} x seq {S}: first steps (compiling)...", flush=True)
    errors: dict[str, str] = {}
    skipped: dict[str, str] = {}
    needs = dict.fromkeys(("ours_compiled", "hf_compiled"), plan.estimates["compile"])
    first = first_calls(runs, plan.device, errors, budget, needs, skipped)
    resident = torch.cuda.memory_allocated() / 2**30 if plan.device == "cuda" else None
    mem = {k: peak_memory(fn, plan.device) for k, fn in runs.items()}
    med = medians(measure(runs, plan.reps, plan.warmup, plan.device))
    cpu_batch = {k: v.cpu() for k, v in batch.items()}
    useful = useful_flops(config, cpu_batch)  # real tokens, MLM head at the masked positions: equal for both
    every = B * S * flops_per_token(config, S)  # the head scoring every position: how the anchors count HF's work
    engines = {}
    for k, t in med.items():
        engines[k] = {"median_s": t, "tokens_per_s": B * S / t, "first_step_s": first[k],
                      "mfu": useful / t / peak if peak else None,
                      "mfu_all_positions": every / t / peak if peak else None, "peak_mem_gib": mem[k],
                      "step_mem_gib": mem[k] - resident if mem[k] is not None else None}  # fmt: skip
        mfu = f"  MFU {engines[k]['mfu']:.1%}" if peak else ""
        gib = f"  peak {mem[k]:.1f} GiB" if mem[k] is not None else ""
        print(f"    {k:14s} {B * S / t:12,.0f} tokens/s{mfu}{gib}  (first step {first[k]:.1f} s)", flush=True)
    tps = {k: e["tokens_per_s"] for k, e in engines.items()}
    return {"preset": preset, "batch": B, "seq": S, "masked_positions": int((cpu_batch["labels"] != -100).sum()),
            "useful_flops_per_step": useful, "resident_gib_before_steps": resident, "engines": engines,
            "errors": errors, "skipped_engines": skipped, "ratio_ours_over_hf": ratio(tps.get("ours"), tps.get("hf")),
            "ratio_ours_compiled_over_hf_compiled": ratio(tps.get("ours_compiled"), tps.get("hf_compiled")),
            "ratio_ours_over_hf_compiled": ratio(tps.get("ours"), tps.get("hf_compiled"))}  # fmt: skip


def finetune_step(plan: Plan, budget: Budget) -> dict:
    """SQuAD-shaped span-QA training steps (question in segment 0, context in 1, padded rows as run_qa pads)."""
    preset, B, S = plan.finetune
    config = plan.config(preset)
    models = dict(zip(("ours", "hf"), pair("AlbertForQuestionAnswering", config), strict=True))
    models = {k: m.to(plan.device).train() for k, m in models.items()}
    g = torch.Generator().manual_seed(2)
    mask = torch.ones(B, S, dtype=torch.long)
    mask[B // 2 :, S - S // 3 :] = 0
    start = torch.randint(S // 6, S // 2, (B,), generator=g)
    batch = {"input_ids": torch.randint(5, config.vocab_size, (B, S), generator=g), "attention_mask": mask,
             "token_type_ids": (torch.arange(S) >= S // 6).long().expand(B, S).contiguous(),
             "start_positions": start, "end_positions": start + torch.randint(0, 8, (B,), generator=g)}  # fmt: skip
    batch = {k: v.to(plan.device) for k, v in batch.items()}
    runs = {k: step_fn(m, optimizer(m, plan.device), batch, plan.dtype, plan.device) for k, m in models.items()}
    errors: dict[str, str] = {}
    first_calls(runs, plan.device, errors)
    med = medians(measure(runs, plan.reps, plan.warmup, plan.device))
    sps = {k: 1 / t for k, t in med.items()}
    print("  " + ", ".join(f"{k} {v:.2f} steps/s" for k, v in sps.items()), flush=True)
    return {"preset": preset, "batch": B, "seq": S, "precision": plan.precision, "steps_per_s": sps,
            "examples_per_s": {k: B * v for k, v in sps.items()}, "errors": errors,
            "ratio_ours_over_hf": ratio(sps.get("ours"), sps.get("hf"))}  # fmt: skip


def inference(plan: Plan, budget: Budget) -> dict:
    """Forward throughput of a sequence classifier (what a server runs), no padding, under inference_mode."""
    preset, batches, S = plan.inference
    config = plan.config(preset, id2label={0: "negative", 1: "positive"})
    models = dict(zip(("ours", "hf"), pair("AlbertForSequenceClassification", config), strict=True))
    models = {k: m.to(plan.device).eval() for k, m in models.items()}
    out = {"preset": preset, "seq": S, "precision": plan.precision, "batches": {}}
    for B in batches:
        ids = torch.randint(5, config.vocab_size, (B, S), generator=torch.Generator().manual_seed(B)).to(plan.device)
        feed = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}

        def forward(model, feed=feed):
            on = plan.precision != "fp32"
            with torch.inference_mode(), torch.autocast(plan.device, dtype=plan.dtype, enabled=on):
                return model(**feed).logits

        runs = {k: (lambda m=m: forward(m)) for k, m in models.items()}
        med = medians(measure(runs, plan.reps, plan.warmup, plan.device))
        seqs = {k: B / t for k, t in med.items()}
        out["batches"][str(B)] = {"sequences_per_s": seqs, "median_s": med,
                                  "ratio_ours_over_hf": seqs["ours"] / seqs["hf"]}  # fmt: skip
        print(f"  batch {B}: " + ", ".join(f"{k} {v:,.0f} seq/s" for k, v in seqs.items()), flush=True)
    return out


def max_batch(plan: Plan, budget: Budget) -> dict:
    """Largest pretraining batch (fwd + bwd + AdamW, the run's precision) that fits at the plan's seq length."""
    preset, S = plan.max_batch
    config = plan.config(preset)
    total = torch.cuda.get_device_properties(0).total_memory / 2**30 if plan.device == "cuda" else None
    out = {"preset": preset, "seq": S, "precision": plan.precision, "cap": plan.max_batch_cap, "device_gib": total}
    models = dict(zip(("ours", "hf"), pair("AlbertForPreTraining", config), strict=True))
    for name in ("ours", "hf"):
        model = models.pop(name).to(plan.device).train()  # alone on the device: the other waits on the CPU
        opt = optimizer(model, plan.device)
        try:  # a failure other than running out of memory is this model's, recorded; the other is still searched
            out[name] = largest_batch(lambda b, m=model, o=opt: fits(m, o, config, b, S, plan), plan.max_batch_cap,
                                      budget)  # fmt: skip
            r = out[name]
            print(f"  {name}: largest batch {r['largest']}{' (the cap)' if r['capped'] else ''} "
                  f"after {len(r['tries'])} tries", flush=True)  # fmt: skip
        except RuntimeError as e:
            traceback.print_exc()
            out[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", "largest": None}
        del model, opt
        free(plan.device)
    out["ratio_ours_over_hf"] = ratio(out["ours"].get("largest"), out["hf"].get("largest"))
    return out


def fits(model, opt, config: AlbertConfig, B: int, S: int, plan: Plan) -> bool:
    """One training step at batch ``B``; False when the device runs out of memory. Gradients, the batch and
    the allocator's cache are freed either way, so every try starts from the same memory."""
    batch = make_batch(config, B, S, plan.device, seed=B)
    ok = True
    try:
        step_fn(model, opt, batch, plan.dtype, plan.device)()
        sync(plan.device)
    except RuntimeError as e:  # torch.cuda.OutOfMemoryError is one; cuBLAS/cuDNN report theirs as plain ones
        if not out_of_memory(e):
            raise
        ok = False  # the exception (and the frames it holds) is gone once this block ends
    opt.zero_grad(set_to_none=True)
    del batch
    free(plan.device)
    return ok


def out_of_memory(e: BaseException) -> bool:
    text = str(e)
    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in text or "ALLOC_FAILED" in text


def largest_batch(fits_at, cap: int, budget: Budget, margin: float = 0.0) -> dict:
    """Doubling from 1 until a batch fails (or passes ``cap``), then bisection until the gap between the largest
    fitting and the smallest failing batch is under 1/32 of the former (or 1)."""
    tries: list[list] = []
    lo, hi, stop = 0, cap + 1, None  # lo fits; hi fails (cap + 1: "treated as failing")

    def attempt(b: int) -> bool:
        start = time.perf_counter()
        ok = fits_at(b)
        tries.append([b, ok, round(time.perf_counter() - start, 3)])
        return ok

    b = 1
    while b <= cap:
        if budget.left() < margin:
            stop = "budget"
            break
        if not attempt(b):
            hi = b
            break
        lo, b = b, b * 2
    while stop is None and hi - lo > max(1, lo // 32):
        if budget.left() < margin:
            stop = "budget"
            break
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if attempt(mid) else (lo, mid)
    return {"largest": lo, "smallest_failing": hi if hi <= cap else None, "capped": lo == cap,
            "stopped_by": stop, "tries": tries}  # fmt: skip


SECTIONS = {"parity": parity, "pretrain_step": pretrain_step, "finetune_step": finetune_step,
            "inference": inference, "max_batch": max_batch}  # fmt: skip


# --------------------------------------------------------------------------- the run
def environment(plan: Plan) -> dict:
    """What the numbers were measured on and with, and the exact command that measured them."""
    import transformers

    cuda = plan.device == "cuda"
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        commit = commit.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {
        "device": plan.device,
        "gpu": torch.cuda.get_device_name(0) if cuda else f"cpu: {machine()}",
        "gpu_memory_gib": torch.cuda.get_device_properties(0).total_memory / 2**30 if cuda else None,
        "bf16_supported": torch.cuda.is_bf16_supported() if cuda else None,
        "cpu_threads": torch.get_num_threads(),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "albertlm": albertlm.__version__,
                     "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version() if cuda else None},
        "albertlm_commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["python", *sys.argv]),
    }  # fmt: skip


def run(plan: Plan, names: list[str], budget: Budget, path: Path) -> dict:
    """Every section in turn, each timed, skipped when the budget left is under its estimate, its failure
    recorded (with the traceback printed) rather than losing the sections after it; the JSON rewritten after each."""
    result = {**environment(plan), "smoke": plan.device == "cpu", "precision": plan.precision,
              "budget_s": budget.seconds, "plan": {k: v for k, v in dataclasses.asdict(plan).items() if k != "shrink"},
              "shrink": plan.shrink, "complete": False}  # fmt: skip
    print(f"{result['gpu']}: torch {torch.__version__}, CUDA {torch.version.cuda}, precision {plan.precision}, "
          f"budget {budget.seconds:.0f} s, sections {', '.join(names)}", flush=True)  # fmt: skip
    for name in names:
        estimate = plan.estimates["pretrain_shape"] if name == "pretrain_step" else plan.estimates[name]
        why = budget.refuse(estimate)
        if why:
            result[name] = {"skipped": why}
            print(f"[{name}] skipped: {why}", flush=True)
            continue
        print(f"[{name}] ({budget.left():.0f} s of the budget left)", flush=True)
        start = time.perf_counter()
        try:
            result[name] = SECTIONS[name](plan, budget)
        except Exception as e:  # noqa: BLE001 - a failed section is recorded; the ones after it still run
            traceback.print_exc()
            result[name] = {"error": f"{type(e).__name__}: {e}"}
        result[name]["wall_s"] = time.perf_counter() - start
        print(f"[{name}] {result[name]['wall_s']:.1f} s", flush=True)
        free(plan.device)
        write(path, result)
    result["complete"] = True
    result["wall_s"] = time.monotonic() - budget.start
    write(path, result)
    return result


def write(path: Path, result: dict) -> None:
    import json

    def finite(v):  # NaN / inf (a diverged output, say) is written as a string: strict JSON has no such number
        if isinstance(v, float) and not math.isfinite(v):
            return str(v)
        return {k: finite(x) for k, x in v.items()} if isinstance(v, dict) else \
            [finite(x) for x in v] if isinstance(v, (list, tuple)) else v  # fmt: skip

    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(finite(result), indent=2, allow_nan=False) + "\n")


def table(result: dict) -> list[tuple[str, str, str, str]]:
    """(what, ours, HF, ours / HF) for every measured number of the run."""
    rows = []
    fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    if "fp32" in result.get("parity", {}):
        for k, (what, checked) in CHECKED.items():
            p = result["parity"][k]
            rows.append((f"parity {k}: {what} (tol {p['tolerance']:.1e})", fmt(p[checked], ".2e"), "",
                         "pass" if p["passed"] else "FAIL"))  # fmt: skip
    for key, s in result.get("pretrain_step", {}).get("shapes", {}).items():
        if "skipped" in s:
            rows.append((f"pretrain {key}", "skipped", "", ""))
            continue
        e = s["engines"]
        for mode, suffix in (("plain", ""), ("compiled", "_compiled")):
            o, h = e.get("ours" + suffix, {}), e.get("hf" + suffix, {})
            to, th = o.get("tokens_per_s"), h.get("tokens_per_s")
            label = f"pretrain {key} {mode} tokens/s"
            rows.append((label, fmt(to, ",.0f"), fmt(th, ",.0f"), fmt(ratio(to, th), ".2f")))
            if o.get("mfu") is not None or h.get("mfu") is not None:
                rows.append((f"  {mode} MFU (useful work)", fmt(o.get("mfu"), ".1%"), fmt(h.get("mfu"), ".1%"), ""))
            if o.get("peak_mem_gib") is not None:
                mo, mh = o.get("peak_mem_gib"), h.get("peak_mem_gib")
                rows.append((f"  {mode} peak GiB", fmt(mo, ".1f"), fmt(mh, ".1f"), ""))
    f = result.get("finetune_step", {})
    if "steps_per_s" in f:
        rows.append((f"finetune QA {f['batch']}x{f['seq']} steps/s", fmt(f["steps_per_s"].get("ours"), ".2f"),
                     fmt(f["steps_per_s"].get("hf"), ".2f"), fmt(f["ratio_ours_over_hf"], ".2f")))
    for B, r in result.get("inference", {}).get("batches", {}).items():
        s = r["sequences_per_s"]
        rows.append((f"inference batch {B} seq/s", fmt(s["ours"], ",.0f"), fmt(s["hf"], ",.0f"),
                     fmt(r["ratio_ours_over_hf"], ".2f")))
    m = result.get("max_batch", {})
    if "ours" in m:
        rows.append((f"max batch at seq {m['seq']} ({m['preset']}, cap {m['cap']})", str(m["ours"]["largest"]),
                     str(m["hf"]["largest"]), fmt(m["ratio_ours_over_hf"], ".2f")))  # fmt: skip
    for name in SECTIONS:
        if name in result and ("skipped" in result[name] or "error" in result[name]):
            rows.append((name, "skipped" if "skipped" in result[name] else "ERROR", "", ""))
    return rows


def failures(result: dict) -> list[str]:
    """What makes the run a failure: a section's error, an engine's error, or parity not passing."""
    bad = [f"{k}: {result[k]['error']}" for k in SECTIONS if "error" in result.get(k, {})]
    for key, s in result.get("pretrain_step", {}).get("shapes", {}).items():
        bad += [f"pretrain_step {key} {e}: {msg}" for e, msg in s.get("errors", {}).items()]
    bad += [f"finetune_step {e}: {msg}" for e, msg in result.get("finetune_step", {}).get("errors", {}).items()]
    bad += [f"max_batch {k}: {result['max_batch'][k]['error']}" for k in ("ours", "hf")
            if "error" in result.get("max_batch", {}).get(k, {})]  # fmt: skip
    if result.get("parity", {}).get("passed") is False:
        bad.append("parity: ours and HF outputs differ beyond the tolerance")
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", required=True, help="write the results here (rewritten after every section)")
    ap.add_argument("--smoke", action="store_true", help="the CPU at tiny shapes: the same code paths, in seconds")
    ap.add_argument("--budget", type=float, default=450.0, help="seconds; sections that would pass it are skipped")
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {', '.join(SECTIONS)}")
    ap.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"],
                    help="auto (the project's rule): bf16 where the device has it")  # fmt: skip
    ap.add_argument("--max-batch-cap", type=int, help="max_batch stops here (default 4096 on the GPU, 6 in --smoke)")
    ap.add_argument("--compile-backend", help="torch.compile backend (default inductor; aot_eager in --smoke, where "
                    "inductor's C++ build of every graph takes minutes on 2 cores)")  # fmt: skip
    ap.add_argument("--reps", type=int, help="timed steps per engine (default 10; 3 in --smoke)")
    ap.add_argument("--warmup", type=int, help="untimed steps per engine before timing (default 3; 1 in --smoke)")
    args = ap.parse_args()
    names = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = [s for s in names if s not in SECTIONS]
    if unknown:
        ap.error(f"--sections: unknown {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    if not args.smoke and not torch.cuda.is_available():
        sys.exit("benchmarks/gpu.py: no CUDA device here; run it where a GPU is, or pass --smoke for the CPU check")
    budget = Budget(args.budget)
    plan = make_plan(args)
    path = Path(args.json)
    result = run(plan, names, budget, path)
    rows = [("what", "ours", "HF", "ours / HF")] + table(result)
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths, strict=True))))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    bad = failures(result)
    for b in bad:
        print(f"FAILED {b}")
    skipped = [k for k in names if "skipped" in result[k]]
    nxt = ("next: python -m pytest -q -n 0 tests/test_gpu_bench.py" if plan.device == "cpu" else
           f"next: git add {path}; read it against ../shared/docs/anchors.md (docs/results/gpu/README.md)")  # fmt: skip
    print(f"wrote {path}: {len(names) - len(skipped)} of {len(names)} sections in {result['wall_s']:.0f} s on "
          f"{result['gpu']}" + (f", skipped {', '.join(skipped)}" if skipped else "")
          + (f", {len(bad)} FAILED" if bad else "") + f"; {nxt}")  # fmt: skip
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
