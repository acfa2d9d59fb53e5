"""The ALBERT encoder, read top to bottom like the paper (Lan et al. 2019, section 3.1).

Shape legend: B batch, S sequence, V vocabulary, E embedding width, H hidden width, I FFN width,
N heads, D head width (H / N), L computed layers, G parameter groups, K blocks inside a group.

    tokens --(V x E lookup)--> embeddings (E) --(E -> H)--> L computed layers --> pooler
    computed layer l runs the K blocks of parameter group ``group_index(l, L, G)``

Module and parameter names are HuggingFace's (``albert_layer_groups.{g}.albert_layers.{k}...``), so a
checkpoint's state dict maps onto this model without renaming; ``albertlm.hf`` owns the key map.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from albertlm.config import AlbertConfig


def group_index(layer: int, num_layers: int, num_groups: int) -> int:
    """The parameter group used by computed layer ``layer``: int(l / (L / G)) as in the original."""
    return layer * num_groups // num_layers


def activation(name: str) -> nn.Module:
    """HF config strings -> modules, exactly: gelu is erf GELU, gelu_new the tanh approximation."""
    return {
        "gelu": nn.GELU(),
        "gelu_new": nn.GELU(approximate="tanh"),
        "gelu_pytorch_tanh": nn.GELU(approximate="tanh"),
        "relu": nn.ReLU(),
        "silu": nn.SiLU(),
        "swish": nn.SiLU(),
        "tanh": nn.Tanh(),
    }[name]


@dataclass
class AlbertOutput:
    last_hidden_state: torch.Tensor  # (B, S, H)
    pooler_output: torch.Tensor | None  # (B, H): tanh(W h[CLS])
    hidden_states: tuple[torch.Tensor, ...] | None = None  # projected embeddings, then every computed layer


class AlbertEmbeddings(nn.Module):
    """Word + position + token-type embeddings, all of width E (the factorized lookup).

    With ``embedding_projection_before_position`` (albert_zh): the word embedding alone is projected
    E -> H (no bias), and the position / token-type embeddings and the LayerNorm are H wide.
    """

    def __init__(self, config: AlbertConfig):
        super().__init__()
        width = config.hidden_size if config.embedding_projection_before_position else config.embedding_size
        self.word_embeddings = nn.Embedding(config.vocab_size, config.embedding_size)
        if config.embedding_projection_before_position:
            self.word_projection = nn.Linear(config.embedding_size, config.hidden_size, bias=False)
        else:
            self.word_projection = None
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, width)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, width)
        self.LayerNorm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        S = input_ids.shape[1]
        if position_ids is None:
            position_ids = torch.arange(S, device=input_ids.device).unsqueeze(0)  # (1, S)
        x = self.word_embeddings(input_ids)  # (B, S, E)
        if self.word_projection is not None:
            x = self.word_projection(x)  # (B, S, H)
        x = x + self.position_embeddings(position_ids)  # (B, S, E), or H with word_projection
        if token_type_ids is None:
            x = x + self.token_type_embeddings.weight[0]
        else:
            x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x))


class AlbertAttention(nn.Module):
    """Multi-head self-attention with a post-LayerNorm residual (spec section 2, step 4).

    ``layer_norm_position="pre"`` (albert_zh preln): x + attention(LayerNorm(x)), nothing normalized after.
    """

    def __init__(self, config: AlbertConfig):
        super().__init__()
        H = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.query = nn.Linear(H, H)
        self.key = nn.Linear(H, H)
        self.value = nn.Linear(H, H)
        self.dense = nn.Linear(H, H)
        self.LayerNorm = nn.LayerNorm(H, eps=config.layer_norm_eps)
        self.pre_norm = config.layer_norm_position == "pre"
        self.attention_dropout = config.attention_probs_dropout_prob
        self.output_dropout = nn.Dropout(config.hidden_dropout_prob)

    def fused_qkv(self) -> tuple[torch.Tensor, torch.Tensor]:
        """q, k and v weights stacked, so one (H -> 3H) matmul replaces three (H -> H) ones."""
        w = torch.cat([self.query.weight, self.key.weight, self.value.weight])  # (3H, H)
        b = torch.cat([self.query.bias, self.key.bias, self.value.bias])  # (3H,)
        return w, b

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        qkv: tuple[torch.Tensor, torch.Tensor] | None = None,
        first_only: bool = False,
    ) -> torch.Tensor:
        """(B, S, H) -> (B, S, H); with ``first_only`` only position 0 ([CLS]) queries: -> (B, 1, H)."""
        B, _, H = x.shape  # the sequence axis is -1 below: an exported program keeps its reshapes static
        N, D = self.num_heads, H // self.num_heads
        w, b = qkv if qkv is not None else self.fused_qkv()
        h = self.LayerNorm(x) if self.pre_norm else x  # what q, k and v are computed from
        q, k, v = (t.transpose(1, 2) for t in F.linear(h, w, b).view(B, -1, 3, N, D).unbind(2))  # (B, N, S, D)
        if first_only:
            # Keys and values still come from every position; the query, residual and output from one. The
            # stacked weight is used whole (its q rows sliced off would be a second copy in an exported program).
            q, x = q[:, :, :1], x[:, :1]
        p = self.attention_dropout if self.training else 0.0
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)  # (B, N, S|1, D)
        ctx = ctx.transpose(1, 2).reshape(B, -1, H)
        out = x + self.output_dropout(self.dense(ctx))
        return out if self.pre_norm else self.LayerNorm(out)


class AlbertLayer(nn.Module):
    """One transformer block: attention, then FFN (H -> I -> H) with a post-LayerNorm residual.

    The FFN's three modules (``ffn``, ``ffn_output``, ``full_layer_layer_norm``) and the attention are
    attributes, so partial sharing can hand the same module object to several layers.
    """

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.attention = AlbertAttention(config)
        self.ffn = nn.Linear(config.hidden_size, config.intermediate_size)
        self.ffn_output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.full_layer_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.pre_norm = config.layer_norm_position == "pre"
        self.activation = activation(config.hidden_act)
        # The original applies this dropout after the FFN; HF defines it but never applies it.
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        qkv: tuple[torch.Tensor, torch.Tensor] | None = None,
        first_only: bool = False,
    ) -> torch.Tensor:
        a = self.attention(x, mask, qkv, first_only)  # (B, S, H), or (B, 1, H) with first_only
        if self.pre_norm:  # a + FFN(LN(a)): the residual stream itself is never normalized
            return a + self.dropout(self.ffn_output(self.activation(self.ffn(self.full_layer_layer_norm(a)))))
        f = self.ffn_output(self.activation(self.ffn(a)))  # (B, S, H)
        return self.full_layer_layer_norm(a + self.dropout(f))


class AlbertLayerGroup(nn.Module):
    """K blocks run in sequence; one group is one set of shareable weights."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.albert_layers = nn.ModuleList(AlbertLayer(config) for _ in range(config.inner_group_num))


