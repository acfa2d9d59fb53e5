"""The multihost tier's fixtures (the hosts themselves: hosts.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hosts import switched_hosts as make_switched_hosts
from hosts import two_hosts as make_two_hosts
from shared_data import docstring_corpus


@pytest.fixture
def two_hosts():
    with make_two_hosts() as hosts:
        yield hosts


@pytest.fixture
def switched_hosts():
    with make_switched_hosts() as (hosts, switch):
        yield hosts, switch


@pytest.fixture(scope="session")
def shards(tmp_path_factory) -> Path:
    """~250 documents of stdlib docstrings -> a 600-piece SentencePiece model -> dynamic shards (seq 64)."""
    from albertlm.data import InstanceConfig, build_dataset
    from albertlm.data.tokenizer_training import train_sentencepiece

    root = tmp_path_factory.mktemp("multihost")
    text = docstring_corpus(root / "corpus.txt", 250)
    tok = train_sentencepiece([text], root / "tok", vocab_size=600)
    build_dataset([text], tok, root / "shards", cfg=InstanceConfig(max_seq_length=64), seed=1)
    return root / "shards"
