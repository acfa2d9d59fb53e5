"""Fixtures for the task tests: the shared data root and tiny tokenizers trained once per session."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from official_reference import NeedsPunktModel, lists_could_decide

SHARED = Path(__file__).resolve().parents[3] / "shared"
DATA = SHARED / "data"
CORPUS = SHARED / "corpus"


def _slice(lang: str, out: Path, lines: int = 1500) -> Path:
    out.mkdir(parents=True)
    for f in sorted((CORPUS / lang).glob("*.txt")):
        if f.name != "heldout.txt":
            with open(f, encoding="utf-8") as fh:
                (out / f.name).write_text("".join(itertools.islice(fh, lines)), encoding="utf-8")
    return out


@pytest.fixture(scope="session")
def data() -> Path:
    if not DATA.is_dir():
        pytest.skip(f"shared data not found at {DATA}")
    return DATA


@pytest.fixture(scope="session")
def en_tok_dir(tmp_path_factory) -> Path:
    """A 2000-piece SentencePiece model on a slice of the English corpus (a few seconds)."""
    if not CORPUS.is_dir():
        pytest.skip(f"shared corpus not found at {CORPUS}")
    from albertlm.tokenizer import train_sentencepiece

    root = tmp_path_factory.mktemp("en_tok")
    train_sentencepiece([_slice("en", root / "corpus")], root / "tok", vocab_size=2000, seed=0)
    return root / "tok"


@pytest.fixture(scope="session")
def zh_tok_dir(tmp_path_factory) -> Path:
    if not CORPUS.is_dir():
        pytest.skip(f"shared corpus not found at {CORPUS}")
    from albertlm.tokenizer import train_wordpiece

    root = tmp_path_factory.mktemp("zh_tok")
    train_wordpiece([_slice("zh", root / "corpus")], root / "tok", vocab_size=6000)
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