class AlbertEncoder(nn.Module):
    """E -> H projection, then L computed layers over the parameter groups (spec section 2, step 3).

    sharing="all" (the original): G groups, layer l runs group ``group_index(l, L, G)``.
    sharing="attention" / "ffn" (paper Table 4): one group per layer, but the named sublayer is the
    same module object for all layers of a share group, so it has one set of weights.
    sharing="none": one group per layer, nothing shared (BERT).
    """

    def __init__(self, config: AlbertConfig):
        super().__init__()
        L, G, K = config.num_hidden_layers, config.num_hidden_groups, config.inner_group_num
        self.num_layers = L
        self.sharing = config.sharing
        self.gradient_checkpointing = False  # recompute each block in backward (memory for compute)
        if config.project_embeddings and not config.embedding_projection_before_position:
            self.embedding_hidden_mapping_in = nn.Linear(config.embedding_size, config.hidden_size)
        else:
            self.embedding_hidden_mapping_in = None
        stored_groups = G if config.sharing == "all" else L
        self.albert_layer_groups = nn.ModuleList(AlbertLayerGroup(config) for _ in range(stored_groups))
        if config.sharing in ("attention", "ffn"):
            for l, group in enumerate(self.albert_layer_groups):
                owner = self.albert_layer_groups[group_index(l, L, G) * (L // G)]
                for k in range(K):
                    src, dst = owner.albert_layers[k], group.albert_layers[k]
                    if config.sharing == "attention":
                        dst.attention = src.attention
                    else:
                        dst.ffn, dst.ffn_output = src.ffn, src.ffn_output
                        dst.full_layer_layer_norm = src.full_layer_layer_norm

    def layer_group(self, layer: int) -> AlbertLayerGroup:
        """The stored group that computed layer ``layer`` runs."""
        if self.sharing == "all":
            return self.albert_layer_groups[group_index(layer, self.num_layers, len(self.albert_layer_groups))]
        return self.albert_layer_groups[layer]

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """(B, S, E) embeddings -> (B, S, H), the input of the first computed layer."""
        return self.embedding_hidden_mapping_in(x) if self.embedding_hidden_mapping_in is not None else x

    def run_layer(self, x: torch.Tensor, mask: torch.Tensor | None, layer: int,
                  qkv_cache: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None,
                  first_only: bool = False) -> torch.Tensor:  # fmt: skip
        """Computed layer ``layer`` (its group's K blocks): (B, S, H) -> (B, S, H), or (B, 1, H) with
        ``first_only`` (the last block computes position 0 alone). The one layer step of every forward,
        full depth or early exit."""
        qkv_cache = {} if qkv_cache is None else qkv_cache
        blocks = self.layer_group(layer).albert_layers
        for k, block in enumerate(blocks):
            key = id(block.attention)
            if key not in qkv_cache:
                qkv_cache[key] = block.attention.fused_qkv()
            last = first_only and k == len(blocks) - 1
            if self.gradient_checkpointing and self.training:
                x = checkpoint(block, x, mask, qkv_cache[key], last, use_reentrant=False)
            else:
                x = block(x, mask, qkv_cache[key], last)
        return x

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        output_hidden_states: bool = False,
        first_only: bool = False,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
        """``first_only``: the very last block computes position 0 only (all a pooler reads) -> (B, 1, H)."""
        x = self.project(x)  # (B, S, E) -> (B, S, H)
        states = [x] if output_hidden_states else None
        # Shared attention weights are stacked once per forward, not once per computed layer.
        qkv_cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        for layer in range(self.num_layers):
            x = self.run_layer(x, mask, layer, qkv_cache, first_only and layer == self.num_layers - 1)
            if states is not None:
                states.append(x)
        return x, tuple(states) if states is not None else None


def attention_bias(attention_mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """(B, S) padding mask or (B, S, S) block mask (1 / True = attend) -> SDPA mask (B, 1, S|1, S)."""
    if attention_mask is None:
        return None
    keep = attention_mask.bool()
    if keep.dim() == 2:
        return keep[:, None, None, :]  # (B, 1, 1, S): padding keys masked for every query
    if keep.dim() == 3:
        # A packed row of pure padding would attend to nothing and give NaN: let each token see itself.
        eye = torch.eye(keep.shape[-1], dtype=torch.bool, device=keep.device)
        return (keep | eye)[:, None, :, :]  # (B, 1, S, S)
    raise ValueError(f"attention_mask must be (B, S) or (B, S, S), got shape {tuple(attention_mask.shape)}")


class AlbertPreTrainedModel(nn.Module):
    """Shared construction, initialisation and the HF-layout load/save of every ALBERT model class."""

    config: AlbertConfig

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.config = config

    def init_weights(self) -> None:
        """Initialise this model's own modules; a wrapped ``albert`` encoder initialised itself already."""
        # Truncated normal at 2 sigma, as the original's create_initializer (HF uses a plain normal).
        std = self.config.initializer_range
        done = {id(m) for m in self.albert.modules()} if isinstance(getattr(self, "albert", None), nn.Module) else set()
        for m in self.modules():
            if id(m) in done:
                continue
            if isinstance(m, nn.Linear | nn.Embedding):
                nn.init.trunc_normal_(m.weight, std=std, a=-2 * std, b=2 * std)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def num_parameters(self) -> int:
        """Distinct parameters (shared weights and the tied decoder counted once)."""
        return sum(p.numel() for p in self.parameters())

    @classmethod
    def from_pretrained(cls, directory: str | Path, **config_overrides: Any) -> AlbertPreTrainedModel:
        """Load a HuggingFace-layout directory (config.json + model.safetensors or pytorch_model.bin)."""
        from albertlm import hf  # the model never depends on the checkpoint format at import time

        return hf.load_pretrained(cls, directory, **config_overrides)

    def save_pretrained(self, directory: str | Path) -> Path:
        """Write config.json + model.safetensors that ``transformers`` loads without warnings."""
        from albertlm import hf

        return hf.save_pretrained(self, directory)


class AlbertModel(AlbertPreTrainedModel):
    """The bare encoder with the pooler: what HF calls ``AlbertModel``."""

    def __init__(self, config: AlbertConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = AlbertEmbeddings(config)
        self.encoder = AlbertEncoder(config)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size) if add_pooling_layer else None
        self.init_weights()

    def pool(self, h: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """tanh(W h[CLS]); with ``positions`` (B, M), pool each packed instance's [CLS] -> (B, M, H)."""
        if self.pooler is None:
            raise ValueError("this model was built with add_pooling_layer=False")
        if positions is None:
            return torch.tanh(self.pooler(h[:, 0]))
        first = h.gather(1, positions.unsqueeze(-1).expand(-1, -1, h.shape[-1]))
        return torch.tanh(self.pooler(first))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        pooled_only: bool = False,
    ) -> AlbertOutput:
        """``pooled_only``: the caller reads only ``pooler_output``, so the last block computes [CLS]
        alone (same pooled output, ~1/L less work) and ``last_hidden_state`` is (B, 1, H)."""
        x = self.embeddings(input_ids, token_type_ids, position_ids)  # (B, S, E)
        first_only = pooled_only and self.pooler is not None and not output_hidden_states
        h, states = self.encoder(x, attention_bias(attention_mask, x.dtype), output_hidden_states, first_only)
        pooled = self.pool(h) if self.pooler is not None else None
        return AlbertOutput(last_hidden_state=h, pooler_output=pooled, hidden_states=states)


def flops_per_token(config: AlbertConfig, seq_len: int, scored_positions: float | None = None,
                    training: bool = True) -> float:  # fmt: skip
    """FLOPs per token, the one formula used by training MFU and the benchmarks (the reference's, in
    ../shared/docs/anchors.md of the project's workspace):

    L(8H^2 + 4HI + 4SH) + 2EH + P/S (2HE + 2EV) for the forward pass, times 3 with ``training`` (forward +
    backward), with P the positions the MLM head scores (all S by default, 0 for the encoder alone).
    Sharing does not reduce FLOPs: every computed layer counts.
    """
    c = config
    H, I, E, V, S = c.hidden_size, c.intermediate_size, c.embedding_size, c.vocab_size, seq_len
    depth = c.num_hidden_layers * c.inner_group_num
    p_over_s = 1.0 if scored_positions is None else scored_positions / S
    fwd = depth * (8 * H * H + 4 * H * I + 4 * S * H) + 2 * E * H + p_over_s * (2 * H * E + 2 * E * V)
    return 3.0 * fwd if training else float(fwd)


__all__ = [
    "AlbertConfig",
    "AlbertEmbeddings",
    "AlbertAttention",
    "AlbertLayer",
    "AlbertLayerGroup",
    "AlbertEncoder",
    "AlbertModel",
    "AlbertOutput",
    "AlbertPreTrainedModel",
    "group_index",
    "flops_per_token",
]
