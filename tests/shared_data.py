"""Where the tests find ../shared beside the repository, and how they cut small slices of it."""

from __future__ import annotations

from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared"
CORPUS = SHARED / "corpus"
DATA = SHARED / "data"


def corpus_slice(lang: str, name: str, n_bytes: int, dest: Path) -> Path:
    """The first documents of a corpus file, cut at a document boundary."""
    raw = (CORPUS / lang / name).read_bytes()[:n_bytes]
    dest.write_bytes(raw[: raw.rfind(b"\n\n") + 2])
    return dest
