"""CPU inference against what a user would pick instead: HF -> torch.onnx.export -> onnxruntime's transformer
optimizer -> quantize_dynamic (the "peer"), side by side in one process.

Speed (``--part speed``): an albert-base-shaped sequence classifier (random weights, saved once with
save_pretrained; every engine reads that directory), batch 1 and batch 32 at seq 128, fixed threads.
Engines, timed in alternation (one call of each per round, medians over rounds):
  ours-onnx-fp32 / ours-onnx-int8   ``albertlm export`` (fused graph; int8 dynamic quantization)
  peer-onnx-fp32 / peer-onnx-int8   HF model through torch.onnx.export, ``optimize_model(model_type="bert")``
                                    and ``quantize_dynamic`` (int8 weights, DefaultTensorType FLOAT)
  ours-torch-fp32 / ours-torch-bf16 albertlm in PyTorch (bf16 = autocast, the default on bf16 CPUs)
  ours-openvino-* / peer-openvino-* our export / HF's torch.onnx.export graph compiled by OpenVINO
                                    (fp32, and bf16 where the CPU has it), and each graph's NNCF static
                                    int8 calibrated on the same batches (``--calibration-size`` random
                                    ones here; 300 SST-2 training sentences in the parts below)
  hf-torch                          transformers (SDPA), for reference
Both ONNX engines run through the same onnxruntime session settings. Ratios are peer / ours at equal
precision: int8 against the issue's peer (HF -> onnxruntime int8) and against the peer's best int8 (that
or its OpenVINO int8), fp32 against the faster peer fp32. A GEMM row gives onnxruntime's and torch's own matmul
rates on 4096x768 @ 768x3072 (fp32, int8, bf16) and what fraction of them each engine reaches (OpenVINO
is held to torch's rate in its precision: both multiply through oneDNN).

Accuracy (``--part accuracy``): a small ALBERT fine-tuned briefly on SST-2 (trained on first use, kept under
runs/deploy/), run through every engine above on the full SST-2 dev set (872 sentences).

Real traffic (``--part traffic``): the same fine-tuned model on the 872 SST-2 dev sentences in file order,
text in -> labels out: ours through ``Predictor`` (length-bucketed batches, no padding past each bucket)
against the peer fed batches of 32 from its HF tokenizer with ``padding=True`` (pads to the longest in
each batch), tokenization included for both.

    nice -n 5 python benchmarks/inference.py --json docs/results/deploy/inference_cpu.json
    python benchmarks/inference.py --part speed --threads 2 --rounds 20 --rounds-large 5
    python benchmarks/inference.py --part traffic --threads 2
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import random
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from timing import machine, torch_gemm_tflops, write_result

import albertlm
from albertlm import AlbertConfig
from albertlm.deploy.engines import OnnxEngine, OnnxSession, OpenVinoEngine, OpenVinoSession, TorchEngine
from albertlm.deploy.export import calibration_inputs, export_onnx, quantize_int8, quantize_openvino_int8
from albertlm.deploy.inference import Predictor
from albertlm.model import flops_per_token

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
SST2 = SHARED / "data" / "glue_sst2"
LABELS = {0: "negative", 1: "positive"}


def read_sst2(name: str) -> tuple[list[str], list[int]]:
    with open(SST2 / name, encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [r["sentence"].strip() for r in rows], [int(r["label"]) for r in rows]


# --------------------------------------------------------------------------- engines
def build_peer(model_dir: Path, work: Path, threads: int, calibration: list[dict] | None = None) -> dict:
    """What a user does without us: export transformers' model with torch.onnx.export, run onnxruntime's
    transformer optimizer for BERT-like models, then dynamic int8 on the optimized graph; the same exported
    graph under OpenVINO, and (given calibration batches) NNCF's static int8 of it, as ours gets."""
    import transformers
    from onnxruntime.transformers.optimizer import optimize_model

    work.mkdir(parents=True, exist_ok=True)
    hf = transformers.AlbertForSequenceClassification.from_pretrained(model_dir).eval()
    ids = torch.randint(5, hf.config.vocab_size, (2, 16))
    raw, opt, int8 = work / "peer.onnx", work / "peer-opt.onnx", work / "peer-opt-int8.onnx"
    axes = {n: {0: "batch", 1: "seq"} for n in ("input_ids", "attention_mask", "token_type_ids")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(hf, (ids, torch.ones_like(ids), torch.zeros_like(ids)), str(raw), dynamo=False,
                          input_names=list(axes), output_names=["logits"], opset_version=17,
                          dynamic_axes={**axes, "logits": {0: "batch"}}, do_constant_folding=True)  # fmt: skip
    optimized = optimize_model(str(raw), model_type="bert", num_heads=hf.config.num_attention_heads,
                               hidden_size=hf.config.hidden_size)  # fmt: skip
    optimized.save_model_to_file(str(opt))
    quantize_int8(opt, int8)  # quantize_dynamic, int8 weights, DefaultTensorType FLOAT: the recipe
    peers = {"peer-onnx-fp32": OnnxSession(opt, threads), "peer-onnx-int8": OnnxSession(int8, threads)}
    for precision in openvino_precisions():
        peers[f"peer-openvino-{precision}"] = OpenVinoSession(raw, threads, HINT[precision], ["logits"])
    if calibration is not None:
        peers["peer-openvino-int8"] = openvino_int8(raw, calibration, work / "peer-openvino-int8.xml", threads)
    return peers


def openvino_precisions() -> tuple[str, ...]:
    """OpenVINO's precisions worth timing here: bf16 only where the CPU computes it natively."""
    import openvino as ov

    from albertlm.deploy.engines import cpu_has_bf16

    return ("fp32", "bf16") if cpu_has_bf16(ov.Core()) else ("fp32",)


HINT = {"fp32": "f32", "bf16": "bf16"}  # OpenVINO's name for each precision


def openvino_int8(graph: Path, calibration: list[dict], xml: Path, threads: int) -> OpenVinoSession:
    """NNCF's static int8 of ``graph`` on ``calibration`` batches, its other ops in the best precision here."""
    quantize_openvino_int8(graph, calibration, xml)
    return OpenVinoSession(xml, threads, HINT[openvino_precisions()[-1]], ["logits"])


def build_ours(model_dir: Path, work: Path, threads: int, calibration: Path | list[dict] | None = None) -> dict:
    """Our export under onnxruntime (fp32, int8) and OpenVINO (fp32, bf16; int8 when calibration is given:
    a file of inputs goes through ``albertlm export --calibration``, batches straight to NNCF, for a model
    directory without a tokenizer), and albertlm in torch."""
    from_file = calibration if isinstance(calibration, Path) else None
    export_onnx(model_dir, work / "ours", quantize="int8", calibration=from_file)
    engines = {}
    if isinstance(calibration, Path):
        engines["ours-openvino-int8"] = OpenVinoEngine(work / "ours", threads, "int8")
    elif calibration is not None:
        engines["ours-openvino-int8"] = openvino_int8(work / "ours" / "model.onnx", calibration,
                                                      work / "ours-openvino-int8.xml", threads)  # fmt: skip
    return {**engines, "ours-onnx-fp32": OnnxEngine(work / "ours", threads, "fp32"),
            "ours-onnx-int8": OnnxEngine(work / "ours", threads, "int8"),
            "ours-torch-fp32": TorchEngine.load(model_dir, threads, precision="fp32"),
            "ours-torch-bf16": TorchEngine.load(model_dir, threads, precision="bf16"),
            **{f"ours-openvino-{p}": OpenVinoEngine(work / "ours", threads, p) for p in openvino_precisions()}}


def file_mb(path: Path) -> float:
    return path.stat().st_size / 1e6


# --------------------------------------------------------------------------- GEMM rates
def gemm_rates(threads: int, reps: int = 10) -> dict[str, float]:
    """TFLOP/s (TOPS for int8) of onnxruntime's fp32 and int8 MatMul and torch's fp32 and bf16 matmul on
    4096x768 @ 768x3072, the FFN-in product of albert-base at 32 x 128 tokens: the ceiling of each engine.
    OpenVINO's int8 rows are held to onnxruntime's int8 rate: a lone NNCF-quantized MatMul measured 0.54-0.65
    TOPS here, below what the same products reach inside the model (~0.84: there the input's quantization and
    the fp32 output are fused with their neighbours), so it is no ceiling."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    m, k, n = 4096, 768, 3072
    flops = 2 * m * k * n
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = (rng.standard_normal((k, n)) * 0.02).astype(np.float32)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "gemm",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
                                  [numpy_helper.from_array(w, "w")])  # fmt: skip
        fp32 = Path(tmp) / "gemm.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(fp32))
        int8 = quantize_int8(fp32, Path(tmp) / "gemm-int8.onnx")
        for name, path in (("ort-fp32", fp32), ("ort-int8", int8)):
            ort = OnnxSession(path, threads)
            out[name] = flops / _median_time(lambda s=ort: s.session.run(None, {"x": x}), reps) / 1e12
    out["torch-fp32"] = torch_gemm_tflops(torch.float32, m, k, n, reps)
    out["torch-bf16"] = torch_gemm_tflops(torch.bfloat16, m, k, n, reps)
    return out


def _median_time(fn, reps: int) -> float:
    """Median seconds of ``fn()`` over ``reps`` calls, after one untimed call."""
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


GEMM_OF = {"ours-onnx-fp32": "ort-fp32", "peer-onnx-fp32": "ort-fp32", "ours-onnx-int8": "ort-int8",
           "peer-onnx-int8": "ort-int8", "ours-torch-fp32": "torch-fp32", "ours-torch-bf16": "torch-bf16",
           "hf-torch": "torch-fp32", "ours-openvino-fp32": "torch-fp32", "peer-openvino-fp32": "torch-fp32",
           "ours-openvino-bf16": "torch-bf16", "peer-openvino-bf16": "torch-bf16",  # OpenVINO and torch share oneDNN
           "ours-openvino-int8": "ort-int8", "peer-openvino-int8": "ort-int8"}


# --------------------------------------------------------------------------- speed
def percentile(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


def speed(args: argparse.Namespace) -> dict:
    """The fixed-shape part, in a temp folder of its own (graphs of ~100 MB) removed at the end."""
    with tempfile.TemporaryDirectory(prefix="albertlm-bench-", ignore_cleanup_errors=True) as work:
        return _speed(args, Path(work))


def feed_of(ids: np.ndarray) -> dict[str, np.ndarray]:
    """A graph's inputs for unpadded ``ids`` (B, S): every position attended, one segment."""
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}


