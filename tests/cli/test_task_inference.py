"""``verticalfs run`` infers the task of integer labels as scikit-learn's ``type_of_target`` does
when the classes have many rows each, and asks only when the label is genuinely ambiguous
(issue 40, item 4)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.utils.multiclass import type_of_target
from typer.testing import CliRunner

from verticalfs.cli import app

runner = CliRunner()


def files(tmp, y: np.ndarray) -> list[str]:
    rng = np.random.default_rng(0)
    n = len(y)
    ids = np.arange(n)
    x = rng.normal(size=(n, 4)) + (y % 7)[:, None] * 0.5
    a = pd.DataFrame({"id": ids, "a0": x[:, 0], "a1": x[:, 1], "letter": y})
    b = pd.DataFrame({"id": ids, "b0": x[:, 2], "b1": x[:, 3]})
    a.to_csv(tmp / "a.csv", index=False)
    b.to_csv(tmp / "b.csv", index=False)
    return ["--party-file", f"a={tmp / 'a.csv'}", "--party-file", f"b={tmp / 'b.csv'}", "--id-column", "id",
            "--label-party", "a", "--label-column", "letter"]


def test_26_integer_classes_need_no_task(tmp_path):
    y = np.tile(np.arange(1, 27), 60)  # 26 letters over 1,560 rows, 60 a class
    assert type_of_target(y) == "multiclass"
    res = runner.invoke(app, ["run", "-m", "vfl", "-e", "1", "--no-progress", *files(tmp_path, y)],
                        catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "labels are ambiguous" not in res.output and "--task" not in res.output


def test_1000_integers_over_2000_rows_still_ask(tmp_path):
    y = np.tile(np.arange(1000), 2)  # 2 rows a value: classes or a count?
    res = runner.invoke(app, ["run", "-m", "vfl", "-e", "1", "--no-progress", *files(tmp_path, y)],
                        catch_exceptions=False)
    assert res.exit_code == 2
    flat = " ".join(res.output.split())
    assert "1000 distinct integer values over 2000 rows" in flat and "--task" in flat
    ok = runner.invoke(app, ["run", "-m", "vfl", "-e", "1", "--no-progress", "--task", "regression",
                             *files(tmp_path, y)], catch_exceptions=False)
    assert ok.exit_code == 0, ok.output
