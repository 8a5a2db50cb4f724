"""Shared fixtures: the corpus of real files in ../shared/corpus (skipped with a reason when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("REFSET_SHARED", REPO.parent / "shared"))
CORPUS = SHARED / "corpus"


@pytest.fixture(scope="session")
def corpus() -> Path:
    """Directory of real NetCDF/HDF5 files and reference sets from other projects."""
    if not (CORPUS / "MANIFEST.md").exists():
        pytest.skip(f"shared corpus not found at {CORPUS} (CI provides it; a user's clone does not)")
    return CORPUS


@pytest.fixture(scope="session")
def shared_bench() -> Path:
    """../shared/bench: scripts that make benchmark corpora."""
    d = SHARED / "bench"
    if not (d / "synth_refs.py").exists():
        pytest.skip(f"shared bench scripts not found at {d}")
    return d
