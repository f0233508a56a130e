"""Shared by the benchmark scripts' own tests (``benchmarks/*/test_*.py``; ``.ci/run`` runs them).

Each test module imports the script beside it (pytest puts a test's folder first on ``sys.path``);
the scripts' test modules have names of their own, since several folders hold a ``run.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """One torch thread, as the test suite and the scripts' workers run (tiny models, 2 cores)."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real data sets: ``$VERTICALFS_DATA`` or ``<repo>/../shared/datasets`` (skipped without)."""
    path = Path(os.environ.get("VERTICALFS_DATA") or Path(__file__).resolve().parents[2] / "shared" / "datasets")
    if not path.is_dir():
        pytest.skip(f"real data sets not found at {path}; set VERTICALFS_DATA to run these tests")
    return path
