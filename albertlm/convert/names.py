"""The original TensorFlow variable names (google-research/albert, brightmart/albert_zh) and the rules that
map them to our (HuggingFace-layout) keys: one skip rule for what a training run adds beside the weights, one
suffix map, the encoder rules (spec section 3), the fine-tuning heads' rules and albert_zh's block names.
``albertlm.hf`` is the HuggingFace format only; the conversion (``albertlm.convert.original``) reads these.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from albertlm.errors import CheckpointError, ConversionError

# Variables a training run adds beside the weights (optimizer slots, step and loss-scale counters).
SKIP = re.compile(
    r"(/adam_[mv]|/lamb_[mv]|/Momentum|/Adam(_\d+)?|/Adagrad|/RMSProp(_\d+)?|/ExponentialMovingAverage)$"
    r"|^(global_step|beta[12]_power|current_loss_scale|good_steps)$"
)
# Fine-tuning heads of the original repositories: run_classifier (classifier_utils), run_squad_v1 and
# run_squad_v2 (squad_utils). (pattern, our key, transpose: dense kernels are [in, out]).
TF_HEAD_RULES = (
    (r"^output_weights$", "classifier.weight", False),
    (r"^output_bias$", "classifier.bias", False),
    (r"^cls/squad/output_weights$", "qa_outputs.weight", False),
    (r"^cls/squad/output_bias$", "qa_outputs.bias", False),
    (r"^start_logits/dense/(kernel|bias)$", r"start_logits.\1", True),
    (r"^end_logits/dense_0/(kernel|bias)$", r"end_dense.\1", True),
    (r"^end_logits/LayerNorm/(gamma|beta)$", r"end_LayerNorm.\1", False),
    (r"^end_logits/dense_1/(kernel|bias)$", r"end_logits.\1", True),
    (r"^answer_class/dense_0/(kernel|bias)$", r"answer_dense.\1", True),
    (r"^answer_class/dense_1/kernel$", "answer_logits.kernel", True),
)
# brightmart/albert_zh modeling.py: (pattern over the part after the layer scope, our key in the block)
ZH_LAYER = re.compile(r"^bert/encoder/(layer_shared|layer_(\d+))/(.+)/(kernel|bias|gamma|beta)$")
ZH_BLOCK = {
    "attention/self/query": "attention.query",
    "attention/self/key": "attention.key",
    "attention/self/value": "attention.value",
    "attention/output/dense": "attention.dense",
    "attention/output/LayerNorm": "attention.LayerNorm",  # the pre-attention LayerNorm with ln_type preln
    "intermediate/dense": "ffn",
    "output/dense": "ffn_output",
    "output/LayerNorm": "full_layer_layer_norm",  # the pre-FFN LayerNorm with ln_type preln
}
SUFFIX = {"kernel": "weight", "gamma": "weight", "beta": "bias", "bias": "bias"}  # TF leaf -> torch

# Original TF variable -> HF key, applied in order (spec section 3). Kernels are [in, out]: transposed.
TF_RULES: tuple[tuple[str, str], ...] = (
    (r"^bert/embeddings/(word|position|token_type)_embeddings$", r"albert.embeddings.\1_embeddings.weight"),
    (r"^bert/embeddings/LayerNorm/(gamma|beta)$", r"albert.embeddings.LayerNorm.\1"),
    (r"^bert/encoder/embedding_hidden_mapping_in/(kernel|bias)$", r"albert.encoder.embedding_hidden_mapping_in.\1"),
    (r"^bert/encoder/transformer/group_(\d+)/inner_group_(\d+)/attention_1/self/(query|key|value)/(kernel|bias)$",
     r"albert.encoder.albert_layer_groups.\1.albert_layers.\2.attention.\3.\4"),
    (r"^bert/encoder/transformer/group_(\d+)/inner_group_(\d+)/attention_1/output/dense/(kernel|bias)$",
     r"albert.encoder.albert_layer_groups.\1.albert_layers.\2.attention.dense.\3"),
    (r"^bert/encoder/transformer/group_(\d+)/inner_group_(\d+)/LayerNorm/(gamma|beta)$",
     r"albert.encoder.albert_layer_groups.\1.albert_layers.\2.attention.LayerNorm.\3"),
    (r"^bert/encoder/transformer/group_(\d+)/inner_group_(\d+)/ffn_1/intermediate/dense/(kernel|bias)$",
     r"albert.encoder.albert_layer_groups.\1.albert_layers.\2.ffn.\3"),
    (r"^bert/encoder/transformer/group_(\d+)/inner_group_(\d+)/ffn_1/intermediate/output/dense/(kernel|bias)$",
     r"albert.encoder.albert_layer_groups.\1.albert_layers.\2.ffn_output.\3"),
    (r"^bert/encoder/transformer/group_(\d+)/inner_group_(\d+)/LayerNorm_1/(gamma|beta)$",
     r"albert.encoder.albert_layer_groups.\1.albert_layers.\2.full_layer_layer_norm.\3"),
    (r"^bert/pooler/dense/(kernel|bias)$", r"albert.pooler.\1"),
    (r"^cls/predictions/transform/dense/(kernel|bias)$", r"predictions.dense.\1"),
    (r"^cls/predictions/transform/LayerNorm/(gamma|beta)$", r"predictions.LayerNorm.\1"),
    (r"^cls/predictions/output_bias$", r"predictions.bias"),
    (r"^cls/seq_relationship/output_weights$", r"sop_classifier.classifier.weight"),
    (r"^cls/seq_relationship/output_bias$", r"sop_classifier.classifier.bias"),
)


def tf_to_hf_name(name: str) -> tuple[str, bool] | None:
    """Original TF variable name -> (HF key, needs transpose); None for optimizer slots and counters."""
    if SKIP.search(name):
        return None
    for pattern, repl in TF_RULES:
        if re.match(pattern, name):
            key = re.sub(pattern, repl, name)
            head, _, last = key.rpartition(".")
            if last in SUFFIX:
                key = f"{head}.{SUFFIX[last]}"
            # Dense kernels are [in, out]; the SOP output_weights are already [2, H] like torch.
            return key, name.endswith("/kernel")
    raise CheckpointError(f"unknown TF variable {name!r}: no rule in albertlm.convert.names.TF_RULES maps it")


def tf_to_hf_state_dict(variables: dict[str, Any]) -> dict[str, torch.Tensor]:
    """{TF variable name: array} (e.g. from tf.train.load_checkpoint) -> an HF-layout state dict."""
    out = {}
    for name, value in variables.items():
        mapped = tf_to_hf_name(name)
        if mapped is None:
            continue
        key, transpose = mapped
        t = torch.as_tensor(value)
        out[key] = t.t().contiguous() if transpose else t
    return out


def map_name(name: str, structure: str, renumber: dict[int, int]) -> tuple[str, bool] | None:
    """Original variable -> (our HF-layout key, transpose); None for optimizer state; KeyError if unknown."""
    if SKIP.search(name):
        return None
    for pattern, key, transposed in TF_HEAD_RULES:
        if re.match(pattern, name):
            head, _, last = re.sub(pattern, key, name).rpartition(".")
            return f"{head}.{SUFFIX.get(last, last)}", transposed and name.endswith("/kernel")
    if structure == "google":
        m = re.match(r"^(bert/encoder/transformer/group_)(\d+)(/.*)$", name)
        if m:
            g = int(m.group(2))
            if g not in renumber:
                raise ConversionError(
                    f"variable {name} belongs to group {g}, but the config's num_hidden_layers / num_hidden_groups "
                    f"run only groups {sorted(renumber)}; use the albert_config.json released with this checkpoint"
                )
            name = f"{m.group(1)}{renumber[g]}{m.group(3)}"
        try:
            mapped = tf_to_hf_name(name)
        except ValueError:
            raise KeyError(f"{name} has no Google-structure counterpart") from None
        return mapped
    if name == "bert/embeddings/word_embeddings_2":
        return "albert.embeddings.word_projection.weight", True  # [E, H] -> torch (H, E)
    m = ZH_LAYER.match(name)
    if m:
        block = ZH_BLOCK.get(m.group(3))
        if block is None:
            raise KeyError(f"{name} is not a variable of brightmart's transformer block")
        group = int(m.group(2)) if m.group(2) else 0
        return (f"albert.encoder.albert_layer_groups.{group}.albert_layers.0.{block}.{SUFFIX[m.group(4)]}",
                m.group(4) == "kernel")
    if name.startswith("bert/encoder/transformer/"):
        raise KeyError(f"{name} is Google-structure, but the checkpoint also holds albert_zh variables")
    try:
        return tf_to_hf_name(name)  # embeddings, pooler and pretraining heads are named as in Google's
    except ValueError:
        raise KeyError(f"{name} has no albert_zh-structure counterpart") from None
