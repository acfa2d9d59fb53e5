"""The early-exit graphs of ``albertlm export`` (a model with exits): ``exit_embed.onnx`` and one
``exit_layer_<g>.onnx`` per stored layer group, each group's weights stored once and applied for every computed
layer that runs it; their onnxruntime int8 and OpenVINO int8 files; and their check against PyTorch. The
ExecuTorch program's ``embed`` and ``layer_<g>`` methods are these same modules (deploy/executorch.py)."""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from albertlm.config import AlbertConfig
from albertlm.deploy.engines import OPENVINO_INT8, OnnxSession, TorchEngine, require
from albertlm.deploy.export import (
    inline_shared_initializers,
    quantize_int8,
    quantize_openvino_int8,
    sample_inputs,
)
from albertlm.deploy.onnx_fusion import fuse_for_onnxruntime, ort_attention

EXIT_EMBED_FILE = "exit_embed.onnx"


class ExitEmbed(nn.Module):
    """(N, S) ids, mask and types -> the first computed layer's input (N, S, H)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor):
        return self.model.exit_start(input_ids, attention_mask, token_type_ids)[0]


class ExitLayer(nn.Module):
    """One stored layer group as a graph: (hidden, attention_mask, layer) -> (hidden_out, logits), where
    ``layer`` (a scalar) picks the exit classifier inside the graph, so one graph serves every computed
    layer that runs the group (with sharing="all" and G=1: all of them, the weights stored once)."""

    def __init__(self, model: nn.Module, first_layer: int):
        super().__init__()
        self.model, self.first_layer = model, first_layer
        layers = range(model.config.num_hidden_layers)
        self.register_buffer("exit_weight", torch.stack([model.exit_classifier(j).weight.detach() for j in layers]))
        self.register_buffer("exit_bias", torch.stack([model.exit_classifier(j).bias.detach() for j in layers]))

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor, layer: torch.Tensor):
        from albertlm.model import attention_bias

        h = self.model.albert.encoder.run_layer(hidden, attention_bias(attention_mask, hidden.dtype), self.first_layer)
        pooled = torch.tanh(self.model.albert.pooler(h[:, 0]))  # (N, H)
        weight, bias = self.classifier(layer)
        return h, pooled @ weight.transpose(0, 1) + bias  # (N, S, H), (N, width)

    def classifier(self, layer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The exit classifier's weight and bias for ``layer``, a scalar tensor."""
        return self.exit_weight[layer], self.exit_bias[layer]


def stored_groups(config: AlbertConfig) -> list[int]:
    """For each computed layer, the stored group it runs (the order the exit layer graphs are written in)."""
    from albertlm.model import group_index

    L = config.num_hidden_layers
    return [group_index(l, L, config.num_hidden_groups) if config.sharing == "all" else l for l in range(L)]


def _trace(module: nn.Module, args: tuple, path: Path, inputs: list[str], outputs: list[str],
           axes: dict[str, dict[int, str]], opset: int, graph: str, model: nn.Module) -> None:  # fmt: skip
    onnx = require("onnx")
    fused = ort_attention(model) if graph == "ort" else contextlib.nullcontext()
    with warnings.catch_warnings(), fused:
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), args, str(path), input_names=inputs, output_names=outputs,
                          dynamic_axes=axes, opset_version=opset, do_constant_folding=True, dynamo=False,
                          custom_opsets={"com.microsoft": 1})  # fmt: skip
    proto = onnx.load(str(path))
    inline_shared_initializers(proto)
    onnx.save(proto, str(path))
    if graph == "ort":
        fuse_for_onnxruntime(path, model.config)


