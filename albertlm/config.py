"""Model configuration: one dataclass, the named presets, validation, and the HF config.json mapping.

Field names are HuggingFace's, so a released ``config.json`` maps onto this class one to one; the two
fields HF lacks (``sharing``, ``project_embeddings``, ``exit_heads``) are ours and are written into config.json too,
where ``transformers`` keeps them as harmless extra attributes.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from albertlm.errors import ConfigError
from albertlm.files import read_json, write_text_atomic

ACTIVATIONS = ("gelu_new", "gelu", "relu", "gelu_pytorch_tanh", "silu", "swish", "tanh")
SHARING_MODES = ("all", "attention", "ffn", "none")
# Early-exit classifiers (classification, regression, multiple choice): none; per-layer = PABEE, a classifier
# after every computed layer; shared = the one classifier read after every layer (no new parameters).
EXIT_HEADS = ("none", "per-layer", "shared")
LAYER_NORM_POSITIONS = ("post", "pre")
# Written into config.json when a model uses a structure transformers' AlbertModel cannot build.
TRANSFORMERS_INCOMPATIBLE_KEY = "albertlm_transformers_incompatible"

# Keys found in released ALBERT config.json files that configure nothing (spec section 1).
DEAD_KEYS = frozenset(
    {
        "net_structure_type",
        "gap_size",
        "num_memory_blocks",
        "down_scale_factor",
        "layers_to_keep",
        "position_embedding_type",
    }
)
# Generic HF PretrainedConfig keys we accept and drop on load (they carry no ALBERT architecture).
_HF_GENERIC_KEYS = frozenset(
    {
        "architectures",
        "model_type",
        "transformers_version",
        "torch_dtype",
        "dtype",
        "output_past",
        "finetuning_task",
        "problem_type",
        "num_labels",
        "return_dict",
        "output_hidden_states",
        "output_attentions",
        "use_cache",
        "tie_word_embeddings",
        "is_decoder",
        "add_cross_attention",
        "chunk_size_feed_forward",
        "_name_or_path",
        "tokenizer_class",
        "prefix",
        "sep_token_id",
        "decoder_start_token_id",
        "task_specific_params",
        "pruned_heads",
        "torchscript",
        "tie_encoder_decoder",
        "is_encoder_decoder",
        "bad_words_ids",
        "max_length",
        "min_length",
    }
)


@dataclass
class AlbertConfig:
    vocab_size: int = 30000  # V: 30000 English SentencePiece, 21128 Chinese WordPiece
    embedding_size: int = 128  # E: factorized embedding width (paper section 3.1)
    hidden_size: int = 768  # H
    num_hidden_layers: int = 12  # L: computed depth (layers applied), not distinct weights
    num_hidden_groups: int = 1  # G: distinct parameter groups; layer l uses group l // (L / G)
    num_attention_heads: int = 12  # H must be divisible by this
    intermediate_size: int = 3072  # I: FFN width, 4H in every release
    inner_group_num: int = 1  # K: blocks run in sequence inside each group (effective depth L*K)
    hidden_act: str = "gelu_new"  # HF names: gelu_new = tanh approximation, gelu = erf, relu
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02  # std of the truncated normal (cut at 2 sigma, as the original)
    layer_norm_eps: float = 1e-12
    classifier_dropout_prob: float = 0.1  # dropout before SOP / classification heads (HF behaviour)
    pad_token_id: int = 0
    bos_token_id: int = 2
    eos_token_id: int = 3
    # What is shared across layers (paper Table 4): all = the original; attention / ffn = only that
    # sublayer follows the group index, the other is per layer; none = every layer its own weights.
    sharing: str = "all"
    # E -> H projection. ALBERT always has it (even with E = H); BERT-equivalent presets have none.
    project_embeddings: bool = True
    # brightmart/albert_zh's own structure (transformers has neither option): the E -> H projection (no
    # bias) maps the word embedding alone, BEFORE the H-wide position and token-type embeddings are added
    # and LayerNorm runs over H; its MLM head decodes through the same projection transposed (H -> E -> V).
    embedding_projection_before_position: bool = False
    # Where each block's two LayerNorms sit: "post" = LN(x + f(x)) (ALBERT, BERT); "pre" = x + f(LN(x)),
    # with no LayerNorm after the last block (albert_zh's ln_type "preln").
    layer_norm_position: str = "post"
    # Early exit (``albertlm.deploy.early_exit``): which classifiers read the layers before the last (EXIT_HEADS).
    exit_heads: str = "none"
    # Task-head labels, HF convention (classification and tagging heads).
    id2label: dict[int, str] | None = None
    problem_type: str | None = None  # regression | single_label_classification | multi_label_classification
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # unknown keys, round-tripped

    def __post_init__(self) -> None:
        self._check_types()
        if self.id2label is not None:
            try:
                self.id2label = {int(k): str(v) for k, v in self.id2label.items()}
            except ValueError:
                raise ConfigError(f"AlbertConfig: id2label keys must be label ids (integers), got "
                                  f"{list(self.id2label)[:5]}") from None
        self.validate()

    def _check_types(self) -> None:
        """Each field holds its declared JSON type (a config.json edited by hand may not): one clear line."""
        import typing

        hints = typing.get_type_hints(AlbertConfig)
        for f in dataclasses.fields(self):
            v, hint = getattr(self, f.name), hints[f.name]
            optional = type(None) in typing.get_args(hint)
            base = next((a for a in typing.get_args(hint) if a is not type(None)), hint) if optional else hint
            base = typing.get_origin(base) or base
            if v is None and optional:
                continue
            if base is float and isinstance(v, int) and not isinstance(v, bool):
                setattr(self, f.name, float(v))
                continue
            if base is int and isinstance(v, float) and v.is_integer():
                setattr(self, f.name, int(v))
                continue
            if base in (int, float, str, bool, dict) and (not isinstance(v, base) or (base is not bool and
                                                                                       isinstance(v, bool))):
                want = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
                        dict: "an object"}[base]
                raise ConfigError(f"AlbertConfig: {f.name} must be {want}, got {v!r} ({type(v).__name__})")

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise ConfigError(f"AlbertConfig: {msg}")

        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_hidden_groups",
            "num_attention_heads",
            "intermediate_size",
            "inner_group_num",
            "max_position_embeddings",
            "type_vocab_size",
        ):
            need(int(getattr(self, name)) > 0, f"{name} must be a positive integer, got {getattr(self, name)}")
        need(self.embedding_size > 0, f"embedding_size (E) must be > 0, got {self.embedding_size}")
        need(
            self.hidden_size % self.num_attention_heads == 0,
            f"hidden_size {self.hidden_size} is not divisible by num_attention_heads "
            f"{self.num_attention_heads}; pick heads that divide H (e.g. H/64)",
        )
        need(
            self.num_hidden_layers % self.num_hidden_groups == 0,
            f"num_hidden_layers {self.num_hidden_layers} is not divisible by num_hidden_groups "
            f"{self.num_hidden_groups}; choose G among the divisors of L",
        )
        need(
            self.hidden_act in ACTIVATIONS,
            f"unknown hidden_act {self.hidden_act!r}; choose one of {', '.join(ACTIVATIONS)}",
        )
        need(
            self.sharing in SHARING_MODES,
            f"unknown sharing {self.sharing!r}; choose one of {', '.join(SHARING_MODES)}",
        )
        need(
            self.exit_heads in EXIT_HEADS,
            f"unknown exit_heads {self.exit_heads!r}; choose one of {', '.join(EXIT_HEADS)}",
        )
        need(
            self.project_embeddings or self.embedding_size == self.hidden_size,
            f"project_embeddings=False needs embedding_size == hidden_size "
            f"({self.embedding_size} != {self.hidden_size}); set project_embeddings=True",
        )
        need(
            self.layer_norm_position in LAYER_NORM_POSITIONS,
            f"unknown layer_norm_position {self.layer_norm_position!r}; choose one of "
            f"{', '.join(LAYER_NORM_POSITIONS)}",
        )
        need(
            self.project_embeddings or not self.embedding_projection_before_position,
            "embedding_projection_before_position=True needs project_embeddings=True (it moves the projection)",
        )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout_prob"):
            p = getattr(self, name)
            need(0.0 <= p < 1.0, f"{name} must be in [0, 1), got {p}")
        need(
            0 <= self.pad_token_id < self.vocab_size,
            f"pad_token_id {self.pad_token_id} outside the vocabulary [0, {self.vocab_size})",
        )
        # NaN passes no comparison, so each check below refuses it too: a model with one computes NaN everywhere
        need(0 < self.layer_norm_eps < float("inf"),
             f"layer_norm_eps must be a positive finite number (1e-12 in ALBERT), got {self.layer_norm_eps}")
        need(0 <= self.initializer_range < float("inf"),
             f"initializer_range must be a finite number >= 0 (0.02 in ALBERT), got {self.initializer_range}")
        if self.id2label is not None:
            n = len(self.id2label)
            need(n > 0, "id2label is empty; give one name per label id, or drop it")
            need(set(self.id2label) == set(range(n)),
                 f"id2label must number its labels 0..{n - 1} without gaps, got ids {sorted(self.id2label)[:8]}")
            dup = sorted({v for v in self.id2label.values() if list(self.id2label.values()).count(v) > 1})
            need(not dup, f"id2label names {dup[:4]} more than once; give every label id its own name")

    # ------------------------------------------------------------------ derived
    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def transformers_compatible(self) -> bool:
        """False for the albert_zh structure options, which ``transformers.AlbertModel`` cannot build."""
        return not self.embedding_projection_before_position and self.layer_norm_position == "post"

    @property
    def num_labels(self) -> int:
        return len(self.id2label) if self.id2label else 2

    @property
    def label2id(self) -> dict[str, int]:
        return {v: k for k, v in (self.id2label or {}).items()}

    def replace(self, **changes: Any) -> AlbertConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ presets
    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> AlbertConfig:
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    # ------------------------------------------------------------------ HF config.json
    def to_dict(self) -> dict[str, Any]:
        """The config.json content, in HF's field names (loadable by ``transformers.AlbertConfig``)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        if self.sharing != "all":
            # HF has no partial sharing: the checkpoint is written with one group per layer (the
            # shared weights repeated), which HF computes identically; `sharing` lets us fold it back.
            d["num_hidden_groups"] = self.num_hidden_layers
            d["albertlm_num_hidden_groups"] = self.num_hidden_groups
        if self.id2label is None:
            d.pop("id2label")
        else:
            d["id2label"] = {str(k): v for k, v in self.id2label.items()}
            d["label2id"] = self.label2id
        if self.problem_type is None:
            d.pop("problem_type")
        if self.exit_heads == "none":  # a model without exits writes what transformers writes
            d.pop("exit_heads")
        if self.transformers_compatible:  # HF-structure configs stay exactly what transformers writes
            d.pop("embedding_projection_before_position")
            d.pop("layer_norm_position")
        else:
            d[TRANSFORMERS_INCOMPATIBLE_KEY] = (
                "brightmart/albert_zh structure (embedding_projection_before_position / layer_norm_position): "
                "transformers cannot build this model and would load it wrongly; load it with albertlm"
            )
        d = {**self.extra, **d}
        d["model_type"] = "albert"
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "config") -> AlbertConfig:
        d = dict(d)
        if d.get("model_type", "albert") != "albert":
            raise ConfigError(f"{source}: model_type is {d['model_type']!r}, expected 'albert'")
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        kwargs = {k: d.pop(k) for k in list(d) if k in known}
        if "albertlm_num_hidden_groups" in d:
            kwargs["num_hidden_groups"] = d.pop("albertlm_num_hidden_groups")
        label2id = d.pop("label2id", None)
        d.pop(TRANSFORMERS_INCOMPATIBLE_KEY, None)  # derived from the two structure fields
        num_labels = d.get("num_labels")
        if kwargs.get("id2label") is None and num_labels is not None:
            kwargs["id2label"] = {i: f"LABEL_{i}" for i in range(int(num_labels))}
        extra = {k: v for k, v in d.items() if k not in DEAD_KEYS and k not in _HF_GENERIC_KEYS}
        try:
            config = cls(**kwargs, extra=extra)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{source}: {e}") from None
        given = {str(k): _as_id(v) for k, v in label2id.items()} if isinstance(label2id, dict) else label2id
        if label2id is not None and config.id2label is not None and given != config.label2id:
            raise ConfigError(f"{source}: label2id is not the inverse of id2label ({config.label2id}); fix one of "
                              "them, or drop label2id (it is derived)")
        return config

    def save(self, directory: str | Path, architectures: list[str] | None = None) -> Path:
        path = Path(directory) / "config.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        d = self.to_dict()
        if architectures:
            d["architectures"] = architectures
        write_text_atomic(path, json.dumps(d, indent=2, sort_keys=True) + "\n")
        return path

    @classmethod
    def load(cls, directory: str | Path) -> AlbertConfig:
        from albertlm.files import no_such_folder

        path = Path(directory)
        if not path.exists():
            raise FileNotFoundError(f"{no_such_folder(path)}; give a model directory (config.json + weights)")
        path = path / "config.json" if path.is_dir() else path
        if not path.exists():
            raise FileNotFoundError(f"{path}: no config.json; is this a model directory?")
        return cls.from_dict(read_json(path, ConfigError), source=str(path))