def random_calibration(vocab_size: int, n: int, max_len: int) -> list[dict[str, np.ndarray]]:
    """``n`` single sequences of random ids, 16 to ``max_len`` long: int8 calibration for random weights."""
    g = torch.Generator().manual_seed(1234)
    lengths = torch.randint(16, max_len + 1, (n,), generator=g).tolist()
    return [feed_of(torch.randint(5, vocab_size, (1, length), generator=g).numpy()) for length in lengths]


def alternate(runs: dict, rounds: int) -> dict[str, list[float]]:
    """Seconds per call of each ``runs`` function, timed in turn ``rounds`` times after two warm-up calls each
    (allocator, oneDNN / ORT / OpenVINO kernel selection), so drift on the machine hits every engine alike."""
    times: dict[str, list[float]] = {k: [] for k in runs}
    with torch.inference_mode():
        for fn in runs.values():
            fn()
            fn()
        for _ in range(rounds):
            for name, fn in runs.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return times


def _speed(args: argparse.Namespace, work: Path) -> dict:
    import transformers

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = AlbertConfig.from_preset(args.preset, id2label=LABELS)
    albertlm.AlbertForSequenceClassification(config).save_pretrained(work / "model")
    # int8 calibration batches for OpenVINO (random ids here: the weights are random too), the same on both sides
    calibration = random_calibration(config.vocab_size, args.calibration_size, args.seq_len)
    engines = build_ours(work / "model", work, args.threads, calibration)
    engines.update(build_peer(work / "model", work / "peer", args.threads, calibration))
    hf = transformers.AlbertForSequenceClassification.from_pretrained(work / "model", attn_implementation="sdpa")
    hf.eval()
    sizes = {f"{k}_mb": file_mb(engines[k].path) for k in engines if "-onnx-" in k}
    print("graph sizes: " + ", ".join(f"{k} {v:.1f}" for k, v in sizes.items()), flush=True)
    gemm = gemm_rates(args.threads)
    print("GEMM rates (4096x768 @ 768x3072, TFLOP/s; int8 TOPS): "
          + ", ".join(f"{k} {v:.3f}" for k, v in gemm.items()), flush=True)  # fmt: skip
    per_seq = flops_per_token(config, args.seq_len, scored_positions=0, training=False) * args.seq_len
    rows = []
    for batch, rounds in ((1, args.rounds), (32, args.rounds_large)):
        g = torch.Generator().manual_seed(batch)
        ids = torch.randint(5, config.vocab_size, (batch, args.seq_len), generator=g)
        feed = feed_of(ids.numpy())
        runs = {name: (lambda e=e, feed=feed: e(feed)["logits"]) for name, e in engines.items()}
        runs["hf-torch"] = lambda ids=ids: hf(input_ids=ids, attention_mask=torch.ones_like(ids),
                                              token_type_ids=torch.zeros_like(ids)).logits  # fmt: skip
        times = alternate(runs, rounds)
        p50 = {k: statistics.median(v) for k, v in times.items()}
        for name, ts in times.items():
            rate = per_seq * batch / p50[name] / 1e12
            rows.append({"engine": name, "batch": batch, "seq": args.seq_len, "rounds": rounds,
                         "p50_ms": 1e3 * p50[name], "p95_ms": 1e3 * percentile(ts, 95), "seq_per_s": batch / p50[name],
                         "tflops": rate, "of_gemm_rate": rate / gemm[GEMM_OF[name]]})  # fmt: skip
        print_table([r for r in rows if r["batch"] == batch])
    ratios = {}
    for batch in (1, 32):
        p = {r["engine"]: r["p50_ms"] for r in rows if r["batch"] == batch}
        ours_int8 = min(p["ours-onnx-int8"], p["ours-openvino-int8"])
        ratios[f"int8_vs_peer_int8_b{batch}"] = p["peer-onnx-int8"] / ours_int8  # the peer: HF -> ORT int8
        ratios[f"int8_vs_peer_best_int8_b{batch}"] = min(p["peer-onnx-int8"], p["peer-openvino-int8"]) / ours_int8
        ratios[f"onnx_int8_vs_peer_onnx_int8_b{batch}"] = p["peer-onnx-int8"] / p["ours-onnx-int8"]
        ratios[f"openvino_int8_vs_peer_openvino_int8_b{batch}"] = p["peer-openvino-int8"] / p["ours-openvino-int8"]
        peer_fp32 = min(p["peer-onnx-fp32"], p["peer-openvino-fp32"], p["hf-torch"])  # best fp32 engine each side
        ours_fp32 = min(p["ours-onnx-fp32"], p["ours-openvino-fp32"], p["ours-torch-fp32"])
        ratios[f"fp32_vs_peer_fp32_b{batch}"] = peer_fp32 / ours_fp32
        ratios[f"fp32_vs_issue_peer_fp32_b{batch}"] = p["peer-onnx-fp32"] / ours_fp32  # HF -> ORT optimizer
        if "ours-openvino-bf16" in p:
            ratios[f"openvino_bf16_vs_peer_openvino_bf16_b{batch}"] = p["peer-openvino-bf16"] / p["ours-openvino-bf16"]
        ours_best = min(p[k] for k in p if k.startswith("ours"))
        peer_best = min(p[k] for k in p if k.startswith("peer"))
        ratios[f"best_ours_vs_best_peer_b{batch}"] = peer_best / ours_best
        ratios[f"torch_bf16_vs_fp32_b{batch}"] = p["ours-torch-fp32"] / p["ours-torch-bf16"]
    print("speed-ups (peer p50 / ours p50, > 1 = ours faster): "
          + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()), flush=True)  # fmt: skip
    return {"rows": rows, "ratios": ratios, "gemm_tflops": gemm, "sizes_mb": sizes,
            "mflop_per_token": per_seq / args.seq_len / 1e6}


