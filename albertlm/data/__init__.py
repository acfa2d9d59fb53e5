"""Pretraining data, in the order it flows: corpus (raw text -> documents) -> instances (documents ->
sentence pairs -> n-gram masks) -> shards (memory-mapped arrays on disk, built in parallel and atomically)
-> dataset (shards -> padded or packed training batches).

    from albertlm.data import InstanceConfig, build_dataset, PretrainingDataset, PretrainingCollator
"""

from albertlm.data.corpus import (
    INPUT_FORMATS,
    chunk_boundaries,
    detect_format,
    iter_documents,
    resolve_inputs,
    split_sentences,
)
from albertlm.data.dataset import PackingCollator, PretrainingCollator, PretrainingDataset, pack_instances
from albertlm.data.instances import (
    OBJECTIVES,
    DocumentEncoder,
    InstanceConfig,
    SpecialIds,
    build_instance,
    mask_tokens,
    ngram_probs,
    plan_instances,
)
from albertlm.data.manifest import MANIFEST, DataFormatError, load_manifest
from albertlm.data.shards import BUILD_MARK, build_dataset, tokenizer_info, vocab_fingerprint

__all__ = [
    "BUILD_MARK",
    "INPUT_FORMATS",
    "MANIFEST",
    "OBJECTIVES",
    "DataFormatError",
    "DocumentEncoder",
    "InstanceConfig",
    "PackingCollator",
    "PretrainingCollator",
    "PretrainingDataset",
    "SpecialIds",
    "build_dataset",
    "build_instance",
    "chunk_boundaries",
    "detect_format",
    "iter_documents",
    "load_manifest",
    "mask_tokens",
    "ngram_probs",
    "pack_instances",
    "plan_instances",
    "resolve_inputs",
    "split_sentences",
    "tokenizer_info",
    "vocab_fingerprint",
]
