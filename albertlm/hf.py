"""The HuggingFace format: reading and writing model folders, and the declarative key map.

Our modules carry HF's names, so an HF state dict differs from ours only by the rules in
``HF_IGNORED`` and ``hf_to_ours`` (prefix, the tied decoder, buffers HF once saved). The original TF
names live in ``albertlm.convert.names``. Nothing is ever unpickled unsafely: ``.bin`` files are read with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file, save_file

from albertlm.config import AlbertConfig
from albertlm.errors import CheckpointError
from albertlm.files import atomic_file, inside, read_json

if TYPE_CHECKING:
    from albertlm.model import AlbertPreTrainedModel

WEIGHTS_SAFETENSORS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
WEIGHTS_BIN = "pytorch_model.bin"

# Keys an HF checkpoint may hold that our model does not: (pattern, why dropped).
HF_IGNORED = (
    (r"(albert\.)?embeddings\.position_ids$", "a buffer legacy HF saves wrote"),
    (r"predictions\.decoder\.weight$", "tied to the word embedding"),
    (r"predictions\.decoder\.bias$", "the same tensor as predictions.bias"),
)
# Head keys newly initialised when a checkpoint of another head is loaded (HF's behaviour).
HEAD_PREFIXES = ("classifier.", "exit_classifiers.", "qa_outputs.", "sop_classifier.", "predictions.",
                 "start_logits.", "end_", "answer_")

# --------------------------------------------------------------------------- reading
def read_state_dict(directory: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of an HF directory: safetensors (single or sharded) or a legacy pytorch_model.bin."""
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: not a directory; pass the folder holding config.json")
    if (d / WEIGHTS_SAFETENSORS).exists():
        return _load_safetensors(d / WEIGHTS_SAFETENSORS)
    if (d / WEIGHTS_INDEX).exists():
        sd: dict[str, torch.Tensor] = {}
        for shard in shard_files(d):
            sd.update(_load_safetensors(shard))
        return sd
    if (d / WEIGHTS_BIN).exists():
        try:
            # weights_only: a pickle holding anything but tensors is refused, never executed.
            sd = torch.load(d / WEIGHTS_BIN, map_location="cpu", weights_only=True)
        except Exception as e:  # torch raises UnpicklingError, RuntimeError, EOFError...
            raise CheckpointError(f"{d / WEIGHTS_BIN}: cannot be read as a tensor-only checkpoint ({e})") from None
        if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
            raise CheckpointError(f"{d / WEIGHTS_BIN}: expected a dict of tensors")
        return sd
    raise FileNotFoundError(f"{d}: no {WEIGHTS_SAFETENSORS}, {WEIGHTS_INDEX} or {WEIGHTS_BIN} found")


def shard_files(directory: Path) -> list[Path]:
    """The shard files ``model.safetensors.index.json`` names, each checked to lie inside ``directory``; a
    malformed index is one line (CheckpointError)."""
    path = directory / WEIGHTS_INDEX
    index = read_json(path, CheckpointError)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{path}: expected an object with a non-empty \"weight_map\" ({{tensor name: shard "
                              "file}}); re-save the model")
    names = set()
    for key, shard in weight_map.items():
        if not isinstance(shard, str):
            raise CheckpointError(f"{path}: weight_map[{key!r}] is {shard!r}, not a shard file name; re-save the model")
        names.add(shard)
    return [inside(directory, shard, f"{path} weight_map", CheckpointError) for shard in sorted(names)]


def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except Exception as e:  # safetensors raises SafetensorError on a truncated or corrupt header
        raise CheckpointError(f"{path}: not a valid safetensors file ({e})") from None


def hf_to_ours(sd: dict[str, torch.Tensor], model: AlbertPreTrainedModel) -> dict[str, torch.Tensor]:
    """An HF state dict in our layout: drop tied/buffer keys (``HF_IGNORED``), add or strip the ``albert.``
    prefix, fold the projection."""
    has_base = hasattr(model, "albert")
    base = model.albert if has_base else model
    out: dict[str, torch.Tensor] = {}
    decoder_bias = None
    for key, value in sd.items():
        if key.endswith("predictions.decoder.bias"):
            decoder_bias = value
        if any(re.search(p, key) for p, _ in HF_IGNORED):
            continue
        if has_base and not key.startswith("albert.") and not key.startswith(HEAD_PREFIXES):
            key = "albert." + key  # a bare AlbertModel checkpoint loaded under a task head
        elif not has_base and key.startswith("albert."):
            key = key[len("albert.") :]
        if base.pooler is None and re.match(r"(albert\.)?pooler\.", key):
            continue  # heads without a pooler (tagging, span QA) ignore it, as HF does
        out[key] = value
    if decoder_bias is not None and "predictions.bias" not in out:
        out["predictions.bias"] = decoder_bias  # legacy saves with only the decoder's copy

    prefix = "albert." if has_base else ""
    proj = f"{prefix}encoder.embedding_hidden_mapping_in."
    if not model.config.project_embeddings:
        w, b = out.pop(proj + "weight", None), out.pop(proj + "bias", None)
        if w is not None and not (torch.equal(w, torch.eye(w.shape[0], dtype=w.dtype)) and not b.any()):
            raise CheckpointError(
                f"{proj}weight is not the identity but the config says project_embeddings=false; "
                "set project_embeddings=true to load this checkpoint"
            )
    return out


