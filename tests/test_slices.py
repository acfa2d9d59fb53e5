"""The real-data slices shipped in tests/data: each folder says where it comes from, and (with ../shared
present) each file is exactly the cut that tests/data/make_slices.py makes from the full data."""

from __future__ import annotations

import importlib.util

import pytest
from shared_data import SHARED, SLICES


def _make_slices():
    spec = importlib.util.spec_from_file_location("make_slices", SLICES / "make_slices.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_slice_folder_names_its_source_and_license():
    folders = [d for kind in ("corpus", "tasks") for d in sorted((SLICES / kind).iterdir())]
    assert len(folders) >= 15
    for d in folders:
        text = (d / "SOURCE.md").read_text(encoding="utf-8")
        assert "make_slices.py" in text and "icense" in text, d


def test_slices_are_small():
    total = sum(p.stat().st_size for p in SLICES.rglob("*") if p.is_file())
    assert total < 600_000, f"tests/data holds {total:,} bytes: keep the shipped slices to a few hundred kB"


@pytest.mark.shared
def test_slices_are_the_cuts_of_the_full_data():
    make = _make_slices()
    cuts = make.cuts(SHARED)
    on_disk = {str(p.relative_to(SLICES)) for kind in ("corpus", "tasks") for p in (SLICES / kind).rglob("*")
               if p.is_file() and p.name != "SOURCE.md"}
    assert on_disk == set(cuts)
    for rel, blob in cuts.items():
        assert (SLICES / rel).read_bytes() == blob, f"{rel}: rerun python tests/data/make_slices.py"
    for folder, text in make.source_notes(SHARED).items():
        assert (SLICES / folder / "SOURCE.md").read_text(encoding="utf-8") == text, folder