def export_exit_graphs(model: nn.Module, out_dir: Path, graph: str, opset: int, quantize: str | None,
                       feeds: list[dict[str, np.ndarray]] | None) -> dict[str, Any]:  # fmt: skip
    """The early-exit graphs of a model with exits (``albertlm.deploy.early_exit.ExitGraphs`` runs them):
    ``exit_embed.onnx`` and one ``exit_layer_<g>.onnx`` per stored layer group; with ``quantize`` their
    onnxruntime dynamic int8, and with calibration ``feeds`` OpenVINO static int8 files calibrated on the
    hidden states those inputs really give at every layer. Returns deploy.json's "exit" entry."""
    config = model.config
    ids, mask, types = sample_inputs(config, 2, 8)
    rows = {0: "rows", 1: "sequence"}
    _trace(ExitEmbed(model), (ids, mask, types), out_dir / EXIT_EMBED_FILE,
           ["input_ids", "attention_mask", "token_type_ids"], ["hidden"],
           {"input_ids": rows, "attention_mask": rows, "token_type_ids": rows, "hidden": rows}, opset, graph, model)
    groups = stored_groups(config)
    hidden = torch.randn(2, 8, config.hidden_size)
    layer_files = []
    for g in sorted(set(groups)):
        name = f"exit_layer_{g}.onnx"
        _trace(ExitLayer(model, groups.index(g)), (hidden, mask, torch.tensor(0)), out_dir / name,
               ["hidden", "attention_mask", "layer"], ["hidden_out", "logits"],
               {"hidden": rows, "attention_mask": rows, "hidden_out": rows, "logits": {0: "rows"}}, opset, graph,
               model)  # fmt: skip
        layer_files.append(name)
    order = sorted(set(groups))
    entry: dict[str, Any] = {"heads": config.exit_heads, "group_of_layer": [order.index(g) for g in groups],
                             "files": {"fp32": {"embed": EXIT_EMBED_FILE, "layers": layer_files}}}  # fmt: skip
    if quantize == "int8":
        names = [EXIT_EMBED_FILE, *layer_files]
        for name in names:
            quantize_int8(out_dir / name, out_dir / name.replace(".onnx", ".int8.onnx"))
        entry["files"]["int8"] = {"embed": EXIT_EMBED_FILE.replace(".onnx", ".int8.onnx"),
                                  "layers": [n.replace(".onnx", ".int8.onnx") for n in layer_files]}  # fmt: skip
    if feeds is not None:
        entry["files"][OPENVINO_INT8] = _openvino_int8_exit_graphs(out_dir, entry, feeds)
    from albertlm.deploy.early_exit import ExitRule
    from albertlm.deploy.inference import TASK_KEY
    from albertlm.tasks.kinds import InferenceSettings

    saved = {k: v for k, v in (config.extra.get(TASK_KEY) or {}).items() if k.startswith("exit_")}
    rule = ExitRule.from_settings(InferenceSettings(**saved))
    entry["rule"] = rule.settings() if rule else None  # the default saved with the model (None: full depth)
    return entry


def _openvino_int8_exit_graphs(out_dir: Path, entry: dict[str, Any], feeds: list[dict[str, np.ndarray]]) -> dict:
    """NNCF static int8 of each exit graph, calibrated on what it really receives: the calibration inputs
    for the embedding graph, and for each layer graph the hidden states the fp32 graphs give at its layers."""
    from albertlm.deploy.early_exit import ExitGraphs

    fp32 = ExitGraphs(out_dir, entry, lambda path, _outputs: OnnxSession(path), "fp32")
    embed_feeds, layer_feeds = [], [[] for _ in entry["files"]["fp32"]["layers"]]
    for feed in feeds:
        state = fp32.exit_start(feed)
        embed_feeds.append({k: v.reshape(-1, v.shape[-1]) for k, v in feed.items()
                            if k in ("input_ids", "attention_mask", "token_type_ids")})  # fmt: skip
        for layer, g in enumerate(entry["group_of_layer"]):
            layer_feeds[g].append({**state, "layer": np.asarray(layer, dtype=np.int64)})
            state, _ = fp32.exit_step(state, layer)
    files = {"embed": EXIT_EMBED_FILE.replace(".onnx", ".openvino-int8.xml"), "layers": []}
    quantize_openvino_int8(out_dir / EXIT_EMBED_FILE, embed_feeds, out_dir / files["embed"])
    for name, g_feeds in zip(entry["files"]["fp32"]["layers"], layer_feeds, strict=True):
        xml = name.replace(".onnx", ".openvino-int8.xml")
        quantize_openvino_int8(out_dir / name, g_feeds, out_dir / xml)
        files["layers"].append(xml)
    return files


def exit_max_abs_diff(model: nn.Module, out_dir: Path, entry: dict[str, Any], inputs: dict[str, torch.Tensor]) -> float:
    """Largest |torch - onnx| of every computed layer's exit logits (the fp32 exit graphs against the model)."""
    from albertlm.deploy.early_exit import ExitGraphs

    batch = {k: v.numpy() for k, v in inputs.items()}
    graphs = ExitGraphs(out_dir, entry, lambda path, _outputs: OnnxSession(path), "fp32")
    torch_engine = TorchEngine(model, precision="fp32")
    ours, theirs, worst = torch_engine.exit_start(batch), graphs.exit_start(batch), 0.0
    for layer in range(model.config.num_hidden_layers):
        ours, a = torch_engine.exit_step(ours, layer)
        theirs, b = graphs.exit_step(theirs, layer)
        worst = max(worst, float(np.abs(a - b).max()))
    return worst