def print_table(rows: list[dict]) -> None:
    print("| engine | batch x seq | p50 ms | p95 ms | seq/s | TFLOP/s | of its GEMM rate |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['engine']} | {r['batch']} x {r['seq']} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | "
              f"{r['seq_per_s']:.1f} | {r['tflops']:.3f} | {r['of_gemm_rate']:.0%} |", flush=True)  # fmt: skip


# --------------------------------------------------------------------------- accuracy
def train_sst2(out: Path, args: argparse.Namespace) -> Path:
    """Tokenizer on a corpus slice + a brief AdamW fine-tune from random init on an SST-2 slice."""
    from albertlm.data.tokenizer_training import train_sentencepiece

    corpus = out / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for f in sorted((SHARED / "corpus" / "en").glob("*.txt")):
        if f.name != "heldout.txt":
            with open(f, encoding="utf-8") as fh:
                (corpus / f.name).write_text("".join(itertools.islice(fh, 3000)), encoding="utf-8")
    tok = train_sentencepiece([corpus], out / "tok", vocab_size=8000, seed=0)
    texts, labels = read_sst2("train_full.tsv")
    order = list(range(len(texts)))
    random.Random(0).shuffle(order)
    torch.manual_seed(0)
    config = AlbertConfig.from_preset(args.train_preset, vocab_size=tok.vocab_size, id2label=LABELS,
                                      num_hidden_layers=args.train_layers)  # fmt: skip
    model = albertlm.AlbertForSequenceClassification(config)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    steps, bs, warm = args.train_steps, 32, max(args.train_steps // 10, 1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warm, (steps - s) / (steps - warm)))
    model.train()
    start = time.time()
    for step in range(steps):
        idx = order[step * bs : (step + 1) * bs]
        enc = tok.batch_encode([texts[i] for i in idx], max_length=64, return_tensors="pt")
        loss = model(**enc, labels=torch.tensor([labels[i] for i in idx])).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"step {step} loss {loss.item():.3f} ({(time.time() - start) / (step + 1):.2f} s/step)", flush=True)
    model.eval().save_pretrained(out / "model")
    tok.save(out / "model")
    return out / "model"