def load_into(model: AlbertPreTrainedModel, sd: dict[str, torch.Tensor], source: str = "checkpoint") -> list[str]:
    """Copy an HF-layout state dict into ``model``; returns the newly initialised head keys."""
    sd = hf_to_ours(sd, model)
    own = model.state_dict()
    head_like = lambda k: k.startswith(HEAD_PREFIXES)  # noqa: E731
    missing = [k for k in own if k not in sd]
    unexpected = [k for k in sd if k not in own]
    bad_missing = [k for k in missing if not head_like(k)]
    bad_unexpected = [k for k in unexpected if not head_like(k)]
    if bad_missing or bad_unexpected:
        msg = [f"{source} does not match {type(model).__name__}({_describe(model.config)})"]
        if bad_missing:
            msg.append(f"missing keys: {_short(bad_missing)}")
        if bad_unexpected:
            msg.append(f"unexpected keys: {_short(bad_unexpected)}")
        msg.append("check num_hidden_groups / inner_group_num / sharing in config.json")
        raise CheckpointError("; ".join(msg))
    shapes = [f"{k}: checkpoint {tuple(sd[k].shape)} vs model {tuple(own[k].shape)}"
              for k in own if k in sd and sd[k].shape != own[k].shape]
    if shapes:
        raise CheckpointError(f"{source}: shape mismatch: " + "; ".join(shapes[:8]))
    _check_shared_copies(model, sd, source)
    with torch.no_grad():
        for k, t in own.items():
            if k in sd:
                t.copy_(sd[k])
    return [k for k in missing if head_like(k)]


def _check_shared_copies(model: AlbertPreTrainedModel, sd: dict[str, torch.Tensor], source: str) -> None:
    """With partial sharing, one tensor has several keys: their checkpoint copies must agree."""
    by_tensor: dict[int, str] = {}
    for name, t in model.state_dict(keep_vars=True).items():
        first = by_tensor.setdefault(id(t), name)
        if first != name and name in sd and first in sd and not torch.equal(sd[first], sd[name]):
            raise CheckpointError(
                f"{source}: {name} differs from {first}, but sharing={model.config.sharing!r} makes them "
                "one tensor; load with the sharing mode the checkpoint was trained with"
            )


def _describe(c: AlbertConfig) -> str:
    return f"L={c.num_hidden_layers}, G={c.num_hidden_groups}, K={c.inner_group_num}, sharing={c.sharing}"


def _short(keys: list[str], n: int = 6) -> str:
    return ", ".join(keys[:n]) + (f" (+{len(keys) - n} more)" if len(keys) > n else "")


def load_pretrained(cls: type, directory: str | Path, **config_overrides: Any) -> AlbertPreTrainedModel:
    config = AlbertConfig.load(directory)
    if config_overrides:
        config = config.replace(**config_overrides)
    model = cls(config)
    fresh = load_into(model, read_state_dict(directory), source=str(directory))
    model.newly_initialized_keys = fresh
    return model.eval()


# --------------------------------------------------------------------------- writing
def ours_to_hf(config: AlbertConfig, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our state dict in the HF layout: shared tensors written once per key, identity projection added."""
    sd = {}
    for k, v in state_dict.items():
        if hasattr(v, "full_tensor"):  # a DTensor (FSDP2): gather the full weight
            v = v.full_tensor()
        sd[k] = torch.empty(v.shape, dtype=v.dtype).copy_(v.detach())  # a plain, unshared CPU tensor
    if not config.project_embeddings:
        prefix = "albert." if any(k.startswith("albert.") for k in sd) else ""
        ref = next(iter(sd.values()))
        sd[f"{prefix}encoder.embedding_hidden_mapping_in.weight"] = torch.eye(config.hidden_size, dtype=ref.dtype)
        sd[f"{prefix}encoder.embedding_hidden_mapping_in.bias"] = torch.zeros(config.hidden_size, dtype=ref.dtype)
    return sd


def _umask() -> int:
    mask = os.umask(0)  # the only portable way to read it is to set it and put it back
    os.umask(mask)
    return mask


def save_state_dict(
    config: AlbertConfig, class_name: str, state_dict: dict[str, torch.Tensor], directory: str | Path
) -> Path:
    """config.json + model.safetensors, each written to a temp name and renamed (never half-written)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    config.save(d, architectures=[class_name])  # our class names are transformers' (heads.HEADS)
    with atomic_file(d / WEIGHTS_SAFETENSORS) as tmp:
        save_file(ours_to_hf(config, state_dict), str(tmp), metadata={"format": "pt"})
        os.chmod(tmp, 0o666 & ~_umask())  # safetensors makes its file 0600; honour the umask as all files do
    return d


def save_pretrained(model: AlbertPreTrainedModel, directory: str | Path) -> Path:
    return save_state_dict(model.config, type(model).__name__, model.state_dict(), directory)
