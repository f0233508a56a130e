"""The board's runs-page benchmark runs and counts every run it wrote (no timing asserted)."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

import runs_page  # noqa: E402


def test_runs_page_benchmark_measures_every_run(tmp_path):
    m = runs_page.measure(runs_page.write_runs(tmp_path, 12), repeat=2)
    assert m["rows"] == 12 and m["page_median_ms"] > 0 and m["first_walk_ms"] > 0
