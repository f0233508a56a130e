"""The PSI scaling benchmark on tiny sets: each engine installed runs across two processes,
finds exactly the shared half, and the report prints its seconds, ids/s, RSS and goals."""

from __future__ import annotations

import psi as bench  # benchmarks/scale/psi.py (pytest puts this folder first on sys.path)
import pytest


def test_both_engines_run_and_report(capsys):
    from verticalfs.psi import installed

    engines = [e for e in ("ristretto255", "openmined") if installed(e)]
    if not engines:
        pytest.skip("no PSI engine installed (pip install 'verticalfs[deploy]')")
    rows = bench.main(["--sizes", "1200", "--engines", ",".join(engines), "--chunk", "500", "--no-ops"])
    measured = [r for r in rows if "correct" in r]
    assert len(measured) == len(engines) and all(r["correct"] and r["found"] == r["n"] - r["n"] // 2
                                                     for r in measured)
    assert all(r["party"]["peak_mb"] > 0 and r["peak_mb"] > 0 for r in measured)
    guessed = [r for r in rows if r.get("extrapolated")]
    assert [r["n"] for r in guessed] == [10_000_000] * len(engines)
    out = capsys.readouterr().out
    assert out.count("(extrapolated)") == len(engines) and "goal <=   900 s" in out
    if "ristretto255" in engines:  # 1,200 ids in chunks of 500: an open and 3 rounds, a reply each
        r = next(r for r in measured if r["engine"] == "ristretto255" and r["n"] == 1200)
        assert r["messages"] == 8 and r["mb"] * 1e6 > 2 * 1200 * 32


def test_per_operation_costs():
    pytest.importorskip("rbcl")
    ops = bench.per_op(200)
    assert set(ops) >= {"hash_to_group_per_s", "scalarmult_per_s", "scalarmult_per_s_2_threads",
                        "scalarmult_per_s_2_processes"}
    assert all(v > 0 for v in ops.values())
