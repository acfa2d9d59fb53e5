"""A HuggingFace BERT folder (``model_type: bert``, e.g. all-MiniLM-L6-v2) -> an albertlm model folder.

BERT is ALBERT with nothing shared, E = H and no E -> H projection (``config._bert``), so its weights map
one to one onto ``sharing="none"``: BERT's layer i is our group i. The map below is the whole conversion;
a task head whose keys are ours already (``classifier``, ``qa_outputs``) comes along, any other head is left
out and named. Distillation uses it to fine-tune a pretrained BERT teacher with albertlm's own fine-tuning
(``albertlm distill --finetune-teacher``), and so to time teacher and student on the same engine.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from albertlm.config import AlbertConfig
from albertlm.errors import ConversionError
from albertlm.files import read_json

# (BERT key pattern, our key) over keys with the ``bert.`` prefix removed; \1 is the layer index.
BERT_KEYS = (
    (r"^embeddings\.(word_embeddings|position_embeddings|token_type_embeddings)\.weight$", r"embeddings.\1.weight"),
    (r"^embeddings\.LayerNorm\.(weight|bias)$", r"embeddings.LayerNorm.\1"),
    (r"^encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.(weight|bias)$",
     r"encoder.albert_layer_groups.\1.albert_layers.0.attention.\2.\3"),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.dense\.(weight|bias)$",
     r"encoder.albert_layer_groups.\1.albert_layers.0.attention.dense.\2"),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.(weight|bias)$",
     r"encoder.albert_layer_groups.\1.albert_layers.0.attention.LayerNorm.\2"),
    (r"^encoder\.layer\.(\d+)\.intermediate\.dense\.(weight|bias)$",
     r"encoder.albert_layer_groups.\1.albert_layers.0.ffn.\2"),
    (r"^encoder\.layer\.(\d+)\.output\.dense\.(weight|bias)$",
     r"encoder.albert_layer_groups.\1.albert_layers.0.ffn_output.\2"),
    (r"^encoder\.layer\.(\d+)\.output\.LayerNorm\.(weight|bias)$",
     r"encoder.albert_layer_groups.\1.albert_layers.0.full_layer_layer_norm.\2"),
    (r"^pooler\.dense\.(weight|bias)$", r"pooler.\1"),
)  # fmt: skip
BUFFERS = re.compile(r"position_ids$")  # a buffer older saves wrote, not a weight
BERT_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
               "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
               "type_vocab_size", "initializer_range", "layer_norm_eps", "pad_token_id")  # fmt: skip


def is_bert(directory: str | Path) -> bool:
    cfg = Path(directory) / "config.json"
    return cfg.is_file() and read_json(cfg).get("model_type") == "bert"


def bert_config(hf: dict[str, Any], source: str) -> AlbertConfig:
    """BERT's config.json -> the AlbertConfig of the same network (``sharing="none"``, E = H, no projection)."""
    if hf.get("model_type") != "bert":
        raise ConversionError(f"{source}: model_type is {hf.get('model_type')!r}; only BERT converts (load other "
                              "architectures as a teacher with transformers)")  # fmt: skip
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise ConversionError(f"{source}: position_embedding_type {hf['position_embedding_type']!r}; only "
                              "absolute positions are ALBERT's")  # fmt: skip
    fields = {k: hf[k] for k in BERT_FIELDS if k in hf}
    return AlbertConfig(**fields, embedding_size=fields.get("hidden_size", 768), num_hidden_groups=1,
                        sharing="none", project_embeddings=False, id2label=None)  # fmt: skip


def bert_state_dict(sd: dict[str, torch.Tensor], source: str) -> tuple[dict[str, torch.Tensor], list[str]]:
    """BERT's weights under our keys, and the keys left out (heads we do not share)."""
    out, left = {}, []
    for key, value in sd.items():
        bare = key[len("bert.") :] if key.startswith("bert.") else key
        bare = bare.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        if BUFFERS.search(bare):
            continue
        for pattern, ours in BERT_KEYS:
            if re.match(pattern, bare):
                out[re.sub(pattern, ours, bare)] = value
                break
        else:
            left.append(key)
    if not out:
        raise ConversionError(f"{source}: no BERT weights found (expected keys like embeddings.word_embeddings.weight)")
    return out, left


def load_bert(directory: str | Path) -> tuple[torch.nn.Module, list[str]]:
    """A BERT folder as our ``AlbertModel`` (every encoder and pooler weight loaded, strictly), and the keys
    of the heads left out."""
    from albertlm.hf import read_state_dict
    from albertlm.model import AlbertModel

    directory = Path(directory)
    config = bert_config(read_json(directory / "config.json"), str(directory / "config.json"))
    sd, left = bert_state_dict(read_state_dict(directory), str(directory))
    model = AlbertModel(config, add_pooling_layer=any(k.startswith("pooler.") for k in sd))
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise ConversionError(f"{directory}: the BERT weights do not fit its config.json (missing "
                              f"{missing[:4]}, unexpected {unexpected[:4]})")  # fmt: skip
    return model, left


def from_bert(directory: str | Path, out: str | Path) -> dict[str, Any]:
    """Write the BERT folder ``directory`` as an albertlm model folder ``out`` (weights, config.json, the
    tokenizer); returns what was converted."""
    from albertlm.tokenizer import load_tokenizer

    model, left = load_bert(directory)
    tok = load_tokenizer(directory)
    model.save_pretrained(out)
    tok.save(out, model_max_length=model.config.max_position_embeddings)
    return {"layers": model.config.num_hidden_layers, "hidden_size": model.config.hidden_size,
            "parameters": model.num_parameters(), "left_out": left}  # fmt: skip
