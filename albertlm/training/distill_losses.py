"""What a student is taught, apart from the loop that teaches it (``albertlm.training.distill``): the attention
distributions and value projections read from the modules' own inputs during a forward pass, and the loss terms
between student and teacher (soft logits, hidden states, attention and value relations) with the layer map."""

from __future__ import annotations

import contextlib
import math
import re
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from albertlm.errors import UserError
from albertlm.model import AlbertAttention


# --- attention and values, read from the modules' own inputs ----------------------------------------
class AttentionCall:
    """One call of an ``AlbertAttention``: what its q, k and v are computed from, and its mask."""

    def __init__(self, module: AlbertAttention, x: torch.Tensor, mask: torch.Tensor | None, qkv: Any):
        h = module.LayerNorm(x) if module.pre_norm else x
        w, b = qkv if qkv is not None else module.fused_qkv()
        self.proj, self.mask, self.heads = F.linear(h, w, b), mask, module.num_heads  # (N, S, 3H)

    def _split(self, t: torch.Tensor, heads: int) -> torch.Tensor:
        N, S, H = t.shape
        return t.view(N, S, heads, H // heads).transpose(1, 2)  # (N, heads, S, D)

    def probs(self) -> torch.Tensor:
        """The attention distributions the module computed: (N, N_heads, S, S)."""
        q, k, _ = self.proj.chunk(3, dim=-1)
        q, k = self._split(q, self.heads), self._split(k, self.heads)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if self.mask is not None:
            scores = scores.masked_fill(~self.mask, -1e4)
        return scores.float().softmax(-1)

    def values(self) -> torch.Tensor:
        return self.proj.chunk(3, dim=-1)[2]  # (N, S, H)


@contextlib.contextmanager
def capture_attention(model: nn.Module):
    """Every call of the model's attention modules, in order (a shared module once per computed layer)."""
    calls: list[AttentionCall] = []

    def hook(module: AlbertAttention, args: tuple, kwargs: dict) -> None:
        x, mask, qkv = (list(args) + [None, None, None])[:3]
        calls.append(AttentionCall(module, x, mask, qkv))

    seen, handles = set(), []
    for m in model.modules():
        if isinstance(m, AlbertAttention) and id(m) not in seen:
            seen.add(id(m))
            handles.append(m.register_forward_pre_hook(hook, with_kwargs=True))
    try:
        yield calls
    finally:
        for h in handles:
            h.remove()


def last_blocks(calls: list[AttentionCall], config: Any) -> list[AttentionCall]:
    """The last block's call of each computed layer (a group runs K blocks per layer)."""
    K = config.inner_group_num
    return calls[K - 1 :: K]


VALUE_NAMES = re.compile(r"(\.self\.value|\.v_lin|\.value_proj)$")  # BERT/RoBERTa/ELECTRA, DistilBERT, DeBERTa


@contextlib.contextmanager
def capture_values(model: nn.Module):
    """A transformers model's value projections' outputs, in call order: (N, S, H) each."""
    found: list[torch.Tensor] = []
    handles = [m.register_forward_hook(lambda _m, _a, out: found.append(out))
               for name, m in model.named_modules() if VALUE_NAMES.search(name)]  # fmt: skip
    if not handles:
        raise UserError(f"the teacher ({type(model).__name__}) has no value projection albertlm can read (named "
                        "*.self.value or *.v_lin); give --attention-weight 0, or a student with the teacher's head "
                        "count (--set num_attention_heads=N)")  # fmt: skip
    try:
        yield found
    finally:
        for h in handles:
            h.remove()


# --- the losses ---------------------------------------------------------------------------------------
def soft_loss(student: torch.Tensor, teacher: torch.Tensor, T: float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """KL(softmax(t / T) || softmax(s / T)) x T^2 over the last dimension, averaged over the rows ``mask``
    keeps (all rows when None); positions a row masks (-inf / huge negative logits) weigh nothing."""
    t = F.log_softmax(teacher.float() / T, dim=-1)
    s = F.log_softmax(student.float() / T, dim=-1)
    kl = (t.exp() * (t - s)).sum(-1)
    if mask is not None:
        kl = kl[mask.bool()]
    return kl.mean() * T * T


def relation_kl(teacher: torch.Tensor, student: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """KL(teacher || student) between two (N, heads, S, S) distributions over the keys, averaged over the
    rows of real queries; ``keys`` (N, S) is 1 on real tokens."""
    s = torch.log(student.float().clamp_min(1e-12))
    t = teacher.float()
    kl = (torch.xlogy(t, t) - t * s).sum(-1)  # (N, heads, S)
    rows = keys.bool()[:, None, :].expand_as(kl)
    return kl[rows].mean()


def value_relation(values: torch.Tensor, heads: int, keys: torch.Tensor) -> torch.Tensor:
    """MiniLM's value relation: softmax(V V^T / sqrt(d)) over ``heads`` relation heads -> (N, heads, S, S)."""
    N, S, H = values.shape
    v = values.float().view(N, S, heads, H // heads).transpose(1, 2)
    scores = v @ v.transpose(-1, -2) / math.sqrt(H // heads)
    scores = scores.masked_fill(~keys.bool()[:, None, None, :], -1e4)
    return scores.softmax(-1)


def hidden_loss(student: torch.Tensor, teacher: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """MSE over the real tokens of the projected student state and the teacher's: (N, S, H_t) each."""
    diff = (student.float() - teacher.float())[keys.bool()]
    return diff.pow(2).mean()


def layer_pairs(spec: str, student_layers: int, teacher_layers: int) -> list[tuple[int, int]]:
    """Student:teacher hidden-state index pairs (0 is the embeddings, j the j-th computed layer)."""
    if spec == "uniform":
        return [(0, 0)] + [(j, (2 * j * teacher_layers + student_layers) // (2 * student_layers))
                           for j in range(1, student_layers + 1)]  # fmt: skip
    pairs = []
    for part in spec.split(","):
        a, sep, b = part.strip().partition(":")
        if not sep or not a.isdigit() or not b.isdigit():
            raise UserError(f"--layer-map {spec!r}: expected uniform or pairs like 0:0,1:3,2:6 (student:teacher)")
        s, t = int(a), int(b)
        if s > student_layers or t > teacher_layers:
            raise UserError(f"--layer-map {part}: the student computes {student_layers} layers and the teacher has "
                            f"{teacher_layers} (0 is the embeddings)")  # fmt: skip
        pairs.append((s, t))
    return pairs
