"""Where the tests find real data.

The default tier reads the small slices shipped in ``tests/data`` (cut from the full data by
``tests/data/make_slices.py``; sources and licenses in each folder's SOURCE.md), so a clone alone runs it.
Tests of the full datasets carry ``@pytest.mark.shared``: they read ``../shared`` beside the repository
(the project's machines and CI have it), run with ``python -m pytest -m shared``, and fail without it.
"""

from __future__ import annotations

from pathlib import Path

SLICES = Path(__file__).resolve().parent / "data"
CORPUS = SLICES / "corpus"  # en/, zh/: one sentence per line, a blank line between documents
DATA = SLICES / "tasks"  # the task folders, laid out as in shared/data

SHARED = Path(__file__).resolve().parents[2] / "shared"
SHARED_CORPUS = SHARED / "corpus"
SHARED_DATA = SHARED / "data"


def corpus_slice(lang: str, name: str, n_bytes: int, dest: Path, corpus: Path = CORPUS) -> Path:
    """The first documents of a corpus file, cut at a document boundary."""
    raw = (corpus / lang / name).read_bytes()[:n_bytes]
    dest.write_bytes(raw[: raw.rfind(b"\n\n") + 2])
    return dest


def docstring_corpus(dest: Path, documents: int) -> Path:
    """The first ``documents`` stdlib docstrings of two or more sentences (the demo's corpus, which every
    Python has) written in the pretraining format: one sentence per line, a blank line between documents."""
    import itertools

    from albertlm.data.demo import _sentences, stdlib_docstrings

    docs = (s for s in map(_sentences, stdlib_docstrings()) if len(s) >= 2)
    dest.write_text("".join("\n".join(d) + "\n\n" for d in itertools.islice(docs, documents)))
    return dest
