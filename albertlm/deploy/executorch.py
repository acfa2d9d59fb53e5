"""ExecuTorch export and engine: ALBERT as one ``.pte`` program for phones, early exit run by the device's loop.

    albertlm export --model runs/sst2 --format executorch --out runs/sst2-pte --quantize int8 --calibration dev.txt
    Predictor.load("runs/sst2-pte", engine="executorch").classify(["a gripping film"])

The program (``model.pte`` in fp32, ``model.int8.pte`` in int8) is lowered to ExecuTorch's XNNPACK delegate
(the CPU backend of Android and iOS) and holds one method per entry point, each taking one input per call (one
row; a multiple-choice question's choices together) of a dynamic sequence length (up to the model's
``max_position_embeddings``), as a phone answers it. One row because ExecuTorch plans a method's memory for the
largest input it accepts and allocates it up front: with a batch axis of 16 rows the fp32 program of albert-tiny
took 1 GB; and with a static batch every reshape is XNNPACK's own. The engine runs a batch row by row, each cut
to its own length:

- ``forward(input_ids, attention_mask, token_type_ids)`` -> the head's outputs at full depth;
- for a model with exits: ``embed(...)`` -> the first computed layer's input (N, S, H), and one
  ``layer_<g>(hidden, attention_mask, layer)`` -> (hidden_out, logits) per stored layer group, ``layer`` (a
  scalar) picking the exit classifier inside the method, as the ONNX exit graphs do.

The device's own loop calls ``embed`` once and ``layer_<g>`` per computed layer, stopping by the rule of
``albertlm.deploy.early_exit`` (the ``--engine executorch`` engine runs that same loop here). ExecuTorch
keys every constant by its content, so the shared layer's weights are stored once however many methods (and
computed layers in ``forward``) read them: a 12-layer sharing model's fp32 ``.pte`` is about one layer's
weights plus the embeddings, not twelve.

int8 (``--quantize int8``) is torchao's PT2E flow with ExecuTorch's ``XNNPACKQuantizer``: linear weights int8
per output channel; activations static int8 with ranges measured on ``--calibration`` inputs, or without them
dynamic int8, whose activation scales XNNPACK picks per call: one row per call, an answer never depends on
the other rows of its batch (batched whole, a row moved by 1e-3); static int8's scales are fixed. The V x E
word embedding table, a third of albert-base's weights, and the position table are stored int8 per row
(``quantized_decomposed.embedding_byte``, looked up and scaled by ExecuTorch's quantized kernels). Needs the
``edge`` extra (executorch, built against this torch; torchao).
"""

from __future__ import annotations

import contextlib
import copy
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from albertlm.deploy import early_exit
from albertlm.deploy.engines import _Export, require
from albertlm.deploy.exit_graphs import ExitEmbed, ExitLayer, stored_groups
from albertlm.errors import DataError, UserError

PTE_FILES = {"fp32": "model.pte", "int8": "model.int8.pte"}
MAX_CHOICES = 16  # a multiple-choice question's options in one call (memory is planned for the largest shape)
SDPA = torch.ops.aten.scaled_dot_product_attention.default  # replaced by _attention in every program
MIN_SEQ = 2  # torch.export specializes a dimension of size 1, so the dynamic sequence starts at 2
# Heads a phone runs: the MLM heads tie their decoder to the embedding table and SQuAD 2.0's beam search is a
# host-side decoding; both stay on --format onnx.
HEADS = ("AlbertModel", "AlbertForSequenceClassification", "AlbertForTokenClassification",
         "AlbertForQuestionAnswering", "AlbertForMultipleChoice")  # fmt: skip


# --------------------------------------------------------------------------- the program's methods
class _Forward(nn.Module):
    """Full depth: positional inputs -> the head's outputs (a tuple, as the program returns them)."""

    def __init__(self, model: nn.Module, outputs: tuple[str, ...]):
        super().__init__()
        self.model, self.outputs = model, outputs

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return tuple(getattr(out, name) for name in self.outputs)


