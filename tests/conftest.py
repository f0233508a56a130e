"""Fixtures shared by every test."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

# The models under test are tiny: one thread avoids thread start-up and contention costs that
# dominate their run time (4-15x faster on 2 cores).
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed_everything():
    """Seed Python's, NumPy's and torch's global generators before every test."""
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    yield


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Give `--dist loadgroup` its groups back under pytest >= 9.2.

    pytest-xdist (3.8) groups the tests marked ``xdist_group("name")`` by appending ``@name`` to
    their node ids on the workers, through the ``_nodeid`` attribute; pytest 9.2 keeps node ids in
    ``_id`` (a structured NodeId), so the suffix is lost and every grouped test is scheduled on its
    own: both workers repeat a module's shared deployment, out of order (pytest-xdist issue #1386).
    This applies the same suffix to ``_id``; where xdist already did it, nothing changes.
    """
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # pytest < 9.2: xdist's own suffix works
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if not names or not isinstance(getattr(item, "_id", None), NodeId):
            continue
        suffix = "@" + "_".join(names)
        if "]" in suffix:  # xdist reads "test[x]@group]" as ungrouped
            raise pytest.UsageError(f"{item.nodeid}: xdist_group name {suffix[1:]!r} contains ']'")
        if not item.nodeid.endswith(suffix):
            item._id = NodeId.parse(item.nodeid + suffix)