def calibration_file(work: Path, n: int = 300) -> Path:
    """The first ``n`` SST-2 training sentences, one per line: the int8 calibration inputs (never dev)."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / "calibration.txt"
    path.write_text("\n".join(read_sst2("train_full.tsv")[0][:n]) + "\n", encoding="utf-8")
    return path


def trained_model(args: argparse.Namespace) -> Path:
    model_dir = Path(args.sst2_model)
    return model_dir if (model_dir / "config.json").is_file() else train_sst2(model_dir.parent, args)


def logits_of(engine, ids: list[list[int]], pad_id: int, batch: int = 32) -> np.ndarray:
    """One engine's logits over pre-tokenized rows (batches padded to their longest row)."""
    out = []
    for i in range(0, len(ids), batch):
        rows = ids[i : i + batch]
        width = max(map(len, rows))
        x = np.full((len(rows), width), pad_id, dtype=np.int64)
        for r, row in enumerate(rows):
            x[r, : len(row)] = row
        feed = {"input_ids": x, "attention_mask": (x != pad_id).astype(np.int64), "token_type_ids": np.zeros_like(x)}
        out.append(engine(feed)["logits"])
    return np.concatenate(out)


def accuracy(args: argparse.Namespace) -> dict:
    """SST-2 dev accuracy of every engine on the same token ids (the graph is all that differs)."""
    from albertlm.tokenizer import load_tokenizer

    torch.set_num_threads(args.threads)
    model_dir = trained_model(args)
    work = model_dir.parent / "bench"
    calibration = calibration_file(work)
    peer_batches = calibration_inputs(model_dir, model_dir, calibration)  # what our export calibrates on
    engines = {**build_ours(model_dir, work, args.threads, calibration),
               **build_peer(model_dir, work / "peer", args.threads, peer_batches)}  # fmt: skip
    texts, labels = read_sst2("dev.tsv")
    tok = load_tokenizer(model_dir)
    ids = [row[:128] for row in tok.encode_batch(texts, add_special_tokens=True)]  # [CLS] ... [SEP], as trained
    result: dict = {"model": str(model_dir), "dev_examples": len(texts)}
    for name, engine in engines.items():
        pred = logits_of(engine, ids, tok.pad_id).argmax(-1)
        result[name] = float(np.mean(pred == np.asarray(labels)))
    result["ours_int8_drop_points"] = 100 * (result["ours-torch-fp32"] - result["ours-onnx-int8"])
    result["peer_int8_drop_points"] = 100 * (result["ours-torch-fp32"] - result["peer-onnx-int8"])
    result["ours_openvino_int8_drop_points"] = 100 * (result["ours-torch-fp32"] - result["ours-openvino-int8"])
    result["peer_openvino_int8_drop_points"] = 100 * (result["ours-torch-fp32"] - result["peer-openvino-int8"])
    print(json.dumps(result, indent=2), flush=True)
    return result


