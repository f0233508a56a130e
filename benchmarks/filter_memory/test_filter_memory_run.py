"""benchmarks/filter_memory/run.py on a small table: every method runs and prints its memory."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("filter_memory_run", Path(__file__).with_name("run.py"))
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_every_method_prints_its_peak(tmp_path, capsys):
    run.main(["--rows", "20000", "--cols", "6", "--dir", str(tmp_path), "--label", "smoke"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("# smoke: 20000 rows x 6 columns")
    rows = {line.split()[0]: line for line in out[2:]}
    assert set(rows) == set(run.METHODS)
    assert not any("failed" in line for line in rows.values()), out
    assert list(tmp_path.iterdir()) == []  # the table's file is removed
