"""The command line, end to end on built-in data (Typer's CliRunner, in process)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from verticalfs.cli import app

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


class TestListing:
    def test_methods_lists_registered_methods_with_parameters(self):
        res = invoke("methods")
        assert res.exit_code == 0
        for name in ("vfl", "central", "less-vfl", "group-lasso", "local-lasso"):
            assert name in res.output
        assert "embedding_dim" in res.output and "lambda_m" in res.output

    def test_datasets_lists_builtins_without_data_dir(self, monkeypatch):
        monkeypatch.delenv("VERTICALFS_DATA", raising=False)
        res = invoke("datasets")
        assert res.exit_code == 0
        assert "breast_cancer" in res.output and "madelon-synth" in res.output


class TestRun:
    def test_run_writes_documented_result(self, tmp_path):
        out = tmp_path / "r.json"
        res = invoke("run", "-m", "vfl", "-d", "breast_cancer", "-k", "3", "--noise", "0.5",
                     "-e", "2", "--seed", "1", "--no-progress", "--param", "embedding_dim=4",
                     "--out", str(out))
        assert res.exit_code == 0, res.output
        d = json.loads(out.read_text())
        for key in ("method", "dataset", "parties", "seed", "config", "metrics", "selection",
                    "communication", "history", "timings"):
            assert key in d
        assert d["method"] == "vfl" and d["seed"] == 1 and d["n_parties"] == 3
        assert d["config"]["embedding_dim"] == 4 and d["config"]["epochs"] == 2
        assert len(d["history"]) == 2
        h = d["history"][-1]
        assert {"epoch", "bytes", "accuracy", "spurious_removed"} <= set(h)
        assert h["bytes"] == d["communication"]["total_bytes"] - d["communication"]["by_phase"]["eval"] \
            - d["communication"]["by_phase"].get("report", 0)
        sel = d["selection"]
        assert sel["spurious_removed"] == 0.0  # vfl keeps every feature
        assert sum(len(p["kept"]) for p in sel["parties"].values()) == sel["n_features"]
        assert set(d["communication"]["by_direction"]) >= {"up", "down"}

    def test_unknown_method_is_an_error_listing_names(self):
        res = runner.invoke(app, ["run", "-m", "nope", "-d", "wine", "--no-progress"])
        assert res.exit_code == 2
        assert "unknown method 'nope'" in res.output and "vfl" in res.output

    def test_bad_param_names_the_parameter(self):
        res = runner.invoke(app, ["run", "-m", "vfl", "-d", "wine", "--param", "widht=3", "--no-progress"])
        assert res.exit_code == 2
        assert "widht" in res.output

    def test_per_party_noise(self, tmp_path):
        out = tmp_path / "r.json"
        res = invoke("run", "-m", "vfl", "-d", "wine", "-k", "2", "--noise", "1.0,0", "-e", "1",
                     "--no-progress", "--out", str(out))
        assert res.exit_code == 0, res.output
        d = json.loads(out.read_text())
        p1, p2 = d["selection"]["parties"]["party1"], d["selection"]["parties"]["party2"]
        assert p1["n_spurious"] == p1["n_features"] // 2 and p2["n_spurious"] == 0

    def test_user_files(self, tmp_path):
        import numpy as np
        import pandas as pd

        rng = np.random.default_rng(0)
        ids = np.arange(200)
        a = pd.DataFrame({"id": ids, "x1": rng.normal(size=200), "y": rng.integers(0, 2, 200)})
        b = pd.DataFrame({"id": ids[::-1], "x2": rng.normal(size=200), "x3": rng.normal(size=200)})
        a.to_csv(tmp_path / "a.csv", index=False)
        b.to_csv(tmp_path / "b.csv", index=False)
        out = tmp_path / "r.json"
        res = invoke("run", "-m", "vfl", "--party-file", f"bank={tmp_path / 'a.csv'}",
                     "--party-file", f"telecom={tmp_path / 'b.csv'}", "--label-party", "bank",
                     "--label-column", "y", "-e", "1", "--no-progress", "--out", str(out))
        assert res.exit_code == 0, res.output
        d = json.loads(out.read_text())
        assert d["parties"] == ["bank", "telecom"]
        assert d["selection"]["parties"]["telecom"]["kept"] == ["x2", "x3"]


class TestCompare:
    @pytest.mark.slow
    def test_compare_writes_table_json_and_plot(self, tmp_path):
        res = invoke("compare", "--dataset", "breast_cancer", "--methods", "vfl,central", "-k", "2",
                     "--noise", "0.5", "--epochs", "2", "--seeds", "0,1", "--no-progress", "--out", str(tmp_path))
        assert res.exit_code == 0, res.output
        d = json.loads((tmp_path / "results.json").read_text())
        names = [r["method"] for r in d["table"]]
        assert names == ["vfl-original", "vfl", "central"]  # noise > 0: the reference runs too
        assert all(r["runs"] == 2 for r in d["table"])
        central = next(r for r in d["table"] if r["method"] == "central")
        assert central["train_mb"] == 0
        png = (tmp_path / "accuracy_vs_mb.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temporaries


    def test_compare_marks_the_target_and_the_bytes_to_reach_it(self, tmp_path):
        """The demo's view: methods whose bytes differ, the target, each method's MB to reach it."""
        from verticalfs.compare import compare, plot_compare

        s = compare("breast_cancer", ["vfl", "feast"], parties=2, noise=0.5, epochs=2, seeds=[0])
        rows = {r["method"]: r for r in s["table"]}
        feast = s["runs"]["feast"][0]
        assert feast["target"] == pytest.approx(0.9 * s["runs"]["vfl-original"][0]["reference_best"])
        # FEAST selects before any training traffic: one point; it reaches the target if its accuracy does
        assert (rows["feast"]["mb_to_target"] is not None) == (
            feast["metric"] >= feast["target"] and feast["spurious_removed"] >= 0.8)
        assert rows["vfl"]["mb_to_target"] is None  # vfl keeps every noise feature: never reaches it
        assert set(feast["metrics"]) >= {"accuracy", "roc_auc"} and s["target_fraction"] == 0.9
        labels = []
        import matplotlib.axes

        real = matplotlib.axes.Axes.legend

        def spy(ax, *a, **kw):
            labels.extend(t for t in ax.get_legend_handles_labels()[1])
            return real(ax, *a, **kw)

        matplotlib.axes.Axes.legend = spy
        try:
            plot_compare(s, tmp_path / "p.png")
        finally:
            matplotlib.axes.Axes.legend = real
        assert any(lab.startswith("target: ") for lab in labels)
        if rows["feast"]["mb_to_target"] is not None:
            assert any(lab.startswith("feast: ") and "to target" in lab for lab in labels)


    def test_the_cross_sits_on_the_curve(self):
        """Issue 53: the demo plot put a method's cross at the target's height (on the target line),
        while its curve jumped past the target between two epochs; the cross is on the curve."""
        from verticalfs.compare import cross_point

        mb, mean = np.array([1.0, 2.0, 3.0]), np.array([0.5, 0.9, 0.95])
        assert cross_point(2.0, mb, mean) == ([2.0], [0.9])  # target 0.8: reached at 2 MB, at 0.9
        x, y = cross_point(2.5, mb, np.array([0.5, np.nan, 0.95]))  # an epoch without the metric
        assert x == [2.5] and y[0] == pytest.approx(0.5 + 0.45 * 0.75)


class TestInterruptions:
    """Ctrl-C during ``compare`` keeps every finished run on disk; ``--resume`` completes the rest."""

    ARGS = ["compare", "--methods", "vfl,group-lasso", "-d", "breast_cancer", "-k", "2", "-e", "1",
            "--seeds", "0,1", "--no-progress", "--no-reference"]

    def test_interrupt_then_resume(self, tmp_path, monkeypatch):
        import verticalfs.compare as cmp

        real_run = cmp.run
        calls = []

        def interrupted_after_first(*a, **kw):
            calls.append(a[0])
            if len(calls) == 2:
                raise KeyboardInterrupt
            return real_run(*a, **kw)

        out = tmp_path / "c"
        monkeypatch.setattr(cmp, "run", interrupted_after_first)
        res = runner.invoke(app, [*self.ARGS, "-o", str(out)])
        assert res.exit_code == 130
        assert "interrupted: group-lasso (seed 0)" in res.output and "--resume" in res.output
        done = sorted(p.name for p in (out / "runs").iterdir())
        assert done == ["config.json", "vfl__seed0.json"]  # the runs and the configuration they share
        first = (out / "runs" / "vfl__seed0.json").read_text()

        calls.clear()
        monkeypatch.setattr(cmp, "run", lambda *a, **kw: (calls.append(a[0]), real_run(*a, **kw))[1])
        res = runner.invoke(app, [*self.ARGS, "-o", str(out), "--resume"])
        assert res.exit_code == 0, res.output
        assert calls == ["group-lasso", "vfl", "group-lasso"]  # the finished run is not run again
        assert (out / "runs" / "vfl__seed0.json").read_text() == first
        summary = json.loads((out / "results.json").read_text())
        assert {r["method"]: r["runs"] for r in summary["table"]} == {"vfl": 2, "group-lasso": 2}

    def test_a_method_that_cannot_run_is_skipped_not_fatal(self, tmp_path):
        res = runner.invoke(app, ["compare", "--methods", "vfl,fate-iv", "-d", "wine", "-e", "1", "--no-progress",
                                  "-o", str(tmp_path / "c"), "-p", "fate-iv.key_bits=512", "-p", "fate-iv.insecure=true"])
        assert res.exit_code == 0, res.output
        assert "skipped" in res.output and "binary label" in " ".join(res.output.split())
        summary = json.loads((tmp_path / "c" / "results.json").read_text())
        rows = {r["method"]: r for r in summary["table"]}
        assert rows["vfl"]["runs"] == 1 and rows["fate-iv"]["runs"] == 0 and "binary" in rows["fate-iv"]["skipped"]

    def test_run_interrupted_says_so(self, monkeypatch):
        import verticalfs.api as api

        def boom(*a, **kw):
            raise KeyboardInterrupt

        monkeypatch.setattr(api, "run", boom)
        res = runner.invoke(app, ["run", "-m", "vfl", "-d", "wine", "--no-progress"])
        assert res.exit_code == 130 and "interrupted: running vfl (seed 0); nothing was written" in res.output


def test_result_files_get_normal_permissions(tmp_path):
    import os
    import stat

    from verticalfs.utils.io import write_json_atomic

    old = os.umask(0o022)
    try:
        p = write_json_atomic(tmp_path / "r.json", {"a": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE(p.stat().st_mode) == 0o644
