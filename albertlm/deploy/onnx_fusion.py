"""onnxruntime-specific graph fusions used by ``albertlm export --graph ort`` (the default).

Each ``AlbertAttention`` is traced as one ``com.microsoft.Attention`` node (q/k/v in one matmul,
masking and softmax inside the kernel; ``QAttention`` after int8 quantization), then onnxruntime's
transformer optimizer fuses GELU and residual + LayerNorm. The resulting graph runs only on
onnxruntime; ``--graph standard`` skips this module.
"""

from __future__ import annotations

import contextlib
import types
from pathlib import Path

import torch
from torch import nn

from albertlm.config import AlbertConfig


class _OrtAttention(torch.autograd.Function):
    """Self-attention that the TorchScript exporter writes as one ``com.microsoft.Attention`` node.

    The op computes ``softmax(Q K^T / sqrt(D) + mask) V`` per head with Q, K, V from one (H, 3H)
    matmul, which is what ``AlbertAttention`` computes before its output projection. ``forward`` is
    the same math in torch, used only while tracing.
    """

    @staticmethod
    def forward(ctx, x, weight_t, bias, keep, num_heads: int):  # noqa: ARG004 - ctx is the Function API
        B, S, H = x.shape
        q, k, v = (x @ weight_t + bias).view(B, S, 3, num_heads, H // num_heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep.bool()[:, None, None, :])
        return out.transpose(1, 2).reshape(B, S, H)

    @staticmethod
    def symbolic(g, x, weight_t, bias, keep, num_heads: int):
        out = g.op("com.microsoft::Attention", x, weight_t, bias, keep, num_heads_i=num_heads)
        out.setType(x.type())  # (B, S, H) float like the input, so shape inference runs through
        return out


def _ort_fused_qkv(self):
    """``fused_qkv`` with the weight transposed to (H, 3H), the layout the Attention op takes."""
    w, b = type(self).fused_qkv(self)
    return w.t(), b


def _ort_attention_forward(self, x, mask, qkv=None, first_only=False):
    if first_only:  # the op has no separate query input; ort_attention turns pooled_only off
        raise ValueError("the fused Attention op computes every position; export without pooled_only")
    w_t, b = qkv if qkv is not None else _ort_fused_qkv(self)
    # The model hands attention an SDPA mask (B, 1, 1, S); the op takes the raw (B, S) int32 mask.
    keep = mask[:, 0, 0, :].to(torch.int32)
    if self.pre_norm:  # layer_norm_position="pre": x + attention(LN(x)), as AlbertAttention.forward
        return x + self.dense(_OrtAttention.apply(self.LayerNorm(x), w_t, b, keep, self.num_heads))
    return self.LayerNorm(x + self.dense(_OrtAttention.apply(x, w_t, b, keep, self.num_heads)))


@contextlib.contextmanager
def ort_attention(model: nn.Module):
    """While tracing, every ``AlbertAttention`` exports as a fused onnxruntime Attention node.

    The encoder stacks each shared module's q/k/v weights once per forward, so the transposed
    (H, 3H) weight is one initializer however many computed layers share it.
    """
    from albertlm.model import AlbertAttention

    modules = [m for m in model.modules() if isinstance(m, AlbertAttention)]
    heads = [m for m in model.modules() if getattr(m, "pooled_only", False)]
    for m in modules:
        m.fused_qkv = types.MethodType(_ort_fused_qkv, m)
        m.forward = types.MethodType(_ort_attention_forward, m)
    for m in heads:
        m.pooled_only = False  # the op attends from every position
    try:
        yield model
    finally:
        for m in modules:
            del m.fused_qkv, m.forward
        for m in heads:
            del m.pooled_only  # back to the class default


def fuse_for_onnxruntime(path: Path, config: AlbertConfig) -> dict[str, int]:
    """Fuse GELU and residual + LayerNorm in place with onnxruntime's transformer optimizer.

    Attention is already fused by the export; embedding fusion is off (ALBERT's embedding LayerNorm
    is over E, then projected, which that fusion does not model). Returns the fused-op counts.
    """
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    options = FusionOptions("bert")
    options.enable_attention = False
    options.enable_embed_layer_norm = False
    optimized = optimize_model(
        str(path),
        model_type="bert",
        num_heads=config.num_attention_heads,
        hidden_size=config.hidden_size,
        optimization_options=options,
        opt_level=0,  # python-level fusions only; onnxruntime applies its own at session creation
    )
    optimized.save_model_to_file(str(path))
    stats = optimized.get_fused_operator_statistics()
    return {k: v for k, v in stats.items() if v}
