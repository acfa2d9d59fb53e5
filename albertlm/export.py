"""ONNX export, dynamic int8 quantization and one inference interface over torch and onnxruntime.

    albertlm export --model runs/sst2 --format onnx --out runs/sst2-onnx --quantize int8

    from albertlm.export import OnnxModel, Predictor
    outputs = OnnxModel("runs/sst2-onnx", threads=2)(input_ids, attention_mask, token_type_ids)  # numpy
    Predictor("runs/sst2-onnx", engine="onnx").classify(["a gripping film"])

An exported directory is self-contained: ``model.onnx`` (fp32), optionally ``model.int8.onnx``,
``config.json``, the tokenizer files and ``deploy.json`` (architecture, input/output names, the
measured export error). Needs the ``deploy`` extra (onnx, onnxruntime); the package imports without it.

Why the graph is post-processed: the TorchScript exporter routes every shared ALBERT weight through
``Identity`` nodes, and ``quantize_dynamic`` only quantizes a MatMul whose weight is an initializer, so
a naive export leaves all shared-layer MatMuls in fp32 (docs/anchors.md). Rewiring those consumers to
the initializer itself makes every computed layer's MatMul quantizable while the weight is still stored
once (the quantizer caches quantized initializers by name, so int8 weights are stored once as well).

The default graph (``graph="ort"``) is written for onnxruntime: each attention block exports as one
``com.microsoft.Attention`` node (q/k/v in one matmul, masking and softmax inside the kernel), and
onnxruntime's transformer optimizer fuses GELU and residual + LayerNorm. Under int8 the Attention
nodes become ``QAttention``. On albert-base at batch 32 that makes int8 ~1.5x faster than the plain
graph (benchmarks/inference.py --standard-graph); ``graph="standard"`` keeps plain ONNX ops.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from albertlm.config import AlbertConfig
from albertlm.onnx_fusion import fuse_for_onnxruntime, ort_attention

DEPLOY_HINT = "pip install 'albertlm[deploy]'"
FP32_FILE, INT8_FILE, MANIFEST_FILE = "model.onnx", "model.int8.onnx", "deploy.json"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
DEFAULT_OPSET = 17
# Architecture (config.json "architectures") -> the outputs its ONNX graph returns, in order.
OUTPUTS: dict[str, tuple[str, ...]] = {
    "AlbertModel": ("last_hidden_state", "pooler_output"),
    "AlbertForPreTraining": ("prediction_logits", "sop_logits"),
    "AlbertForMaskedLM": ("logits",),
    "AlbertForSequenceClassification": ("logits",),
    "AlbertForTokenClassification": ("logits",),
    "AlbertForQuestionAnswering": ("start_logits", "end_logits"),
    "AlbertForMultipleChoice": ("logits",),
}
# Architecture -> what a Predictor (and the server) does with it.
TASKS = {
    "AlbertForSequenceClassification": "classification",
    "AlbertForTokenClassification": "tagging",
    "AlbertForQuestionAnswering": "qa",
}
# ORT op types quantized: MatMul/Gemm are the encoder and heads; Gather is the V x E embedding table,
# which is a third of albert-base's weights and stays fp32 under the default op types.
QUANT_OP_TYPES = ("MatMul", "Gemm", "Gather", "Attention")
# Graph flavours: "ort" fuses attention, GELU and residual+LayerNorm into onnxruntime's contrib ops
# (com.microsoft.Attention / FastGelu / SkipLayerNormalization), the fast path on onnxruntime;
# "standard" keeps plain ONNX ops, for runtimes other than onnxruntime.
GRAPHS = ("ort", "standard")


def require(module: str) -> Any:
    """Import a deploy-extra dependency, or fail with the install command."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"{module} is needed for ONNX export and serving: {DEPLOY_HINT}") from None


