"""The trees' benchmark at its quick size (breast cancer, 512-bit keys): it runs and its figures are
consistent (the figures themselves are claimed by the full run, not checked here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

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
    pb = case["packing_bound"]  # the bound's count at the run's m is the run's own count
    m = run["layout"]["rows_per_ciphertext"]
    assert pb["ciphertexts_by_m"][m] == pytest.approx(run["gradient_ciphertexts"] + run["returned_ciphertexts"])
    assert pb["best_ratio"] >= pr["unpacked"] / pr["ours"] - 1e-9 and pb["best_m"] in pb["ciphertexts_by_m"]
    text = capsys.readouterr().out
    assert "| cancer-3 |" in text and "rates at 512 bits" in text and "load before" in text
    assert "best m=" in text


def test_min_ciphertexts_runs_with_the_m_of_fewest_ciphertexts():
    out = trees.main(["--quick", "--min-ciphertexts"])
    case = out["cases"]["cancer-3"]
    run, pb = case["run"], case["packing_bound"]
    assert run["packing"] == "ciphertexts"
    m = run["layout"]["rows_per_ciphertext"]
    assert pb["ciphertexts_by_m"][m] == min(pb["ciphertexts_by_m"].values())