class _Layer(ExitLayer):
    """The ONNX exit graphs' layer step with ``layer`` of shape (1,): its classifier is picked by
    ``index_select``, which torch.export traces with ``layer`` as data (indexing by a tensor's value it cannot)."""

    def classifier(self, layer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.exit_weight.index_select(0, layer)[0], self.exit_bias.index_select(0, layer)[0]


class Int8Embedding(nn.Module):
    """A V x E table stored int8 with one scale per row (symmetric, max |row| -> 127): a quarter of the bytes,
    the looked-up rows within half a step of the fp32 ones. The scales are fp16 when all of them are normal
    fp16 numbers (their rounding, 2^-11 relative, is far below the int8 step's), else fp32."""

    def __init__(self, table: nn.Embedding):
        super().__init__()
        w = table.weight.detach().float()
        scale = (w.abs().amax(dim=1) / 127).clamp(min=1e-12)  # (V,)
        half = torch.finfo(torch.float16)
        if half.tiny <= float(scale.min()) and float(scale.max()) <= half.max:
            scale = scale.half()
        self.register_buffer("weight", torch.round(w / scale.float()[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scales", scale)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        import executorch.exir.passes._quant_patterns_and_replacements  # noqa: F401  (defines the op)

        return torch.ops.quantized_decomposed.embedding_byte.dtype(self.weight, self.scales, None, -127, 127, ids,
                                                                   dtype=torch.float32)  # fmt: skip


# --------------------------------------------------------------------------- export
def _dims(arch: str, max_seq: int, choices: bool = False) -> dict[int, Any]:
    """The dynamic axes of one row's (1, S) or one question's (1, C, S) input: the sequence up to ``max_seq``;
    ``choices``: also the first axis of a question's flattened (C, S) choices, up to ``MAX_CHOICES``."""
    from torch.export import Dim

    seq = Dim("sequence", min=MIN_SEQ, max=max_seq)
    if arch == "AlbertForMultipleChoice":
        return {1: Dim("choices", min=2, max=MAX_CHOICES), 2: seq}
    return {1: seq} | ({0: Dim("choices", min=2, max=MAX_CHOICES)} if choices else {})


def _programs(model: nn.Module, arch: str, outputs: tuple[str, ...]) -> dict[str, tuple[nn.Module, tuple, Any]]:
    """method name -> (module, example inputs, dynamic shapes), each method taking one row (one input, or one
    question's choices) per call."""
    from albertlm.deploy.export import sample_inputs

    config = model.config
    choices = 2 if arch == "AlbertForMultipleChoice" else None
    S = config.max_position_embeddings
    args = sample_inputs(config, 1, 8, choices)
    methods: dict[str, tuple[nn.Module, tuple, Any]] = {
        "forward": (_Forward(model, outputs), args, (_dims(arch, S),) * 3)
    }
    if getattr(model, "has_exits", False):
        flat = tuple(a.reshape(-1, a.shape[-1]) for a in args)
        # a question's choices are flattened to rows: their count stays dynamic
        flat_dims = _dims("flat", S, choices=choices is not None)
        methods["embed"] = (ExitEmbed(model), flat, (flat_dims,) * 3)
        groups = stored_groups(config)
        hidden = torch.randn(flat[0].shape[0], flat[0].shape[1], config.hidden_size)
        for g in sorted(set(groups)):
            methods[f"layer_{g}"] = (_Layer(model, groups.index(g)), (hidden, flat[1], torch.tensor([0])),
                                     (flat_dims, flat_dims, None))  # fmt: skip
    return methods


class XnnpackLayerNorm(nn.Module):
    """LayerNorm over the last axis in ops XNNPACK runs: the means are linears against a constant 1/H row
    (XNNPACK has no LayerNorm, and ExecuTorch's portable kernel for it, run between the delegated linears,
    splits the layer into many small delegate calls). Same outputs within fp32 rounding."""

    def __init__(self, norm: nn.LayerNorm):
        super().__init__()
        (width,) = norm.normalized_shape
        self.eps = norm.eps
        self.weight, self.bias = norm.weight, norm.bias
        self.register_buffer("mean_row", torch.full((1, width), 1.0 / width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        centred = x - F.linear(x, self.mean_row)
        variance = F.linear(centred * centred, self.mean_row)
        return centred * torch.rsqrt(variance + self.eps) * self.weight + self.bias


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
               dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
               enable_gqa: bool = False) -> torch.Tensor:  # fmt: skip
    """``scaled_dot_product_attention`` (B, N, S, D) as XNNPACK ops: batched matmuls over B x N, an additive
    mask, a softmax (torch's own decomposition guards fully masked rows with where / any, which run outside the
    delegate). With one row per call (B static 1) every reshape here has one free axis, so XNNPACK takes them
    too."""
    B, N, _, D = q.shape
    q, k, v = (t.contiguous().view(B * N, -1, D) for t in (q, k, v))  # a reshape would name S, not -1
    scores = torch.bmm(q * (scale or D**-0.5), k.transpose(1, 2))  # (B N, Sq, Sk)
    if attn_mask is not None:
        bias = (attn_mask.to(q.dtype) - 1) * 1e9 if attn_mask.dtype == torch.bool else attn_mask  # (B, 1, 1|Sq, Sk)
        if isinstance(B, int) and B == 1:
            scores = scores + bias[0]
        else:
            Sk = scores.shape[-1]
            scores = (scores.view(B, N, -1, Sk) + bias).view(B * N, -1, Sk)
    return torch.bmm(torch.softmax(scores, dim=-1), v).view(B, N, -1, D)


def _for_export(model: nn.Module) -> nn.Module:
    """A copy whose attention blocks hold their stacked q/k/v weights as constants: the model stacks them per
    forward (``fused_qkv``), and a weight computed at run time is a matmul XNNPACK does not take (ExecuTorch's
    portable kernels would run it, several times slower). A shared block is one module, so its stack is
    stored once. They are parameters, not buffers: PT2E's XNNPACK quantizer quantizes a linear's weight only
    when it is a parameter, and as buffers they stayed fp32 in the int8 program (albert-base: 21.2 MB, 14.1 then).
    Its LayerNorms are ``XnnpackLayerNorm``s, and every program's attention is ``_attention``: with them the
    delegate runs whole layers, not pieces between ExecuTorch's portable kernels."""
    import types

    model = copy.deepcopy(model).eval()
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.LayerNorm):
                setattr(parent, name, XnnpackLayerNorm(child))
    for module in model.modules():
        if hasattr(module, "fused_qkv") and not hasattr(module, "qkv_weight"):
            w, b = module.fused_qkv()
            module.qkv_weight = nn.Parameter(w.detach().clone(), requires_grad=False)
            module.qkv_bias = nn.Parameter(b.detach().clone(), requires_grad=False)
            module.fused_qkv = types.MethodType(lambda self: (self.qkv_weight, self.qkv_bias), module)
    return model


def lower(model: nn.Module, arch: str, outputs: tuple[str, ...], quantize: str | None = None,
          feeds: list[dict[str, np.ndarray]] | None = None) -> bytes:  # fmt: skip
    """The ``.pte`` program of ``model`` (see the module docstring): fp32, or int8 (static on ``feeds``,
    else dynamic)."""
    require("executorch")
    import executorch.kernels.quantized  # noqa: F401  (out variants of the quantized ops left outside XNNPACK)
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from torch.export import export

    model = _for_export(model)
    if quantize == "int8":
        embeddings = model.albert.embeddings
        embeddings.word_embeddings = Int8Embedding(embeddings.word_embeddings)
        embeddings.position_embeddings = Int8Embedding(embeddings.position_embeddings)
    methods = _programs(model.eval(), arch, outputs)
    exported = {}
    with torch.no_grad(), _quiet_export():
        for name, (module, args, shapes) in methods.items():
            if quantize == "int8":
                module = _quantize_pt2e(module, args, shapes, name, feeds)
            exported[name] = export(module, args, dynamic_shapes=shapes, strict=False)
            exported[name] = exported[name].run_decompositions({SDPA: _attention})
        program = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()]).to_executorch()
    return program.buffer


def _quantize_pt2e(module: nn.Module, args: tuple, shapes: Any, name: str,
                   feeds: list[dict[str, np.ndarray]] | None) -> nn.Module:  # fmt: skip
    """PT2E int8 of one method: XNNPACKQuantizer, weights per channel; static on ``feeds`` (the method's
    inputs they give), else dynamic."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torch.export import export
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True, is_dynamic=feeds is None)
    ).set_module_type(XnnpackLayerNorm, None)
    graph = export(module, args, dynamic_shapes=shapes, strict=False).module()
    prepared = prepare_pt2e(graph, quantizer)
    for inputs in _method_feeds(module, name, feeds or [args]):
        prepared(*inputs)
    return convert_pt2e(prepared)


def _method_feeds(module: nn.Module, name: str, feeds: list) -> list[tuple]:
    """Calibration inputs of one method: the forward's and embed's from the encoded inputs, a layer's from the
    hidden states the fp32 model gives at each layer that runs it."""
    if feeds and isinstance(feeds[0], tuple):
        return feeds
    out = []
    for feed in feeds:
        ids = torch.as_tensor(feed["input_ids"])
        mask = torch.as_tensor(feed.get("attention_mask", np.ones(ids.shape, np.int64)))
        types = torch.as_tensor(feed.get("token_type_ids", np.zeros(ids.shape, np.int64)))
        if name == "forward":
            out.append((ids, mask, types))
            continue
        flat = tuple(t.reshape(-1, ids.shape[-1]) for t in (ids, mask, types))
        if name == "embed":
            out.append(flat)
            continue
        model = module.model
        from albertlm.model import attention_bias

        group = int(name.split("_")[1])
        h = model.exit_start(*flat)[0]
        for layer, g in enumerate(stored_groups(model.config)):
            if g == group:
                out.append((h, flat[1], torch.tensor([layer])))
            h = model.albert.encoder.run_layer(h, attention_bias(flat[1], h.dtype), layer)
    return out


@contextlib.contextmanager
def _quiet_export():
    """torch.export and ExecuTorch's lowering warn at length about internals; the export prints one line."""
    import logging
    import warnings

    level = logging.getLogger().level
    logging.getLogger().setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            logging.getLogger().setLevel(level)


def export_executorch(model_dir: str | Path, out_dir: str | Path, quantize: str | None = None,
                      tokenizer_dir: str | Path | None = None, calibration: str | Path | None = None,
                      gate: Any = None) -> dict[str, Any]:  # fmt: skip
    """Export ``model_dir`` to ``out_dir`` as ExecuTorch programs (see the module docstring); returns the
    manifest written. As ``export_onnx``: written into a temp folder and moved into place when complete, every
    program checked against PyTorch (each method, on a batch of another shape than the traced one), the
    tokenizer and config.json beside it, deploy.json last. ``gate`` (``albertlm.deploy.gate.Int8Gate``) measures
    the int8 program against fp32 before anything is moved into place."""
    import json
    import shutil

    from albertlm.card import CARD
    from albertlm.deploy.engines import MANIFEST_FILE, architecture_of, load_torch_model
    from albertlm.deploy.export import (
        _check_request,
        _copy_tokenizer,
        _staging,
        _swap_in,
        calibration_inputs,
        measure_gate,
        sample_inputs,
    )
    from albertlm.files import sha256

    require("executorch")
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    _check_request(out_dir, quantize, "ort", calibration)
    arch = architecture_of(model_dir)
    if arch not in HEADS:
        raise UserError(f"--format executorch exports {', '.join(HEADS)}; {model_dir} holds a {arch}: use "
                        "--format onnx")  # fmt: skip
    tok_src = Path(tokenizer_dir) if tokenizer_dir else model_dir
    feeds = calibration_inputs(model_dir, tok_src, Path(calibration)) if calibration is not None else None
    model = load_torch_model(model_dir)
    from albertlm.heads import HEADS as ALL_HEADS

    head = ALL_HEADS[arch]
    out_dir.mkdir(parents=True, exist_ok=True)
    with _staging(out_dir) as (tmp, final_dir):
        manifest: dict[str, Any] = {"architecture": arch, "inputs": list(head.inputs), "outputs": list(head.outputs),
                                    "pte": {"backend": "xnnpack", "max_rows": 1,
                                            "max_sequence": model.config.max_position_embeddings},
                                    "files": {}}  # fmt: skip
        variants = ["fp32"] + (["int8"] if quantize == "int8" else [])
        for variant in variants:
            (tmp / PTE_FILES[variant]).write_bytes(
                lower(model, arch, head.outputs, variant if variant != "fp32" else None, feeds)
            )
            manifest["files"][variant] = PTE_FILES[variant]
        manifest["int8_activations"] = None if quantize is None else ("static" if feeds is not None else "dynamic")
        if feeds is not None:
            manifest["int8_calibration"] = {"file": Path(calibration).name, "batches": len(feeds)}
        if getattr(model, "has_exits", False):
            manifest["exit"] = _exit_entry(model, variants)
        manifest["sizes_bytes"] = {k: (tmp / f).stat().st_size for k, f in manifest["files"].items()}
        manifest["planned_memory_bytes"] = {k: planned_memory(tmp / f) for k, f in manifest["files"].items()}
        shutil.copyfile(model_dir / "config.json", tmp / "config.json")
        manifest["tokenizer"] = _copy_tokenizer(tok_src, tmp)
        written = sorted(p.name for p in tmp.iterdir() if p.is_file() and not p.name.startswith("."))
        manifest["sha256"] = {name: sha256(tmp / name) for name in written if name != CARD}
        (tmp / MANIFEST_FILE).write_text(json.dumps(manifest))  # the engines read it for the checks below
        check = dict(zip(head.inputs, sample_inputs(model.config, 3, 13, 3 if arch == "AlbertForMultipleChoice"
                                                    else None, seed=1), strict=True))  # fmt: skip
        for variant in variants:
            manifest[f"{variant}_max_abs_diff"] = _max_abs_diff(model, ExecuTorchEngine(tmp, precision=variant), check)
        (tmp / MANIFEST_FILE).unlink()
        if gate is not None and gate.active and quantize == "int8":
            manifest["int8_gate"] = measure_gate(gate, tmp, manifest, ["executorch"])
        _swap_in(tmp, final_dir, written, manifest)
    return manifest


def planned_memory(path: Path) -> int:
    """The activation memory a program's largest method plans (ExecuTorch allocates it when the method loads,
    for the largest input the method accepts): what a device needs beside the weights, read from the program."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(path.read_bytes())
    program = getattr(program, "program", program)  # 1.x wraps the flatbuffer's Program
    return max(sum(plan.non_const_buffer_sizes) for plan in program.execution_plan)


def _exit_entry(model: nn.Module, variants: list[str]) -> dict[str, Any]:
    """deploy.json's "exit" section: which method runs each computed layer, and the model's saved rule."""
    from albertlm.deploy.inference import TASK_KEY
    from albertlm.tasks.kinds import InferenceSettings

    groups = stored_groups(model.config)
    order = sorted(set(groups))
    layers = [f"layer_{g}" for g in order]
    saved = {k: v for k, v in (model.config.extra.get(TASK_KEY) or {}).items() if k.startswith("exit_")}
    rule = early_exit.ExitRule.from_settings(InferenceSettings(**saved))
    return {"heads": model.config.exit_heads, "group_of_layer": [order.index(g) for g in groups],
            "methods": {"embed": "embed", "layers": layers},
            "files": {v: {"embed": PTE_FILES[v], "layers": [PTE_FILES[v]] * len(layers)} for v in variants},
            "rule": rule.settings() if rule else None}  # fmt: skip


def _max_abs_diff(model: nn.Module, engine: ExecuTorchEngine, inputs: dict[str, torch.Tensor]) -> float:
    """Largest |torch - program| over the ``forward`` method's float outputs (checked even where the engine's
    full depth is the exit loop: an app may call it) and, with exits, every layer's exit logits."""
    from albertlm.deploy.engines import TorchEngine

    batch = {k: v.numpy() for k, v in inputs.items()}
    ref = TorchEngine(model, precision="fp32")
    outputs = engine.forward_method(batch).items()
    worst = max(float(np.abs(ref(batch)[k] - v).max()) for k, v in outputs if v.dtype.kind == "f")
    if engine.can_exit:
        ours, theirs = ref.exit_start(batch), engine.exit_start(batch)
        for layer in range(model.config.num_hidden_layers):
            ours, a = ref.exit_step(ours, layer)
            theirs, b = engine.exit_step(theirs, layer)
            worst = max(worst, float(np.abs(a - b).max()))
    return worst


# --------------------------------------------------------------------------- engine
@contextlib.contextmanager
def _native_stderr_silenced():
    """XNNPACK's cpuinfo writes lines about /sys files to the process's stderr when a program loads; they
    say nothing to a user, so file descriptor 2 points at /dev/null meanwhile."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class _Method:
    """One method of a loaded program as a session: ``{input name: array} -> {output name: array}``, one call
    per row cut to its own length (``PerRow``), or with ``rows`` > 1 (an export made before one-row programs,
    whose deploy.json says so) calls of at most ``rows`` rows; ``sequence`` names the outputs with a
    position axis."""

    def __init__(self, program: Any, name: str, inputs: tuple[str, ...], outputs: tuple[str, ...], path: Path,
                 rows: int = 1, sequence: frozenset[str] = frozenset()):  # fmt: skip
        with _native_stderr_silenced():
            self.method = program.load_method(name)
        if self.method is None:
            raise DataError(f"{path} has no method {name!r}; export it again: albertlm export --format executorch")
        self.name, self.inputs, self.outputs, self.path = name, inputs, outputs, path
        self.rows, self.sequence = rows, sequence

    def __call__(self, batch: dict[str, Any]) -> dict[str, np.ndarray]:
        from albertlm.deploy.engines import PerRow, graph_feeds

        feeds = graph_feeds(batch, list(self.inputs))
        if self.rows == 1:
            return PerRow(self._execute, self.sequence, min_length=MIN_SEQ)(feeds)
        return self._execute(feeds)

    def _execute(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = len(feeds[self.inputs[0]])
        parts = []
        for start in range(0, rows, self.rows):
            args = [torch.from_numpy(np.ascontiguousarray(feeds[k].reshape(1) if k == "layer"  # not per row
                                                          else feeds[k][start : start + self.rows]))
                    for k in self.inputs]  # fmt: skip
            try:
                parts.append([t.numpy().copy() for t in self.method.execute(args)])
            except RuntimeError as e:
                raise DataError(f"{self.path}: ExecuTorch could not run {self.name} on inputs of shape "
                                f"{tuple(args[0].shape)} ({str(e).splitlines()[0][:160]})") from None  # fmt: skip
        return {name: np.concatenate([p[i] for p in parts]) for i, name in enumerate(self.outputs)}


class _ExitMethods(early_exit.ExitGraphs):
    """The exit loop's state and steps (``ExitGraphs``) over the program's ``embed`` and ``layer_<g>``."""

    def __init__(self, program: Any, entry: dict[str, Any], path: Path, rows: int):
        methods = entry["methods"]
        self.embed = _Method(program, methods["embed"], ("input_ids", "attention_mask", "token_type_ids"),
                             ("hidden",), path, rows, frozenset({"hidden"}))  # fmt: skip
        self.layers = [_Method(program, name, ("hidden", "attention_mask", "layer"), ("hidden_out", "logits"), path,
                               rows, frozenset({"hidden_out"})) for name in methods["layers"]]  # fmt: skip
        self.group_of_layer = list(entry["group_of_layer"])


class ExecuTorchEngine(_Export):
    """An ``albertlm export --format executorch`` folder run by ExecuTorch's Python runtime (the XNNPACK
    kernels a phone runs, on this CPU). ``precision``: ``auto`` (the int8 program when the export has one),
    ``fp32`` or ``int8``."""

    name = "executorch"

    def __init__(self, directory: str | Path, threads: int | None = None, precision: str = "auto"):
        files = self._open_export(directory)
        if precision not in ("auto", "fp32", "int8"):
            raise UserError(f"--engine executorch runs the fp32 or int8 program, not {precision!r}")
        if precision == "int8" and "int8" not in files:
            raise FileNotFoundError(f"{directory} has no int8 program; export with --format executorch --quantize int8")
        self.precision = "int8" if (precision == "int8" or (precision == "auto" and "int8" in files)) else "fp32"
        require("executorch")
        import executorch.kernels.quantized  # noqa: F401  (the int8 embedding's kernels, registered on import)
        from executorch.extension.pybindings import portable_lib
        from executorch.runtime import Runtime

        if threads:
            portable_lib._unsafe_reset_threadpool(threads)
        self.path = self.directory / files[self.precision]
        with _native_stderr_silenced():
            try:
                self.program = Runtime.get().load_program(self.path)
            except (RuntimeError, ValueError) as e:
                raise DataError(f"{self.path}: ExecuTorch cannot load this program ({str(e)[:160]}); export it "
                                "again") from None  # fmt: skip
        self.rows = self._rows_per_call()
        self._forward: _Method | None = None

    def _rows_per_call(self) -> int:
        """Rows a method takes per call, from deploy.json (1 since one-row programs; a dynamic int8 program is
        run row by row whatever it says: its activation scales are per call, and an answer must not depend on
        the other rows of its batch)."""
        pte = self.manifest.get("pte")
        rows = pte.get("max_rows", 1) if isinstance(pte, dict) else pte
        if not isinstance(rows, int) or isinstance(rows, bool) or rows < 1:
            raise DataError(f"{self.directory / 'deploy.json'}: pte.max_rows must be a positive integer, not "
                            f"{rows!r}; export the model again: albertlm export --format executorch")  # fmt: skip
        return 1 if self.precision == "int8" and self.manifest.get("int8_activations") == "dynamic" else rows

    def __call__(self, batch: dict[str, Any]) -> dict[str, np.ndarray]:
        """Full depth. With exits, as the device's loop runs it: ``embed``, then each computed layer's
        ``layer_<g>``, the last one's logits (its exit classifier is the head's). XNNPACK packs a delegated
        layer's weights per call site when a method loads, so ``forward``, whose L computed layers are L call
        sites, holds the shared layer packed L times in memory (albert-base fp32: about 380 MB against 30 for
        ``layer_0``), stored once on disk all the same; the loop holds each stored group packed once."""
        if self.can_exit:
            state = self.exit_start(batch)
            for layer in range(len(self.exit_graphs.group_of_layer)):
                state, logits = self.exit_step(state, layer)
            return {"logits": logits.reshape(len(batch["input_ids"]), -1)}
        return self.forward_method(batch)

    def forward_method(self, batch: dict[str, Any]) -> dict[str, np.ndarray]:
        """The program's ``forward`` method (loaded at its first call)."""
        if self._forward is None:
            sequence = {"last_hidden_state", "start_logits", "end_logits"}
            if self.architecture == "AlbertForTokenClassification":
                sequence.add("logits")
            self._forward = _Method(self.program, "forward", self.head.inputs, self.head.outputs, self.path,
                                    self.rows, frozenset(sequence))  # fmt: skip
        return self._forward(batch)

    @property
    def exit_graphs(self) -> early_exit.ExitGraphs:
        if self._exit_graphs is None:
            self._exit_graphs = _ExitMethods(self.program, self.manifest["exit"], self.path, self.rows)
        return self._exit_graphs


__all__ = ["HEADS", "MAX_CHOICES", "PTE_FILES", "ExecuTorchEngine", "Int8Embedding", "lower", "planned_memory"]
