"""Never a silent chance-level model (issue 40, item 3): every run compares its model with chance,
warns, records it in the result, ``compare`` marks the row and ``--strict`` exits 3."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from verticalfs import build_data, run
from verticalfs.cli import app
from verticalfs.evaluation.chance import likely_causes, majority_rate, near_chance_threshold
from verticalfs.exceptions import VerticalFSWarning

runner = CliRunner()


@pytest.fixture(scope="module")
def digits():
    return build_data("digits", parties=2, seed=0)


class TestRule:
    def test_threshold_is_a_tenth_of_the_headroom_at_least_two_points(self):
        assert near_chance_threshold(0.5) == pytest.approx(0.55)
        assert near_chance_threshold(1 / 26) == pytest.approx(1 / 26 + 0.1 * (25 / 26))
        assert near_chance_threshold(0.0) == pytest.approx(0.1)  # regression: R² against 0
        assert near_chance_threshold(0.97) == pytest.approx(0.99)  # the two-point floor

    def test_majority_rate_predicts_the_training_majority(self):
        assert majority_rate(np.array([0, 0, 1]), np.array([1, 1, 0, 1])) == pytest.approx(0.25)


class TestRun:
    def test_untrained_model_warns_and_records(self, digits):
        with pytest.warns(VerticalFSWarning, match="vfl ended at or near chance.*too few epochs"):
            res = run("vfl", digits, seed=0, params={"epochs": 0})
        c = res.chance
        assert c is not None and c["metric"] == "accuracy" and c["value"] <= c["threshold"]
        assert c["chance"] == pytest.approx(majority_rate(digits.labels.y["train"], digits.labels.y[c["split"]]))
        assert c["message"] in res.warnings
        assert res.to_dict()["chance"] == c

    def test_a_trained_model_is_not_flagged(self, digits):
        res = run("vfl", digits, seed=0, params={"epochs": 8, "batch_size": 64})
        assert res.chance is None, res.chance
        assert not any("chance" in w for w in res.warnings)
        # the figure judged is the validation accuracy of the run
        assert res.metrics["accuracy"] > 0.8

    def test_regression_compares_r2_with_zero(self):
        data = build_data("friedman", parties=2, seed=0)
        res = run("vfl", data, seed=0, params={"epochs": 0})
        assert res.chance is not None and res.chance["metric"] == "r2" and res.chance["chance"] == 0.0
        assert "R²" in res.chance["message"]

    def test_a_top_model_narrower_than_the_classes_is_named(self, digits):
        res = run("vfl", digits, seed=0, params={"epochs": 1, "top_hidden": (1,)})
        causes = likely_causes(res.method_obj, n_classes=10, n_kept=res.selection["n_kept"])
        assert any("narrower (1 units) than the 10 classes" in c for c in causes)
        wide = run("vfl", digits, seed=0, params={"epochs": 1, "top_hidden": (32,)})
        assert not any("narrower" in c for c in likely_causes(wide.method_obj, n_classes=10, n_kept=10))

    def test_removing_every_feature_says_so(self, digits):
        res = run("less-vfl", digits, seed=0, params={"epochs": 3, "pretrain_epochs": 1, "batch_size": 64,
                                                       "hidden": (16, 8), "lambda_m": 100.0})
        assert res.selection["n_kept"] == 0
        assert res.chance is not None and res.chance["n_kept"] == 0
        assert "removed every feature" in res.chance["message"] and res.chance["message"] in res.warnings


class TestCommandLine:
    def test_run_warns_and_strict_exits_3(self, tmp_path):
        args = ["run", "-m", "vfl", "--dataset", "wine", "--param", "epochs=0", "--no-progress"]
        res = runner.invoke(app, [*args, "--out", str(tmp_path / "r.json")], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        assert "ended at or near chance" in " ".join(res.output.split())
        saved = json.loads((tmp_path / "r.json").read_text())
        assert saved["chance"]["value"] <= saved["chance"]["threshold"]
        assert saved["chance"]["message"] in saved["warnings"]
        strict = runner.invoke(app, [*args, "--strict", "--out", str(tmp_path / "s.json")], catch_exceptions=False)
        assert strict.exit_code == 3, strict.output
        assert (tmp_path / "s.json").is_file()  # the result is written before the exit
        fine = runner.invoke(app, ["run", "-m", "vfl", "--dataset", "wine", "-e", "30", "--no-progress", "--strict"],
                             catch_exceptions=False)
        assert fine.exit_code == 0, fine.output

    def test_compare_marks_the_row_and_strict_exits_3(self, tmp_path):
        args = ["compare", "--dataset", "wine", "--methods", "vfl,central", "--param", "vfl.epochs=0",
                "--epochs", "30", "--no-progress"]
        res = runner.invoke(app, [*args, "--out", str(tmp_path / "a")], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        rows = {r["method"]: r for r in json.loads((tmp_path / "a" / "results.json").read_text())["table"]}
        assert rows["vfl"]["at_chance"] == 1 and rows["central"]["at_chance"] == 0
        assert "vfl (chance)" in res.output and "central (chance)" not in res.output
        strict = runner.invoke(app, [*args, "--strict", "--out", str(tmp_path / "b")], catch_exceptions=False)
        assert strict.exit_code == 3, strict.output
        assert (tmp_path / "b" / "results.json").is_file()
