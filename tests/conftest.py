"""Fixtures shared by every test."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_everything():
    """Seed Python's, NumPy's and torch's global generators before every test."""
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    yield
