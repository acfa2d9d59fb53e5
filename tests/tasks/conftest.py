"""Fixtures for the task tests: the data roots (shipped slices; the full shared data for the `shared`
tier) and tiny tokenizers trained once per session on the shipped corpus slices."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from shared_data import CORPUS, DATA, SHARED_DATA


def _corpus(lang: str, out: Path) -> Path:
    out.mkdir(parents=True)
    for f in sorted((CORPUS / lang).glob("*.txt")):
        if f.name != "heldout.txt":
            shutil.copy(f, out / f.name)
    return out


@pytest.fixture(scope="session")
def data() -> Path:
    """The task folders cut to a few rows each (tests/data/tasks)."""
    return DATA


@pytest.fixture(scope="session")
def full_data() -> Path:
    """The full task data in ../shared; only for tests marked `shared` (which fail without it)."""
    return SHARED_DATA


@pytest.fixture(scope="session")
def en_tok_dir(tmp_path_factory) -> Path:
    """A 2000-piece SentencePiece model on the English corpus slices (a few seconds)."""
    from albertlm.tokenizer import train_sentencepiece

    root = tmp_path_factory.mktemp("en_tok")
    train_sentencepiece([_corpus("en", root / "corpus")], root / "tok", vocab_size=2000, seed=0)
    return root / "tok"


@pytest.fixture(scope="session")
def zh_tok_dir(tmp_path_factory) -> Path:
    from albertlm.tokenizer import train_wordpiece

    root = tmp_path_factory.mktemp("zh_tok")
    train_wordpiece([_corpus("zh", root / "corpus")], root / "tok", vocab_size=6000)
    return root / "tok"
