"""The ray engine's benchmark on a tiny table: every stage measured on 1 and 2 Ray workers, the
speedups, slopes and the labelled 100M projection printed (its figures are not checked here)."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")
pytest.importorskip("rbcl")

# benchmarks/scale/ray_engine.py by its own name (pytest puts this folder first on sys.path): its
# configurations run in spawned processes, which import it by that name
import ray_engine as bench  # noqa: E402


@pytest.mark.slow
def test_every_stage_on_one_and_two_workers(capsys):
    rows = bench.main(["--sizes", "1500,3000", "--columns", "3", "--files", "2", "--chunk", "500",
                       "--full-psi", "2000"])
    psi = rows.pop(0)["full_psi"]  # the whole PSI first, both sides, half the ids shared
    assert psi["n"] == 2000 and psi["correct"] and psi["seconds"] > 0
    assert [(r["rows"], r["workers"]) for r in rows] == [(1500, 1), (1500, 2), (3000, 1), (3000, 2)]
    assert all(set(r["stages"]) == set(bench.STAGES) and all(v > 0 for v in r["stages"].values()) for r in rows)
    assert all(r["peak_rss_mb"] > 100 for r in rows)
    out = capsys.readouterr().out
    assert "whole PSI, both sides" in out
    assert out.count("speedup 1 -> 2 workers") == 2 and "PROJECTION" in out and "not measured" in out


def test_generated_tables_are_seeded_folders_of_parquet_files(tmp_path):
    import pandas as pd

    a = bench.generate(tmp_path / "a", 1000, columns=2, files=3)
    b = bench.generate(tmp_path / "b", 1000, columns=2, files=3)
    assert len(list(a.glob("*.parquet"))) == 3
    fa, fb = pd.read_parquet(a), pd.read_parquet(b)
    assert fa.equals(fb) and sorted(fa["id"]) == sorted(f"c{i}" for i in range(1000))
