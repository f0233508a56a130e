"""The writers' benchmark on a few MB: every design writes each process's range with the right
bytes, measured on 1 and 2 processes, and the rows read back (its figures are not checked here)."""

from __future__ import annotations

import numpy as np
import pytest
import writers as bench  # benchmarks/scale/writers.py (pytest puts this folder first on sys.path)


@pytest.mark.parametrize("design", sorted(bench.DESIGNS))
def test_each_process_writes_its_range_whole(tmp_path, design):
    size, piece = 3 * bench.ROW_BYTES * 1000, bench.ROW_BYTES * 700  # (pieces that do not divide the range)
    r = bench.run(design, 2, size, piece, tmp_path, cold_wait=0)
    assert r["procs"] == 2 and r["wall"] > 0 and r["read_s"] > 0 and r["faults"] > 0
    src = bench.source(piece)
    want = np.concatenate([src] * (size // piece + 1))[:size]
    files = sorted(tmp_path.iterdir())
    got = [np.fromfile(f, dtype=np.uint8) for f in files]
    if design == "pwrite-own":
        assert len(got) == 2 and all(g.size == size and (g == want).all() for g in got)
    else:
        assert len(got) == 1 and got[0].size == 2 * size
        assert (got[0][:size] == want).all() and (got[0][size:] == want).all()


def test_main_prints_every_design_and_refuses_an_unknown_one(capsys):
    rows = bench.main(["--mb", "1", "--piece", "0.25", "--cold-wait", "0"])
    assert [(r["design"], r["procs"]) for r in rows] == [(d, p) for d in bench.DESIGNS for p in (1, 2)]
    out = capsys.readouterr().out
    assert all(label in out for label in bench.DESIGNS.values()) and out.count("throughput x") == 3
    with pytest.raises(SystemExit):
        bench.main(["--designs", "pwrite-one,mmap"])
    assert "unknown ['mmap']" in capsys.readouterr().err