def architecture_of(model_dir: str | Path) -> str:
    """The model class named by ``config.json``'s ``architectures`` (AlbertModel when absent)."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; give a model directory (config.json + weights)")
    arch = (json.loads(path.read_text()).get("architectures") or ["AlbertModel"])[0]
    if arch not in OUTPUTS:
        raise ValueError(f"{path}: architecture {arch!r} has no ONNX export; supported: {', '.join(OUTPUTS)}")
    return arch


def load_torch_model(model_dir: str | Path) -> nn.Module:
    """The albertlm class named in config.json, loaded in eval mode."""
    import albertlm

    return getattr(albertlm, architecture_of(model_dir)).from_pretrained(model_dir).eval()


class _Exportable(nn.Module):
    """Positional inputs -> a tuple of named output tensors (the exporter cannot return dataclasses)."""

    def __init__(self, model: nn.Module, outputs: tuple[str, ...]):
        super().__init__()
        self.model, self.outputs = model, outputs

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return tuple(getattr(out, name) for name in self.outputs)


def sample_inputs(config: AlbertConfig, batch: int, seq: int, choices: int | None = None, seed: int = 0):
    """Random ids with ragged padding: (B, S) each, or (B, C, S) for multiple choice."""
    g = torch.Generator().manual_seed(seed)
    shape = (batch, seq) if choices is None else (batch, choices, seq)
    ids = torch.randint(5, config.vocab_size, shape, generator=g)
    lengths = torch.randint(max(seq // 2, 1), seq + 1, shape[:-1], generator=g)
    mask = (torch.arange(seq) < lengths.unsqueeze(-1)).long()
    mask[..., 0] = 1
    mask.view(-1, seq)[0] = 1  # one full row, so the longest row spans the sequence as in real batches
    types = (torch.arange(seq) >= seq // 2).long().expand(shape).contiguous() * mask
    return ids * mask, mask, types


def inline_shared_initializers(model_proto: Any) -> int:
    """Rewire consumers of ``Identity(initializer)`` to the initializer and drop the Identity nodes.

    Returns how many Identity nodes were removed. Graph outputs produced by an Identity are kept.
    """
    graph = model_proto.graph
    initializers = {t.name for t in graph.initializer}
    outputs = {o.name for o in graph.output}
    alias: dict[str, str] = {}
    kept = []
    for node in graph.node:
        src = node.input[0] if node.op_type == "Identity" else None
        src = alias.get(src, src)
        if src in initializers and node.output[0] not in outputs:
            alias[node.output[0]] = src
        else:
            kept.append(node)
    for node in kept:
        for i, name in enumerate(node.input):
            if name in alias:
                node.input[i] = alias[name]
    del graph.node[:]
    graph.node.extend(kept)
    return len(alias)


def export_onnx(
    model_dir: str | Path,
    out_dir: str | Path,
    quantize: str | None = None,
    opset: int = DEFAULT_OPSET,
    tokenizer_dir: str | Path | None = None,
    graph: str = "ort",
) -> dict[str, Any]:
    """Export ``model_dir`` to ``out_dir`` (see the module docstring); returns the manifest written.

    ``graph="ort"`` writes onnxruntime's fused contrib ops (fastest there); ``"standard"`` plain ONNX.

    The fp32 graph is checked against PyTorch on a batch of another shape than the traced one (so the
    dynamic axes are exercised); the max abs difference is recorded in the manifest.
    """
    onnx = require("onnx")
    require("onnxruntime")
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if quantize not in (None, "int8"):
        raise ValueError(f"--quantize {quantize!r} is not supported; use int8 or leave it out")
    if graph not in GRAPHS:
        raise ValueError(f"--graph {graph!r} is not one of {', '.join(GRAPHS)}")
    arch = architecture_of(model_dir)
    model = load_torch_model(model_dir)
    outputs = OUTPUTS[arch]
    choices = 2 if arch == "AlbertForMultipleChoice" else None
    axes = {0: "batch", 1: "sequence"} if choices is None else {0: "batch", 1: "choices", 2: "sequence"}
    dynamic_axes = {name: axes for name in INPUT_NAMES}
    out_dir.mkdir(parents=True, exist_ok=True)
    fp32_path = out_dir / FP32_FILE
    fused = ort_attention(model) if graph == "ort" else contextlib.nullcontext()
    with warnings.catch_warnings(), fused:
        # The TorchScript exporter is deprecated in favour of torch.export, which takes ~6x longer
        # here and gives the same graph after inline_shared_initializers; it is kept for speed and
        # because it writes autograd Functions' symbolic ops (the fused Attention).
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Exportable(model, outputs).eval(),  # a fresh wrapper is in train mode: dropout on
            sample_inputs(model.config, 2, 8, choices),
            str(fp32_path),
            input_names=list(INPUT_NAMES),
            output_names=list(outputs),
            dynamic_axes=dynamic_axes,
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
            custom_opsets={"com.microsoft": 1},
        )
    proto = onnx.load(str(fp32_path))
    removed = inline_shared_initializers(proto)
    onnx.save(proto, str(fp32_path))
    fusions = fuse_for_onnxruntime(fp32_path, model.config) if graph == "ort" else {}

    manifest: dict[str, Any] = {
        "architecture": arch,
        "task": TASKS.get(arch, "encoder" if arch == "AlbertModel" else arch),
        "inputs": list(INPUT_NAMES),
        "outputs": list(outputs),
        "opset": opset,
        "graph": graph,
        "fused_ops": fusions,
        "files": {"fp32": FP32_FILE},
        "identity_nodes_inlined": removed,
    }
    check = sample_inputs(model.config, 3, 13, 3 if choices else None, seed=1)
    manifest["fp32_max_abs_diff"] = max_abs_diff(model, OnnxSession(fp32_path), check)
    if quantize == "int8":
        quantize_int8(fp32_path, out_dir / INT8_FILE)
        manifest["files"]["int8"] = INT8_FILE
        manifest["int8_max_abs_diff"] = max_abs_diff(model, OnnxSession(out_dir / INT8_FILE), check)
        manifest["int8_report"] = quantization_report(out_dir / INT8_FILE)
    manifest["sizes_bytes"] = {k: (out_dir / f).stat().st_size for k, f in manifest["files"].items()}

    # Self-contained: config.json (labels, shapes) and the tokenizer beside the graph.
    shutil.copyfile(model_dir / "config.json", out_dir / "config.json")
    tok_src = Path(tokenizer_dir) if tokenizer_dir else model_dir
    manifest["tokenizer"] = _copy_tokenizer(tok_src, out_dir)
    (out_dir / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _copy_tokenizer(src: Path, out_dir: Path) -> bool:
    from albertlm.tokenizer import load_tokenizer

    try:
        tok = load_tokenizer(src)
    except FileNotFoundError:
        return False  # an encoder-only deployment may feed ids; Predictor then says what is missing
    tok.save(out_dir)
    return True


def quantize_int8(fp32_path: str | Path, int8_path: str | Path) -> Path:
    """Dynamic int8 (weights int8 per tensor, activations quantized at run time) via onnxruntime."""
    require("onnxruntime")
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The quantizer logs a "consider pre-processing" hint on every call; our graph is already shaped.
    logging.getLogger().setLevel(max(logging.getLogger().level, logging.ERROR))
    from onnx import TensorProto

    quantize_dynamic(
        str(fp32_path),
        str(int8_path),
        op_types_to_quantize=list(QUANT_OP_TYPES),
        weight_type=QuantType.QInt8,
        # contrib ops (Attention, SkipLayerNormalization) have no ONNX shape inference: float outputs
        extra_options={"DefaultTensorType": TensorProto.FLOAT},
    )
    return Path(int8_path)


def quantization_report(path: str | Path) -> dict[str, int]:
    """What the int8 graph really holds: quantized vs fp32-weight MatMuls and bytes per dtype."""
    onnx = require("onnx")
    from onnx import numpy_helper

    graph = onnx.load(str(path)).graph
    float_inits = {t.name for t in graph.initializer if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) == 2}
    ops = Counter(n.op_type for n in graph.node)
    nbytes: Counter = Counter()
    for t in graph.initializer:
        nbytes[onnx.TensorProto.DataType.Name(t.data_type).lower()] += numpy_helper.to_array(t).nbytes
    return {
        "int8_matmuls": ops["MatMulInteger"] + ops["DynamicQuantizeMatMul"],
        "int8_attentions": ops["QAttention"],
        "fp32_weight_matmuls": sum(
            1
            for n in graph.node
            if n.op_type in ("MatMul", "Gemm", "Attention") and any(i in float_inits for i in n.input)
        ),
        "int8_gathers": sum(1 for n in graph.node if n.op_type == "Gather" and n.input[0].endswith("_quantized")),
        **{f"{k}_bytes": v for k, v in nbytes.items()},
    }


def max_abs_diff(model: nn.Module, session: OnnxSession, inputs: tuple[torch.Tensor, ...]) -> float:
    """Largest |torch - onnx| over every output, on the real (non-padding) positions."""
    with torch.inference_mode():
        ref = model(**dict(zip(INPUT_NAMES, inputs, strict=True)))
    got = session(*inputs)
    diffs = []
    for name, value in got.items():
        expected = getattr(ref, name).float().numpy()
        diffs.append(float(np.abs(expected - value).max()))
    return max(diffs)


# --------------------------------------------------------------------------- inference engines
def _numpy(x: Any, like: np.ndarray | None = None, fill: int = 0) -> np.ndarray:
    if x is None:
        return np.full(like.shape, fill, dtype=np.int64)
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.int64)


class OnnxSession:
    """One onnxruntime CPU session: ``(input_ids, attention_mask, token_type_ids) -> {name: array}``."""

    def __init__(self, path: str | Path, threads: int | None = None, spin: bool = False):
        ort = require("onnxruntime")
        opts = ort.SessionOptions()
        # intra-op threads do the matmuls; one inter-op thread, since the graph is a single chain
        opts.intra_op_num_threads = threads or 0
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Idle workers spin by default; on shared cores that steals time from the busy ones (measured on
        # 2 shared cores: int8 batch 8 took 2.2 s spinning, 1.0 s without). spin=True for dedicated cores.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        self.path = Path(path)
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.output_names = [o.name for o in self.session.get_outputs()]

    def __call__(self, input_ids: Any, attention_mask: Any = None, token_type_ids: Any = None) -> dict[str, np.ndarray]:
        ids = _numpy(input_ids)
        feeds = {
            "input_ids": ids,
            "attention_mask": _numpy(attention_mask, ids, fill=1),
            "token_type_ids": _numpy(token_type_ids, ids, fill=0),
        }
        return dict(zip(self.output_names, self.session.run(self.output_names, feeds), strict=True))


class OnnxModel(OnnxSession):
    """An exported directory: the session plus its config, architecture and manifest.

    ``quantized=None`` picks the int8 graph when the directory has one (that is why it was exported).
    """

    def __init__(self, directory: str | Path, threads: int | None = None, quantized: bool | None = None):
        directory = Path(directory)
        manifest_path = directory / MANIFEST_FILE
        if not manifest_path.is_file():
            raise FileNotFoundError(f"{manifest_path} not found; export first: albertlm export --model DIR --out DIR")
        self.manifest = json.loads(manifest_path.read_text())
        files = self.manifest["files"]
        if quantized and "int8" not in files:
            raise FileNotFoundError(f"{directory} has no int8 graph; export with --quantize int8")
        use_int8 = "int8" in files if quantized is None else quantized
        super().__init__(directory / files["int8" if use_int8 else "fp32"], threads)
        self.directory = directory
        self.precision = "int8" if use_int8 else "fp32"
        self.architecture = self.manifest["architecture"]
        self.config = AlbertConfig.load(directory)

    def as_torch_module(self) -> OnnxAsTorch:
        """A stand-in for the torch model: same keyword call, outputs as attributes, torch tensors."""
        return OnnxAsTorch(self)


class OnnxAsTorch:
    """Lets code written for an albertlm model (``model(**batch).logits``) run the ONNX graph unchanged."""

    def __init__(self, onnx_model: OnnxModel):
        self.onnx_model, self.config = onnx_model, onnx_model.config

    def __call__(self, input_ids: Any, attention_mask: Any = None, token_type_ids: Any = None, **_: Any):
        from types import SimpleNamespace

        out = self.onnx_model(input_ids, attention_mask, token_type_ids)
        return SimpleNamespace(**{k: torch.from_numpy(v) for k, v in out.items()})

    def eval(self) -> OnnxAsTorch:
        return self

    def to(self, *_: Any, **__: Any) -> OnnxAsTorch:
        return self


class TorchRunner:
    """The PyTorch model behind the same call shape as ``OnnxModel`` (numpy out)."""

    def __init__(self, directory: str | Path, threads: int | None = None):
        if threads:
            torch.set_num_threads(threads)
        self.model = load_torch_model(directory)
        self.config = self.model.config
        self.architecture = type(self.model).__name__
        self.output_names = list(OUTPUTS[self.architecture])

    def __call__(self, input_ids: Any, attention_mask: Any = None, token_type_ids: Any = None) -> dict[str, np.ndarray]:
        def t(x: Any) -> torch.Tensor | None:
            return None if x is None else torch.as_tensor(np.asarray(x), dtype=torch.long)

        with torch.inference_mode():
            out = self.model(input_ids=t(input_ids), attention_mask=t(attention_mask), token_type_ids=t(token_type_ids))
        return {name: getattr(out, name).float().numpy() for name in self.output_names}


def load_engine(directory: str | Path, engine: str = "torch", threads: int | None = None) -> OnnxModel | TorchRunner:
    """``engine="torch"`` reads an HF-layout model dir; ``engine="onnx"`` an exported dir."""
    if engine == "onnx":
        return OnnxModel(directory, threads)
    if engine == "torch":
        return TorchRunner(directory, threads)
    raise ValueError(f"unknown engine {engine!r}; use torch or onnx")


__all__ = ["OnnxModel", "OnnxSession", "Predictor", "TorchRunner", "export_onnx", "load_engine", "quantize_int8"]


# --------------------------------------------------------------------------- text in, answers out
class Predictor:
    """Text in -> labels / tags / answer spans out, on either engine, in length-sorted batches.

    Sorting by length before batching keeps padding (wasted compute) low; results come back in the
    caller's order. ``directory`` is a model dir for ``engine="torch"``, an exported dir for ``"onnx"``;
    either must hold the tokenizer (``albertlm export`` copies it).
    """

    def __init__(
        self,
        directory: str | Path,
        engine: str = "torch",
        threads: int | None = None,
        max_batch_size: int = 32,
        max_length: int = 512,
        quantized: bool | None = None,
    ):
        from albertlm.tokenizer import load_tokenizer

        if engine == "onnx":
            self.runner: OnnxModel | TorchRunner = OnnxModel(directory, threads, quantized)
        else:
            self.runner = load_engine(directory, engine, threads)
        self.engine = engine
        self.config = self.runner.config
        self.architecture = self.runner.architecture
        self.task = TASKS.get(self.architecture)
        try:
            self.tokenizer = load_tokenizer(directory)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{directory} holds no tokenizer (spiece.model / vocab.txt); save one there, or export with "
                "`albertlm export --tokenizer DIR`"
            ) from None
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.max_batch_size = max_batch_size
        self.max_length = min(max_length, self.config.max_position_embeddings)
        n = self.config.num_labels
        self.labels = [(self.config.id2label or {}).get(i, f"LABEL_{i}") for i in range(n)]

    def token_counts(self, texts: list[str], pairs: list[str] | None = None) -> list[int]:
        """Tokens each input takes with its special tokens (to reject over-long input up front)."""
        first = [len(ids) for ids in self.tokenizer.encode_batch(texts)]
        if pairs is None:
            return [n + 2 for n in first]
        return [a + len(b) + 3 for a, b in zip(first, self.tokenizer.encode_batch(pairs), strict=True)]

    def _batches(self, texts: list[str], pairs: list[str] | None):
        """(original indices, encoded batch, outputs) per length-sorted chunk of max_batch_size."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]) + (len(pairs[i]) if pairs else 0))
        for start in range(0, len(order), self.max_batch_size):
            idx = order[start : start + self.max_batch_size]
            enc = self.tokenizer.batch_encode(
                [texts[i] for i in idx], [pairs[i] for i in idx] if pairs else None, max_length=self.max_length
            )
            enc = {k: np.asarray(v, dtype=np.int64) for k, v in enc.items()}
            yield idx, enc, self.runner(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])

    def _need(self, task: str) -> None:
        if self.task != task:
            raise ValueError(f"this model is {self.architecture}; it cannot do {task}")

    def classify(self, texts: list[str], pairs: list[str] | None = None) -> list[dict[str, Any]]:
        """One ``{"label", "score", "probabilities"}`` per text (``{"value"}`` for a 1-label regressor)."""
        self._need("classification")
        results: list[dict[str, Any]] = [{} for _ in texts]
        for idx, _, out in self._batches(texts, pairs):
            logits = out["logits"].astype(np.float64)
            if logits.shape[-1] == 1:
                for i, v in zip(idx, logits[:, 0], strict=True):
                    results[i] = {"value": float(v)}
                continue
            probs = _softmax(logits)
            for i, p in zip(idx, probs, strict=True):
                best = int(p.argmax())
                results[i] = {
                    "label": self.labels[best],
                    "score": float(p[best]),
                    "probabilities": {lab: float(x) for lab, x in zip(self.labels, p, strict=True)},
                }
        return results

    def tag(self, texts: list[str]) -> list[list[dict[str, Any]]]:
        """Per text, one ``{"token", "label", "score"}`` per (non-special) token."""
        self._need("tagging")
        results: list[list[dict[str, Any]]] = [[] for _ in texts]
        for idx, enc, out in self._batches(texts, None):
            probs = _softmax(out["logits"].astype(np.float64))  # (B, S, num_labels)
            for row, i in enumerate(idx):
                n = int(enc["attention_mask"][row].sum())
                ids = enc["input_ids"][row, 1 : n - 1]  # without [CLS] ... [SEP]
                tokens = self.tokenizer.convert_ids_to_tokens(ids.tolist())
                p = probs[row, 1 : n - 1]
                results[i] = [
                    {"token": tok, "label": self.labels[int(q.argmax())], "score": float(q.max())}
                    for tok, q in zip(tokens, p, strict=True)
                ]
        return results

    def answer(self, questions: list[str], contexts: list[str], max_answer_tokens: int = 30) -> list[dict[str, Any]]:
        """Best span of each context (``[CLS] question [SEP] context [SEP]``): text, score, token span.

        The span maximises start + end logit over context tokens with end >= start, as in SQuAD 1.1
        decoding; the text is the span's tokens decoded (lowercased like the tokenizer's input).
        """
        self._need("qa")
        results: list[dict[str, Any]] = [{} for _ in questions]
        for idx, enc, out in self._batches(questions, contexts):
            for row, i in enumerate(idx):
                ctx = (enc["token_type_ids"][row] == 1) & (enc["attention_mask"][row] == 1)
                ctx[np.flatnonzero(ctx)[-1:]] = False  # the final [SEP]
                pos = np.flatnonzero(ctx)
                if len(pos) == 0:
                    results[i] = {"answer": "", "score": 0.0, "start_token": None, "end_token": None}
                    continue
                s = _log_softmax(out["start_logits"][row, pos].astype(np.float64))
                e = _log_softmax(out["end_logits"][row, pos].astype(np.float64))
                span = s[:, None] + e[None, :]  # (P, P): start x end
                k = np.arange(len(pos))
                valid = (k[None, :] >= k[:, None]) & (k[None, :] - k[:, None] < max_answer_tokens)
                span = np.where(valid, span, -np.inf)
                a, b = np.unravel_index(int(span.argmax()), span.shape)
                ids = enc["input_ids"][row, pos[a] : pos[b] + 1].tolist()
                results[i] = {
                    "answer": self.tokenizer.decode(ids),
                    "score": float(np.exp(span[a, b])),
                    "start_token": int(pos[a] - pos[0]),
                    "end_token": int(pos[b] - pos[0]),
                }
        return results


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())