def traffic(args: argparse.Namespace) -> dict:
    """Text in, labels out on the 872 SST-2 dev sentences in file order, tokenization included: our
    Predictor (length buckets) against the peer's HF tokenizer + padding=True batches of 32."""
    import transformers

    torch.set_num_threads(args.threads)
    model_dir = trained_model(args)
    work = model_dir.parent / "bench"
    calibration = calibration_file(work)
    export_onnx(model_dir, work / "ours", quantize="int8", calibration=calibration)
    peer = build_peer(model_dir, work / "peer", args.threads, calibration_inputs(model_dir, model_dir, calibration))
    hf_tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    texts, labels = read_sst2("dev.tsv")

    def peer_run(session: OnnxSession):
        def run() -> list[int]:
            preds = []
            for i in range(0, len(texts), 32):
                enc = hf_tok(texts[i : i + 32], padding=True, truncation=True, max_length=128, return_tensors="np",
                             return_token_type_ids=True)
                feed = {k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
                preds += session(feed)["logits"].argmax(-1).tolist()
            return preds
        return run

    def ours_run(predictor: Predictor):
        return lambda: [int(p["label"] == "positive") for p in predictor.classify(texts)]

    settings = {"max_seq_length": 128, "eval_batch_size": 32}
    runs = {
        "ours-onnx-int8": ours_run(Predictor.load(work / "ours", engine="onnx", threads=args.threads, precision="int8",
                                                  overrides=settings)),
        "peer-onnx-int8": peer_run(peer["peer-onnx-int8"]),
        "ours-openvino-int8": ours_run(Predictor.load(work / "ours", engine="openvino", threads=args.threads,
                                                      precision="int8", overrides=settings)),
        "peer-openvino-int8": peer_run(peer["peer-openvino-int8"]),
        "ours-onnx-fp32": ours_run(Predictor.load(work / "ours", engine="onnx", threads=args.threads, precision="fp32",
                                                  overrides=settings)),
        "peer-onnx-fp32": peer_run(peer["peer-onnx-fp32"]),
        "ours-torch-bf16": ours_run(Predictor.load(model_dir, threads=args.threads, precision="bf16",
                                                   overrides=settings)),
    }  # fmt: skip
    times: dict[str, list[float]] = {k: [] for k in runs}
    acc: dict[str, float] = {}
    for name, fn in runs.items():  # warm-up, and the accuracy of what each path answers
        acc[name] = float(np.mean(np.asarray(fn()) == np.asarray(labels)))
    for _ in range(args.traffic_rounds):
        for name, fn in runs.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    rows = {k: {"seconds_p50": statistics.median(v), "sentences_per_s": len(texts) / statistics.median(v),
                "accuracy": acc[k]} for k, v in times.items()}  # fmt: skip
    t = {k: r["seconds_p50"] for k, r in rows.items()}
    ratios = {f"{q}_vs_peer_{q}": t[f"peer-onnx-{q}"] / t[f"ours-onnx-{q}"] for q in ("int8", "fp32")}
    ratios["best_int8_vs_peer_best_int8"] = min(t["peer-onnx-int8"], t["peer-openvino-int8"]) / min(
        t["ours-onnx-int8"], t["ours-openvino-int8"])
    print("| engine | s per 872 sentences (p50) | sentences/s | SST-2 dev acc |\n|---|---|---|---|")
    for k, r in rows.items():
        print(f"| {k} | {r['seconds_p50']:.2f} | {r['sentences_per_s']:.0f} | {r['accuracy']:.4f} |")
    print("real-traffic speed-ups (peer / ours): " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()), flush=True)
    return {"rows": rows, "ratios": ratios, "rounds": args.traffic_rounds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["speed", "accuracy", "traffic", "all"], default="all")
    ap.add_argument("--preset", default="albert-base-v2", help="speed: model shape")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2, help="torch and onnxruntime intra-op threads")
    ap.add_argument("--rounds", "--reps", type=int, default=20, help="speed: timed rounds at batch 1")
    ap.add_argument("--rounds-large", "--reps-large", type=int, default=5, help="speed: timed rounds at batch 32")
    ap.add_argument("--calibration-size", type=int, default=64, help="speed: OpenVINO int8 calibration batches")
    ap.add_argument("--traffic-rounds", type=int, default=3, help="traffic: timed passes over SST-2 dev")
    ap.add_argument("--sst2-model", default=str(ROOT / "runs" / "deploy" / "sst2" / "model"),
                    help="accuracy / traffic: fine-tuned classifier dir (trained here if missing)")  # fmt: skip
    ap.add_argument("--train-preset", default="albert-small", help="accuracy: shape of the model trained")
    ap.add_argument("--train-layers", type=int, default=4)
    ap.add_argument("--train-steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    out: dict = {"machine": machine(), "threads": args.threads, "torch": torch.__version__,
                 "onnxruntime": __import__("onnxruntime").__version__}  # fmt: skip
    print(f"machine: {out['machine']}, {args.threads} threads, torch {out['torch']}, onnxruntime {out['onnxruntime']}")
    if args.part in ("accuracy", "all"):
        out["accuracy"] = accuracy(args)
    if args.part in ("traffic", "all"):
        out["traffic"] = traffic(args)
    if args.part in ("speed", "all"):
        out["speed"] = speed(args)
    write_result(out, args.json, "docs/results/deploy/README.md says how to read it")


if __name__ == "__main__":
    main()
