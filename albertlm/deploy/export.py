"""ONNX export and dynamic int8 quantization of every head.

    albertlm export --model runs/sst2 --format onnx --out runs/sst2-onnx --quantize int8

    from albertlm.deploy.inference import Predictor
    Predictor.load("runs/sst2-onnx", engine="onnx").classify(["a gripping film"])

An exported directory is self-contained: ``model.onnx`` (fp32), optionally ``model.int8.onnx``,
``config.json``, the tokenizer files and ``deploy.json`` (architecture, input/output names, the
measured export error, the sha256 of every file). Needs the ``deploy`` extra (onnx, onnxruntime); the
package imports without it.

``--calibration FILE`` (with ``--quantize int8``) adds ``model.openvino-int8.xml`` / ``.bin`` for
``--engine openvino``: NNCF's static int8 of the fp32 graph, activations as well as weights, their ranges
measured on the file's inputs (lines as ``albertlm predict`` reads them). onnxruntime's dynamic int8
quantizes activations per batch at run time and needs no data; a static graph skips that work and
OpenVINO runs its matmuls on the CPU's int8 units (VNNI, AMX), at the price of calibration inputs that
must look like the served ones (needs the ``openvino`` extra: openvino, nncf).

An export is written into a temp folder inside ``--out`` and moved into place only when complete, with
``deploy.json`` last: an export killed part-way leaves the previous one working, and a half-swapped
folder fails its checksums (one line: export again) instead of serving a mix of two exports.

Why the graph is post-processed: the TorchScript exporter routes every shared ALBERT weight through
``Identity`` nodes, and ``quantize_dynamic`` only quantizes a MatMul whose weight is an initializer, so
a naive export leaves all shared-layer MatMuls in fp32. Rewiring those consumers to
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
import copy
import json
import shutil
import uuid
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from albertlm.card import CARD, read_card, update_card
from albertlm.config import AlbertConfig
from albertlm.deploy.engines import (
    MANIFEST_FILE,
    OPENVINO_INT8,
    OnnxSession,
    OpenVinoSession,
    TorchEngine,
    architecture_of,
    load_torch_model,
    require,
)
from albertlm.deploy.onnx_fusion import fuse_for_onnxruntime, ort_attention
from albertlm.devices import DEVICE_HELP, parse_device, resolve_device
from albertlm.errors import DataError, UserError
from albertlm.files import publish, sha256, staging_dir, write_text_atomic
from albertlm.heads import HEADS

FP32_FILE, INT8_FILE = "model.onnx", "model.int8.onnx"
OPENVINO_INT8_FILE = "model.openvino-int8.xml"  # + .bin: NNCF's static int8, for --engine openvino
CALIBRATION_SIZE = 300  # inputs read for int8 calibration (NNCF's own default subset)
EXPORT_MARK = ".albertlm-export"  # in an export's temp folder: a killed export's leftovers are ours to remove
# In --out: {file: [sha256, ...]} of what exports wrote there. Only a file whose bytes still match a checksum
# recorded for it is replaced or deleted by a later export; anything else in --out is the user's.
WRITTEN = ".albertlm-export-written.json"
DEFAULT_OPSET = 17
# ORT op types quantized: MatMul/Gemm are the encoder and heads; Gather is the V x E embedding table,
# which is a third of albert-base's weights and stays fp32 under the default op types.
QUANT_OP_TYPES = ("MatMul", "Gemm", "Gather", "Attention")
# Graph flavours: "ort" fuses attention, GELU and residual+LayerNorm into onnxruntime's contrib ops
# (com.microsoft.Attention / FastGelu / SkipLayerNormalization), the fast path on onnxruntime;
# "standard" keeps plain ONNX ops, for runtimes other than onnxruntime. (OpenVINO converts those contrib ops,
# so `--engine openvino` runs either graph's fp32 file.)
GRAPHS = ("ort", "standard")
MIN_OPSET = 14  # the attention export's ops
QUANTIZE = ("int8",)


@dataclass(frozen=True)
class ExportSettings:
    """How ``albertlm export`` writes a model (the command's flags are these fields; see ``export_onnx``)."""

    opset: int = field(default=DEFAULT_OPSET, metadata={"help": f"ONNX opset (>= {MIN_OPSET} for the attention "
                                                               "export)"})  # fmt: skip
    graph: str = field(default="ort", metadata={"choices": GRAPHS, "help": (
        "ort: fused onnxruntime contrib ops (Attention, FastGelu, SkipLayerNormalization), fastest on "
        "onnxruntime (OpenVINO reads it too); standard: plain ONNX ops for other runtimes")})  # fmt: skip
    quantize: str | None = field(default=None, metadata={"choices": QUANTIZE, "help": (
        "also write model.int8.onnx (onnxruntime dynamic quantization)")})  # fmt: skip
    device: str = field(default="auto", metadata={"parse": parse_device, "help": (
        "where the PyTorch reference of the parity check runs: " + DEVICE_HELP + " (the graph is traced on the "
        "CPU)")})  # fmt: skip
    max_int8_drop: float = field(default=1.0, metadata={"min": 0.0, "help": (
        "the int8 gate (with --gate-data or --calibration): the most points int8 may lose against fp32 (or the "
        "most %% of answers it may change) before the export stops, writing nothing")})  # fmt: skip


class _Exportable(nn.Module):
    """Positional inputs -> a tuple of named output tensors (the exporter cannot return dataclasses)."""

    def __init__(self, model: nn.Module, inputs: tuple[str, ...], outputs: tuple[str, ...]):
        super().__init__()
        self.model, self.inputs, self.outputs = model, inputs, outputs

    def forward(self, *args: torch.Tensor):
        out = self.model(**dict(zip(self.inputs, args, strict=True)))
        return tuple(getattr(out, name) for name in self.outputs)


def sample_inputs(config: AlbertConfig, batch: int, seq: int, choices: int | None = None, seed: int = 0,
                  p_mask: bool = False):  # fmt: skip
    """Random ids with ragged padding: (B, S) each, or (B, C, S) for multiple choice; with ``p_mask``
    also the SQuAD 2.0 head's mask (1 on padding and on the token after [CLS]; enough candidates stay open
    that the head's top-k never ranks tied, masked positions)."""
    g = torch.Generator().manual_seed(seed)
    shape = (batch, seq) if choices is None else (batch, choices, seq)
    ids = torch.randint(5, config.vocab_size, shape, generator=g)
    lengths = torch.randint(max(seq // 2, 1), seq + 1, shape[:-1], generator=g)
    mask = (torch.arange(seq) < lengths.unsqueeze(-1)).long()
    mask[..., 0] = 1
    mask.view(-1, seq)[0] = 1  # one full row, so the longest row spans the sequence as in real batches
    types = (torch.arange(seq) >= seq // 2).long().expand(shape).contiguous() * mask
    if p_mask:
        pm = 1 - mask
        pm[..., 1] = 1
        return ids * mask, mask, types, pm
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
    calibration: str | Path | None = None,
    device: str = "auto",
    extra: Callable[[Path, dict[str, Any]], list[str]] | None = None,
    gate: Any = None,
) -> dict[str, Any]:
    """Export ``model_dir`` to ``out_dir`` (see the module docstring); returns the manifest written.

    ``graph="ort"`` writes onnxruntime's fused contrib ops (fastest there); ``"standard"`` plain ONNX.
    ``calibration`` (with ``quantize="int8"``): a file of inputs as ``albertlm predict`` reads them; the
    export then also writes OpenVINO's static int8 file, calibrated on its first ``CALIBRATION_SIZE``.

    The fp32 graph is checked against PyTorch on a batch of another shape than the traced one (so the
    dynamic axes are exercised), the model run on ``device`` in fp32; the max abs difference is recorded in
    the manifest with the device. ``extra(folder, manifest)`` writes more files of the export (the web page)
    into its staging folder, swapped in with the rest; it returns the names no engine here reads (the page's
    files), left out of the checksums as the model card is. ``gate`` (``albertlm.deploy.gate.Int8Gate``)
    measures each int8 file against fp32 before anything is moved into place, and stops the export past its
    limit.
    """
    require("onnx")
    require("onnxruntime")
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    _check_request(out_dir, quantize, graph, calibration)
    _refuse_foreign(out_dir, [FP32_FILE, "config.json", *([INT8_FILE] if quantize else [])], _ours(out_dir))
    reference_device = resolve_device(device)  # a GPU that is not there: one line before anything is written
    arch = architecture_of(model_dir)
    tok_src = Path(tokenizer_dir) if tokenizer_dir else model_dir
    # read before anything is written: a bad calibration file ends the export with nothing half-made
    feeds = calibration_inputs(model_dir, tok_src, Path(calibration)) if calibration is not None else None
    model = load_torch_model(model_dir)
    head = HEADS[arch]
    outputs, inputs = head.outputs, head.inputs
    choices = 2 if arch == "AlbertForMultipleChoice" else None
    with_p_mask = "p_mask" in inputs
    out_dir.mkdir(parents=True, exist_ok=True)
    with _staging(out_dir) as (out_dir, final_dir):  # out_dir is the temp folder from here on
        fp32_path = out_dir / FP32_FILE
        removed, fusions = _write_graph(model, fp32_path, head, choices, opset, graph)

        manifest: dict[str, Any] = {
            "architecture": arch,
            "inputs": list(inputs),
            "outputs": list(outputs),
            "opset": opset,
            "graph": graph,
            "fused_ops": fusions,
            "files": {"fp32": FP32_FILE},
            "identity_nodes_inlined": removed,
        }
        check = dict(zip(inputs, sample_inputs(model.config, 3, 13, 3 if choices else None, seed=1, p_mask=with_p_mask),
                         strict=True))  # fmt: skip
        ref = model if reference_device.type == "cpu" else copy.deepcopy(model).to(reference_device)
        manifest["checked_on"] = str(reference_device)
        _quantize_and_check(model, ref, out_dir, manifest, check, quantize, feeds, calibration)
        manifest["sizes_bytes"] = {k: (out_dir / f).stat().st_size for k, f in manifest["files"].items()}

        # Self-contained: config.json (labels, shapes) and the tokenizer beside the graph.
        shutil.copyfile(model_dir / "config.json", out_dir / "config.json")
        manifest["tokenizer"] = _copy_tokenizer(tok_src, out_dir)
        beside = extra(out_dir, manifest) if extra is not None else []
        if read_card(final_dir)[1]:  # a README.md of the user's own in --out stays (and is not replaced)
            update_card(out_dir, f"exported to ONNX ({', '.join(sorted(manifest['files']))}) from {model_dir}",
                        inherit=model_dir, fresh=True, name=final_dir.name, facts={"opset": opset, "graph": graph,
                                                  "fp32 max |diff| vs torch": f"{manifest['fp32_max_abs_diff']:.2e}"})
        written = sorted(p.name for p in out_dir.iterdir() if p.is_file() and p.name != EXPORT_MARK)
        # what the engines read: the model card beside them is documentation, edited or deleted freely
        manifest["sha256"] = {name: sha256(out_dir / name) for name in written if name != CARD and name not in beside}
        if gate is not None and gate.active and (quantize == "int8" or feeds is not None):
            manifest["int8_gate"] = measure_gate(gate, out_dir, manifest, [
                *(["onnx"] if quantize == "int8" else []), *(["openvino"] if feeds is not None else [])])
        _swap_in(out_dir, final_dir, written, manifest)
        return manifest


def _write_graph(model: Any, fp32_path: Path, head: Any, choices: int | None, opset: int,
                 graph: str) -> tuple[int, dict[str, int]]:  # fmt: skip
    """Trace ``model`` to ``fp32_path`` (dynamic rows, choices and sequence), the shared layer's weights stored
    once, onnxruntime's fusions applied for ``graph="ort"``; returns (Identity nodes inlined, fusions)."""
    onnx = require("onnx")
    inputs, outputs = head.inputs, head.outputs
    axes = {0: "batch", 1: "sequence"} if choices is None else {0: "batch", 1: "choices", 2: "sequence"}
    fused = ort_attention(model) if graph == "ort" else contextlib.nullcontext()
    with warnings.catch_warnings(), fused:
        # The TorchScript exporter is deprecated in favour of torch.export, which takes ~6x longer
        # here and gives the same graph after inline_shared_initializers; it is kept for speed and
        # because it writes autograd Functions' symbolic ops (the fused Attention).
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Exportable(model, inputs, outputs).eval(),  # a fresh wrapper is in train mode: dropout on
            sample_inputs(model.config, 2, 8, choices, p_mask="p_mask" in inputs),
            str(fp32_path),
            input_names=list(inputs),
            output_names=list(outputs),
            dynamic_axes={name: axes for name in inputs},
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
            custom_opsets={"com.microsoft": 1},
        )
    proto = onnx.load(str(fp32_path))
    removed = inline_shared_initializers(proto)
    onnx.save(proto, str(fp32_path))
    return removed, (fuse_for_onnxruntime(fp32_path, model.config) if graph == "ort" else {})


def measure_gate(gate: Any, tmp: Path, manifest: dict[str, Any], engines: list[str]) -> dict[str, Any]:
    """The int8 gate on the export in its temp folder (its deploy.json written there for the engines to read,
    then removed: the real one is written last, by ``_swap_in``); one entry per engine."""
    (tmp / MANIFEST_FILE).write_text(json.dumps(manifest))
    try:
        results = {engine: gate.measure(tmp, engine) for engine in engines}
    finally:
        (tmp / MANIFEST_FILE).unlink(missing_ok=True)
    return results if len(results) > 1 else next(iter(results.values()))


def _check_request(out_dir: Path, quantize: str | None, graph: str, calibration: str | Path | None) -> None:
    """Refuse, before anything loads, what an export cannot do."""
    if quantize not in (None, "int8"):
        raise UserError(f"--quantize {quantize!r} is not supported; use int8 or leave it out")
    if graph not in GRAPHS:
        raise UserError(f"--graph {graph!r} is not one of {', '.join(GRAPHS)}")
    if calibration is not None and quantize != "int8":
        raise UserError("--calibration calibrates int8: add --quantize int8")
    if any((out_dir / name).exists() for name in ("model.safetensors", "pytorch_model.bin")):
        raise UserError(f"--out {out_dir} holds a torch model; an export writes its own config.json and tokenizer, "
                        "so it gets a folder of its own: choose another --out")


@contextlib.contextmanager
def _staging(out: Path):
    """(a fresh temp folder inside ``out``, ``out``); the temp folder is removed however the export ends."""
    for stale in out.glob(".export-*.tmp"):  # left by an export that was killed
        if (stale / EXPORT_MARK).is_file():
            shutil.rmtree(stale, ignore_errors=True)
    tmp = staging_dir(out, f".export-{uuid.uuid4().hex[:12]}.tmp", mark=EXPORT_MARK)
    try:
        yield tmp, out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _swap_in(tmp: Path, out: Path, written: list[str], manifest: dict[str, Any]) -> None:
    """Move a finished export into ``out``: the old manifest goes first and the new one comes last, so a
    reader sees the old export, no export, or the new one; files of the old export not rewritten go too.
    Only files an earlier export wrote (``_ours``) are replaced or deleted: another is refused before any."""
    ours = _ours(out)
    _refuse_foreign(out, written, ours)
    staged = {name: sha256(tmp / name) for name in written}
    # the record first: killed from here on, every file this export may have put in place is still known as ours
    _write_record(out, {n: sorted({*ours.get(n, []), *([staged[n]] if n in staged else [])}) for n in {*ours, *staged}})
    (out / MANIFEST_FILE).unlink(missing_ok=True)
    for name in set(ours) - set(written) - {MANIFEST_FILE}:
        (out / name).unlink(missing_ok=True)
    publish(tmp, out, names=written, manifest=out / MANIFEST_FILE, text=json.dumps(manifest, indent=2) + "\n")
    _write_record(out, {**{n: [d] for n, d in staged.items()}, MANIFEST_FILE: [sha256(out / MANIFEST_FILE)]})


def _write_record(out: Path, record: dict[str, list[str]]) -> None:
    write_text_atomic(out / WRITTEN, json.dumps(dict(sorted(record.items())), indent=1) + "\n", durable=True)


def _ours(out: Path) -> dict[str, list[str]]:
    """{file: its recorded checksums} of the files in ``out`` an earlier export wrote and nobody changed since:
    named by the record (or, for an export made before it, by its deploy.json's sha256), a plain name, and
    its bytes one of the checksums recorded for it. An edited deploy.json can name any file, so it is read
    only where no record is."""
    recorded: Any = None
    try:
        recorded = json.loads((out / WRITTEN).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        try:
            old = json.loads((out / MANIFEST_FILE).read_text(encoding="utf-8"))
            recorded = {n: [d] for n, d in old["sha256"].items()}
            recorded[MANIFEST_FILE] = [sha256(out / MANIFEST_FILE)] if old.get("architecture") else []
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}
    if not isinstance(recorded, dict):
        return {}
    ours = {}
    for name, digests in recorded.items():
        if not isinstance(name, str) or not isinstance(digests, list) or Path(name).name != name or \
                name in ("", ".", "..") or not (out / name).is_file() or (out / name).is_symlink():
            continue
        if name == MANIFEST_FILE or sha256(out / name) in digests:  # (deploy.json, edited or not, is the export's)
            ours[name] = digests
    return ours


def _refuse_foreign(out: Path, names: list[str], ours: dict[str, list[str]]) -> None:
    """One line, before anything in ``out`` changes, if a file this export writes is there and not ``ours``
    (the user's, or one of ours edited since); the model card is ``update_card``'s to judge."""
    foreign = [n for n in [*names, MANIFEST_FILE] if n != CARD and (out / n).exists() and n not in ours]
    if foreign:
        raise UserError(f"--out {out} holds {', '.join(sorted(set(foreign)))}, which no earlier export wrote (or which "
                        "changed since); an export replaces only its own files: move them away or choose another --out "
                        "(nothing was written)")


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


def calibration_inputs(model_dir: Path, tokenizer_dir: Path, path: Path) -> list[dict[str, np.ndarray]]:
    """The first ``CALIBRATION_SIZE`` inputs of ``path`` (lines as ``albertlm predict`` reads them: plain text
    or JSON objects; blank lines skipped), encoded for the model one at a time: no padding in the
    statistics."""
    from albertlm.deploy.inference import Predictor

    if not path.is_file():
        raise FileNotFoundError(f"--calibration {path} does not exist; give a file of inputs, one per line, "
                                "like those the model will serve")  # fmt: skip
    predictor = Predictor.load(model_dir, tokenizer=tokenizer_dir, precision="fp32", overrides={"eval_batch_size": 1})
    examples = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                examples.append(predictor.parse_line(line, f"{path}:{n}"))
            if len(examples) == CALIBRATION_SIZE:
                break
    if not examples:
        raise DataError(f"--calibration {path} holds no inputs; give lines like those the model will serve")
    return predictor.inputs(examples)


def quantize_openvino_int8(fp32_path: Path, feeds: list[dict[str, np.ndarray]], xml_path: Path) -> Path:
    """Static int8 by NNCF (weights and activations; the activation ranges from ``feeds``), saved as an
    OpenVINO IR (``.xml`` + ``.bin``). ``ModelType.TRANSFORMER`` keeps softmax, LayerNorm and GELU in float
    and applies SmoothQuant to the matmuls' inputs. The overflow fix on every layer (NNCF's default is the
    first only) keeps the weights within 7 bits, so the u8 x s8 products of CPUs without VNNI (AVX2 alone,
    the cheap end an export is for) cannot saturate their int16 sums: on such a CPU (AMD EPYC, AVX2) the
    tests' exit model's file changed 20 % of the answers without it, none with it."""
    ov = require("openvino")
    nncf = require("nncf")
    import logging

    logging.getLogger("nncf").setLevel(logging.ERROR)  # progress bars and hints: the export prints one line
    model = ov.Core().read_model(str(fp32_path))
    names = [port.get_any_name() for port in model.inputs]
    dataset = nncf.Dataset(feeds, lambda feed: {name: feed[name] for name in names if name in feed})
    every_layer = nncf.AdvancedQuantizationParameters(overflow_fix=nncf.OverflowFix.ENABLE)
    quantized = nncf.quantize(model, dataset, model_type=nncf.ModelType.TRANSFORMER, subset_size=len(feeds),
                              advanced_parameters=every_layer)  # fmt: skip
    ov.save_model(quantized, str(xml_path), compress_to_fp16=False)
    return xml_path


def _quantize_and_check(model: nn.Module, ref: nn.Module, out_dir: Path, manifest: dict[str, Any],
                        check: dict[str, torch.Tensor], quantize: str | None, feeds: list | None,
                        calibration: str | Path | None) -> None:  # fmt: skip
    """The int8 graphs and the exit graphs beside the fp32 one, each held against ``ref`` (the model on the
    check's device) with its max |diff| in the manifest."""
    fp32_path = out_dir / FP32_FILE
    manifest["fp32_max_abs_diff"] = max_abs_diff(ref, OnnxSession(fp32_path), check)
    if quantize == "int8":
        quantize_int8(fp32_path, out_dir / INT8_FILE)
        manifest["files"]["int8"] = INT8_FILE
        manifest["int8_max_abs_diff"] = max_abs_diff(ref, OnnxSession(out_dir / INT8_FILE), check)
        manifest["int8_report"] = quantization_report(out_dir / INT8_FILE)
    if feeds is not None:
        quantize_openvino_int8(fp32_path, feeds, out_dir / OPENVINO_INT8_FILE)
        manifest["files"][OPENVINO_INT8] = OPENVINO_INT8_FILE
        manifest["files"]["openvino_int8_weights"] = OPENVINO_INT8_FILE.replace(".xml", ".bin")
        ov_int8 = OpenVinoSession(out_dir / OPENVINO_INT8_FILE, hint="f32", outputs=manifest["outputs"])
        manifest["openvino_int8_max_abs_diff"] = max_abs_diff(ref, ov_int8, check)
        manifest["openvino_int8_calibration"] = {"file": Path(calibration).name, "batches": len(feeds)}
    if getattr(model, "has_exits", False):
        from albertlm.deploy.exit_graphs import exit_max_abs_diff, export_exit_graphs

        manifest["exit"] = export_exit_graphs(model, out_dir, manifest["graph"], manifest["opset"], quantize, feeds)
        manifest["exit"]["max_abs_diff"] = exit_max_abs_diff(ref, out_dir, manifest["exit"], check)


def max_abs_diff(model: nn.Module, session: Any, inputs: dict[str, torch.Tensor]) -> float:
    """Largest |torch - onnx| over every float output, both run through the inference engines' one call.
    (Top-k indices are left out: among tied candidates either order is right; their scores are compared.)"""
    batch = {k: v.numpy() for k, v in inputs.items()}
    ref, got = TorchEngine(model, precision="fp32")(batch), session(batch)
    return max(float(np.abs(ref[k].astype(np.float64) - v).max()) for k, v in got.items() if v.dtype.kind == "f")
