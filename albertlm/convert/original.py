"""Convert original TensorFlow ALBERT checkpoints into albertlm / HuggingFace model directories.

Two structures are read, told apart by the checkpoint's variable names:

- Google (google-research/albert ``modeling.py``; Google's English v1/v2 and Chinese releases, and
  brightmart/albert_zh's ``*_google`` models): ``bert/encoder/transformer/group_G/inner_group_K/...``.
  The result is an HF-layout directory that both albertlm and ``transformers`` load.
- albert_zh (brightmart/albert_zh ``modeling.py``): ``bert/embeddings/word_embeddings_2`` (the E -> H
  projection of the word embedding alone) and ``bert/encoder/layer_shared/...``; ``ln_type`` in its
  albert_config.json picks post- or pre-LayerNorm blocks (nothing in the weights tells them apart).
  The result loads in albertlm (``embedding_projection_before_position`` / ``layer_norm_position``);
  ``transformers`` cannot represent it, which the written config.json says.

    report = from_tf("albert_base/model.ckpt-best", "albert_base/albert_config.json", "albert-base-pt",
                     vocab="albert_base/30k-clean.model")

Optimizer slots and counters are skipped. Anything else that does not map, or a shape that disagrees with
the config, stops the conversion with one line naming the variable and the fix; the output directory is
written under a temporary name beside ``out`` and renamed only when complete.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from albertlm.card import update_card
from albertlm.config import AlbertConfig
from albertlm.convert.names import ZH_LAYER, map_name
from albertlm.convert.tf_reader import TFCheckpoint, resolve_prefix
from albertlm.errors import ConversionError
from albertlm.files import publish, read_json, require_new_dir, staging_dir
from albertlm.heads import HEADS

# AlbertConfig defaults of each original (what their from_dict leaves when a key is absent).
_GOOGLE_DEFAULTS = dict(embedding_size=128, hidden_size=4096, num_hidden_layers=12, num_hidden_groups=1,
                        num_attention_heads=64, intermediate_size=16384, inner_group_num=1, hidden_act="gelu",
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=512,
                        type_vocab_size=2, initializer_range=0.02)
_ZH_DEFAULTS = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                    hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                    max_position_embeddings=512, type_vocab_size=16, initializer_range=0.02)
# The original get_activation: "gelu" is its tanh approximation, which HF (and albertlm) call gelu_new.
ACTIVATIONS = {"gelu": "gelu_new", "relu": "relu", "tanh": "tanh"}
COMPAT_KEY, COMPAT_ORIGINAL = "albertlm_compat", "original"  # tokenizer_config.json: encodes as the original


@dataclass
class ConversionReport:
    out: Path
    structure: str  # "google" or "albert_zh"
    architecture: str  # the albertlm / HF class written into config.json
    config: AlbertConfig
    converted: int  # tensors written
    skipped: list[str] = field(default_factory=list)  # optimizer slots and counters
    tokenizer: str | None = None  # the vocabulary file carried over, None when none was found
    notes: list[str] = field(default_factory=list)

    @property
    def transformers_compatible(self) -> bool:
        head = HEADS.get(self.architecture)
        return self.config.transformers_compatible and head is not None and head.in_transformers

    def summary(self) -> str:
        why = "the albert_zh structure" if not self.config.transformers_compatible else f"{self.architecture}"
        loads = ("albertlm and transformers" if self.transformers_compatible
                 else f"albertlm only (transformers cannot represent {why})")
        tok = f"tokenizer {self.tokenizer}" if self.tokenizer else "no tokenizer (pass --vocab)"
        notes = "".join(f"; {n}" for n in self.notes)
        return (f"{self.out}: {self.architecture} ({self.structure} structure, {self.converted} tensors, "
                f"{len(self.skipped)} optimizer variables skipped, {tok}); loads in {loads}{notes}")


# ----------------------------------------------------------------------------- listing
def list_variables(checkpoint: str | Path) -> list[tuple[str, str, tuple[int, ...]]]:
    """(name, dtype, shape) of every variable of a TensorFlow checkpoint, as tf.train.list_variables."""
    return TFCheckpoint(checkpoint).variables()


# ----------------------------------------------------------------------------- config
def detect_structure(names: list[str], source: str) -> str:
    if any(n.endswith("/.ATTRIBUTES/VARIABLE_VALUE") for n in names):
        raise ConversionError(
            f"{source} is a TF2 object-based checkpoint (tf.train.Checkpoint / Keras), not one saved by the original "
            "ALBERT code (tf.compat.v1.train.Saver); convert the release's own model.ckpt-* instead"
        )
    if any(n.startswith("bert/encoder/transformer/") for n in names):
        return "google"
    if any(ZH_LAYER.match(n) for n in names) or "bert/embeddings/word_embeddings_2" in names:
        return "albert_zh"
    raise ConversionError(
        f"{source}: no ALBERT encoder variables (bert/encoder/transformer/group_* or bert/encoder/layer_shared/*); "
        f"run `albertlm convert --list {source}` to see what it holds"
    )


def read_original_config(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        what = "is not a file" if path.exists() else "does not exist"
        raise FileNotFoundError(f"{path} {what}; pass the albert_config.json released with the checkpoint")
    d = read_json(path, ConversionError)
    if not isinstance(d, dict):
        raise ConversionError(f"{path}: expected a JSON object (an albert_config.json)")
    return d


def group_plan(num_layers: int, num_groups: int, source: str) -> tuple[int, dict[int, int]]:
    """Our group count and {original group index: ours} for the original's group_idx = int(l / L * G).

    Only groups some layer uses exist in a checkpoint (TF creates variables lazily), so G > L (as in
    albert_zh's tiny_google_fast config) becomes one group per layer; the layers must split evenly.
    """
    used = [int(layer / num_layers * num_groups) for layer in range(num_layers)]  # the original's float math
    order = list(dict.fromkeys(used))
    ours = len(order)
    renumber = {g: i for i, g in enumerate(order)}
    if num_layers % ours or any(renumber[g] != layer * ours // num_layers for layer, g in enumerate(used)):
        raise ConversionError(
            f"{source}: num_hidden_layers={num_layers} with num_hidden_groups={num_groups} gives layers uneven "
            f"groups ({used}), which albertlm cannot represent; check both values against the checkpoint"
        )
    return ours, renumber


def map_config(d: dict[str, Any], structure: str, names: list[str], source: str) -> AlbertConfig:
    """The original albert_config.json -> AlbertConfig, read as the original code reads it."""
    defaults = _GOOGLE_DEFAULTS if structure == "google" else _ZH_DEFAULTS
    c = {**defaults, **{k: v for k, v in d.items() if v is not None or k not in defaults}}
    for key in ("vocab_size",) + (("embedding_size",) if structure == "albert_zh" else ()):
        if c.get(key) is None:
            raise ConversionError(f"{source}: no {key}; the original code needs it (copy it from the release's config)")
    act = str(c["hidden_act"]).lower()
    if act not in ACTIVATIONS:
        raise ConversionError(f"{source}: hidden_act {c['hidden_act']!r} is not one the original code supports "
                              f"with a nonlinearity ({', '.join(ACTIVATIONS)})")
    L = int(c["num_hidden_layers"])
    if structure == "google":
        E, H = int(c["embedding_size"]), int(c["hidden_size"])
        groups, _ = group_plan(L, int(c["num_hidden_groups"]), source)
        structure_kw = dict(num_hidden_groups=groups, inner_group_num=int(c["inner_group_num"]),
                            project_embeddings=E != H)  # the original projects only when E != H
    else:
        ln = c.get("ln_type", "<absent>")
        if ln not in ("postln", "preln", None):
            found = "has no ln_type" if ln == "<absent>" else f"has ln_type {ln!r}"
            raise ConversionError(
                f"{source} {found}, but the checkpoint is brightmart/albert_zh-structure (word_embeddings_2, "
                "layer_shared), whose modeling.py needs ln_type \"postln\" (its tiny/base/large/xlarge) or "
                "\"preln\" (its xxlarge): use the albert_config.json released with the checkpoint"
            )
        per_layer = sorted({int(m.group(2)) for n in names if (m := ZH_LAYER.match(n)) and m.group(2)})
        structure_kw = dict(num_hidden_groups=L if per_layer else 1, inner_group_num=1, project_embeddings=True,
                            embedding_projection_before_position=True,
                            layer_norm_position="pre" if ln == "preln" else "post")
    try:
        return AlbertConfig(
            vocab_size=int(c["vocab_size"]), embedding_size=int(c["embedding_size"]), hidden_size=int(c["hidden_size"]),
            num_hidden_layers=L, num_attention_heads=int(c["num_attention_heads"]),
            intermediate_size=int(c["intermediate_size"]), hidden_act=ACTIVATIONS[act],
            hidden_dropout_prob=float(c["hidden_dropout_prob"]),
            attention_probs_dropout_prob=float(c["attention_probs_dropout_prob"]),
            max_position_embeddings=int(c["max_position_embeddings"]), type_vocab_size=int(c["type_vocab_size"]),
            initializer_range=float(c["initializer_range"]),
            layer_norm_eps=1e-12,  # tf.contrib.layers.layer_norm's variance_epsilon for float32
            **structure_kw,
        )
    except (TypeError, ValueError) as e:
        raise ConversionError(f"{source}: {e}") from None


def architecture_for(keys: set[str]) -> str:
    if any(k.startswith("classifier.") for k in keys):
        return "AlbertForSequenceClassification"
    if any(k.startswith("start_logits.") for k in keys):
        return "AlbertForQuestionAnsweringV2"  # the original's SQuAD 2.0 head; transformers has none
    if any(k.startswith("qa_outputs.") for k in keys):
        return "AlbertForQuestionAnswering"
    if any(k.startswith("predictions.") for k in keys):
        return "AlbertForPreTraining" if any(k.startswith("sop_classifier.") for k in keys) else "AlbertForMaskedLM"
    return "AlbertModel"


# ----------------------------------------------------------------------------- conversion
def from_tf(
    checkpoint: str | Path,
    config: str | Path,
    out: str | Path,
    vocab: str | Path | None = None,
    lowercase: bool = True,
) -> ConversionReport:
    """Convert an original TensorFlow ALBERT checkpoint (see the module docstring) into ``out``.

    ``vocab``: the SentencePiece model (30k-clean.model) or WordPiece vocab (vocab.txt) released with it;
    when None, a single ``*.model`` or ``vocab*.txt`` beside the checkpoint is used if there is one.
    ``lowercase``: the original's do_lower_case (True for every ALBERT release).
    """
    import albertlm

    out = require_new_dir(out)
    ckpt = TFCheckpoint(checkpoint)
    source = str(ckpt.prefix)
    names = [n for n, _, _ in ckpt.variables()]
    structure = detect_structure(names, source)
    raw = read_original_config(config)
    cfg = map_config(raw, structure, names, str(config))
    renumber = group_plan(cfg.num_hidden_layers, int(raw.get("num_hidden_groups", 1)), str(config))[1] \
        if structure == "google" else {}

    report = ConversionReport(out=out, structure=structure, architecture="", config=cfg, converted=0)
    plan: dict[str, tuple[str, bool]] = {}
    for name in names:
        try:
            mapped = map_name(name, structure, renumber)
        except ConversionError as e:
            raise ConversionError(f"{source}: {e}") from None
        except KeyError as e:
            raise ConversionError(
                f"{source}: variable {e.args[0]}; albertlm converts the original ALBERT pretraining, classifier and "
                "SQuAD v1 / v2 variables only (see `albertlm convert --list`)"
            ) from None
        if mapped is None:
            report.skipped.append(name)
        else:
            plan[name] = mapped

    tok = _tokenizer(vocab, ckpt.prefix.parent, lowercase, cfg)
    if tok is not None:
        cfg = cfg.replace(pad_token_id=tok.pad_id, bos_token_id=tok.cls_id, eos_token_id=tok.sep_id)
        report.tokenizer = tok.file_name
    arch = architecture_for({k for k, _ in plan.values()})
    if arch == "AlbertForSequenceClassification":
        labels = ckpt.entries["output_bias"].shape[0]
        cfg = cfg.replace(id2label={i: f"LABEL_{i}" for i in range(labels)},
                          problem_type="regression" if labels == 1 else None)
    report.architecture, report.config = arch, cfg
    model = getattr(albertlm, arch)(cfg)
    own = model.state_dict()
    prefix = "albert." if hasattr(model, "albert") else ""
    sd: dict[str, torch.Tensor] = {}
    for name, (key, transpose) in plan.items():
        key = key if prefix else key.removeprefix("albert.")
        if key not in own:
            if key.endswith(("pooler.weight", "pooler.bias")) and getattr(model, "albert", model).pooler is None:
                report.notes.append(f"{name} dropped: {arch} has no pooler")
                continue
            raise ConversionError(
                f"{source}: variable {name} has no place in {arch} with {config} (num_hidden_groups="
                f"{raw.get('num_hidden_groups', 1)}, inner_group_num={raw.get('inner_group_num', 1)}); use the "
                "albert_config.json released with this checkpoint"
            )
        value = torch.from_numpy(ckpt.read(name))
        value = value.t().contiguous() if transpose else value
        if tuple(value.shape) != tuple(own[key].shape):
            want = list(own[key].shape)[::-1] if transpose else list(own[key].shape)
            raise ConversionError(
                f"{source}: variable {name} has shape {list(ckpt.entries[name].shape)} but {config} implies "
                f"{want}; use the albert_config.json released with this checkpoint (a Google-structure and an "
                "albert_zh checkpoint of the same size need different configs)"
            )
        sd[key] = value.to(own[key].dtype)
    missing = [k for k in own if k not in sd and not _tied_or_shared(model, k, sd)]
    if missing:
        raise ConversionError(
            f"{source}: {len(missing)} weight(s) of {arch} are not in the checkpoint, e.g. {missing[0]}; the "
            f"config ({config}) describes a bigger model than the checkpoint holds"
        )
    from albertlm.hf import load_into

    load_into(model, sd, source=source)
    report.converted = len(sd)
    _write(model, tok, out)
    update_card(out, f"converted from the original TensorFlow checkpoint {source} ({structure} layout)",
                fresh=True, facts={"config": str(config), "variables converted": report.converted})
    return report


def _tied_or_shared(model: torch.nn.Module, key: str, sd: dict[str, torch.Tensor]) -> bool:
    """Keys that alias a tensor already given under another key (partial sharing)."""
    params = model.state_dict(keep_vars=True)
    return any(params[k] is params[key] for k in sd if k in params)


def _tokenizer(vocab: str | Path | None, folder: Path, lowercase: bool, cfg: AlbertConfig):
    from albertlm.tokenizer import SentencePieceTokenizer, WordPieceTokenizer

    if vocab is None:
        found = sorted(folder.glob("*.model")) or sorted(folder.glob("vocab*.txt"))
        if len(found) != 1:
            return None
        vocab = found[0]
    path = Path(vocab)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; pass --vocab the 30k-clean.model or vocab.txt of the release")
    if path.suffix == ".model":
        tok = SentencePieceTokenizer(path, lowercase=lowercase)
    elif path.suffix == ".txt":
        tok = WordPieceTokenizer(path, lowercase=lowercase)
    else:
        raise ConversionError(f"{path}: expected a SentencePiece *.model or a WordPiece vocab *.txt")
    if tok.vocab_size > cfg.vocab_size:
        raise ConversionError(
            f"{path} has {tok.vocab_size} tokens but the config's vocab_size is {cfg.vocab_size}; pass the "
            "vocabulary released with this checkpoint"
        )
    return tok


def _write(model: torch.nn.Module, tok: Any, out: Path) -> None:
    """Everything into a temporary directory beside ``out``, renamed into place once complete."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = staging_dir(out.parent, f".{out.name}.convert-{os.getpid()}")  # a leftover of this process id: ours
    try:
        model.save_pretrained(tmp)
        if tok is not None:  # ids follow the original release's tokenization, in albertlm and in HF alike
            tok.with_compat(COMPAT_ORIGINAL).save(tmp)
        publish(tmp, out)  # replaces only an empty directory
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


__all__ = ["ConversionError", "ConversionReport", "from_tf", "list_variables", "map_config", "resolve_prefix"]
