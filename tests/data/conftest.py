"""Fixtures shared by the data tests: where the real benchmark data sets live."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA_DIR = REPO.parent / "shared" / "datasets"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """Folder holding the real data sets: ``$VERTICALFS_DATA`` or ``<repo>/../shared/datasets``.

    Tests that use it are skipped when the folder does not exist.
    """
    path = Path(os.environ.get("VERTICALFS_DATA") or DEFAULT_DATA_DIR)
    if not path.is_dir():
        pytest.skip(f"real data sets not found at {path}; set VERTICALFS_DATA to run these tests")
    return path
