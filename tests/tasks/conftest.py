"""Fixtures for the task tests: the data roots (shipped slices; the full shared data for the `shared`
tier) and tiny tokenizers trained once per session on the shipped corpus slices."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from official_reference import NeedsPunktModel, lists_could_decide
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
    from albertlm.data.tokenizer_training import train_sentencepiece

    root = tmp_path_factory.mktemp("en_tok")
    train_sentencepiece([_corpus("en", root / "corpus")], root / "tok", vocab_size=2000, seed=0)
    return root / "tok"


@pytest.fixture(scope="session")
def zh_tok_dir(tmp_path_factory) -> Path:
    from albertlm.data.tokenizer_training import train_wordpiece

    root = tmp_path_factory.mktemp("zh_tok")
    train_wordpiece([_corpus("zh", root / "corpus")], root / "tok", vocab_size=6000)
    return root / "tok"


@pytest.fixture
def offline_word_tokenize(monkeypatch):
    """nltk.word_tokenize itself, its sentence splitter swapped for Punkt without learned parameters,
    which decides like the English model on every run where ``lists_could_decide`` is false (the script
    lowercases, so the model's capitalisation evidence never fires)."""
    import nltk
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    untrained = PunktSentenceTokenizer()
    monkeypatch.setattr(nltk.tokenize, "sent_tokenize", lambda text, language="english": untrained.tokenize(text))

    def tokenize(run: str) -> list[str]:
        if lists_could_decide(run):
            raise NeedsPunktModel(run)
        return nltk.word_tokenize(run)

    return tokenize