def _as_id(value: Any) -> Any:
    """A label2id value as the label id it means (HF files hold ints; a hand-edited one may hold "1")."""
    try:
        return int(value) if not isinstance(value, bool) else value
    except (TypeError, ValueError):
        return value


def _albert(h: int, layers: int, heads: int, *, v1: bool, dropout: float, **kw: Any) -> dict[str, Any]:
    return dict(
        hidden_size=h,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * h,
        hidden_act="gelu" if v1 else "gelu_new",
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        **kw,
    )


def _zh(h: int, layers: int, heads: int) -> dict[str, Any]:
    # albert_zh / the Chinese checkpoints on the HF hub: BERT's 21128 WordPiece vocab, ReLU (spec 1).
    return dict(
        vocab_size=21128,
        hidden_size=h,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * h,
        hidden_act="relu",
    )


def _bert(h: int, layers: int, heads: int) -> dict[str, Any]:
    # BERT with the ALBERT code path: E = H, no projection, nothing shared, BERT's vocab and dropout.
    return dict(
        vocab_size=30522,
        embedding_size=h,
        hidden_size=h,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * h,
        hidden_act="gelu",
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        sharing="none",
        project_embeddings=False,
    )


PRESETS: dict[str, dict[str, Any]] = {
    # v1: erf GELU and dropout 0.1 (xxlarge: 0); v2: tanh GELU, no dropout (spec section 1).
    "albert-base-v1": _albert(768, 12, 12, v1=True, dropout=0.1),
    "albert-large-v1": _albert(1024, 24, 16, v1=True, dropout=0.1),
    "albert-xlarge-v1": _albert(2048, 24, 16, v1=True, dropout=0.1),
    "albert-xxlarge-v1": _albert(4096, 12, 64, v1=True, dropout=0.0),
    "albert-base-v2": _albert(768, 12, 12, v1=False, dropout=0.0),
    "albert-large-v2": _albert(1024, 24, 16, v1=False, dropout=0.0),
    "albert-xlarge-v2": _albert(2048, 24, 16, v1=False, dropout=0.0),
    "albert-xxlarge-v2": _albert(4096, 12, 64, v1=False, dropout=0.0),
    "albert-zh-tiny": {**_zh(312, 4, 12), "intermediate_size": 1248},
    "albert-zh-small": {**_zh(384, 6, 12), "intermediate_size": 1536},
    "albert-zh-base": _zh(768, 12, 12),
    "albert-zh-large": _zh(1024, 24, 16),
    "albert-zh-xlarge": _zh(2048, 24, 32),
    "albert-zh-xxlarge": _zh(4096, 12, 64),
    "bert-base": _bert(768, 12, 12),
    "bert-large": _bert(1024, 24, 16),
    # Tiny English models for tests, demos and CPU runs; not from the paper.
    "albert-tiny": dict(
        vocab_size=30000, hidden_size=312, num_hidden_layers=4, num_attention_heads=12, intermediate_size=1248
    ),
    "albert-small": dict(
        vocab_size=30000, hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536
    ),
}


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``FIELD=VALUE`` strings (``--set``) -> typed AlbertConfig overrides; the field's type decides the
    parse (``--set hidden_size=64 --set sharing=ffn --set project_embeddings=false``)."""
    hints = {f.name: str(f.type) for f in dataclasses.fields(AlbertConfig) if f.name != "extra"}
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in hints:
            raise ConfigError(f"--set {item!r}: expected FIELD=VALUE with FIELD one of {', '.join(sorted(hints))}")
        kind = hints[key]
        try:
            if "dict" in kind:
                out[key] = json.loads(value)
            elif "bool" in kind:
                if value.lower() not in ("1", "true", "yes", "0", "false", "no"):
                    raise ValueError(value)
                out[key] = value.lower() in ("1", "true", "yes")
            elif "int" in kind and "float" not in kind:
                out[key] = int(value)
            elif "float" in kind:
                out[key] = float(value)
            else:
                out[key] = value
        except (ValueError, json.JSONDecodeError):
            raise ConfigError(f"--set {item!r}: {value!r} is not a valid {kind}") from None
    return out
