"""The trees' benchmark at its quick size (breast cancer, 512-bit keys): it runs and its figures are
consistent (the figures themselves are claimed by the full run, not checked here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("trees_run", Path(__file__).with_name("run.py"))
trees = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(trees)


def test_quick_run_prints_every_figure(capsys):
    out = trees.main(["--quick"])
    case = out["cases"]["cancer-3"]
    run, pr = case["run"], case["protocols"]
    assert run["trees"] == 2 and run["gradient_ciphertexts"] == run["rows"]  # one row a ciphertext at 512 bits
    assert pr["unpacked"] > pr["ours"] and case["bound"]["seconds"] > 0
    assert 0.5 < run["auc"] <= 1 and 0.5 < case["xgboost"]["auc"] <= 1
    text = capsys.readouterr().out
    assert "| cancer-3 |" in text and "rates at 512 bits" in text and "load before" in text
