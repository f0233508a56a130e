"""``n_select="auto"``, the filters' default since issue 53: the label holder chooses N on its
validation rows over a small grid, the search on the ledger and in the result."""

from __future__ import annotations

import pytest

import verticalfs
from verticalfs.exceptions import ConfigError
from verticalfs.federation import Federation
from verticalfs.methods import create
from verticalfs.methods.filter import AUTO, auto_grid


@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=3, noise=0.5, seed=0)  # 45 features, 15 noise


def test_the_grid_halves_from_half_of_the_features():
    assert auto_grid(1) == [1]
    assert auto_grid(2) == [1]
    assert auto_grid(5) == [2, 3]
    assert auto_grid(45) == [2, 3, 6, 12, 23]
    assert auto_grid(1536) == [2, 3, 6, 12, 24, 48, 96, 192, 384, 768]


def test_mi_chooses_the_smallest_n_within_tol_of_the_best(data):
    fed = Federation.in_process(data)
    m = create("mi", seed=0, auto_cv_below=0).fit(fed)  # the validation rows themselves (57 here)
    a = m.info_["auto"]
    assert a["grid"] == auto_grid(45) and a["metric"] == "accuracy" and a["selection_runs"] == 1
    scores = dict(zip(a["grid"], a["val_scores"], strict=True))
    assert a["chosen"] == min(n for n in a["grid"] if scores[n] >= max(scores.values()) - a["tol"])
    assert m.info_["n_select"] == a["chosen"] == len(m.selected_)
    assert m.params.n_select == AUTO  # as asked; the choice is the result's
    # the search is on the ledger: the gathered candidates' columns of the training and validation rows
    gathered = [r for r in fed.ledger.records() if r.kind == "Columns"]
    rows = {s: len(data.labels.y[s]) for s in ("train", "val", "test")}
    assert a["search_gather_bytes"] >= 4 * max(a["grid"]) * (rows["train"] + rows["val"])
    assert sum(r.payload for r in gathered) == 4 * (max(a["grid"]) * (rows["train"] + rows["val"])
                                                    + a["chosen"] * sum(rows.values()))  # float32 columns
    # the choice's accuracy on the validation rows is the one reported for it
    assert m.history_[-1]["val_accuracy"] == pytest.approx(scores[a["chosen"]])


def test_feast_selects_once_per_n_and_an_explicit_n_is_the_papers_setting(data):
    auto = create("feast", seed=0).fit(Federation.in_process(data))
    assert auto.info_["auto"]["selection_runs"] == len(auto_grid(45))
    fixed = create("feast", seed=0, n_select=7).fit(Federation.in_process(data))
    assert "auto" not in fixed.info_ and len(fixed.selected_) == 7
    again = create("feast", seed=0, n_select=auto.info_["n_select"]).fit(Federation.in_process(data))
    assert again.selected_ == auto.selected_  # the chosen N's own FEAST run


def test_without_validation_rows_a_fifth_of_the_training_rows_is_held_out():
    d = verticalfs.build_data("breast_cancer", parties=2, seed=0, val_size=0.0)
    m = create("sffs", seed=0, secure=False).fit(Federation.in_process(d))
    assert m.info_["auto"]["held_out_train"] is True and 1 <= m.info_["n_select"] <= 15


def test_bad_values_are_refused(data):
    fed = Federation.in_process(data)
    with pytest.raises(ConfigError, match=r"^mi: n_select must be a whole number >= 1 or one of 'auto', got 'abc'"):
        create("mi", n_select="abc").fit(fed)
    with pytest.raises(ConfigError, match=r"^mi: n_select must be a whole number >= 1 or one of 'auto', got 0"):
        create("mi", n_select=0).fit(fed)
    with pytest.raises(ConfigError, match=r"^mi: auto_tol must be a finite number >= 0 and < 1, got 1.5"):
        create("mi", auto_tol=1.5).fit(fed)
    with pytest.raises(ConfigError, match=r"give n_select=5 or ratio=0.25, not both"):
        create("ms-gini", secure=False, n_select=5, ratio=0.25).fit(fed)
    m = create("mi", n_select="12").fit(Federation.in_process(data))  # --param n_select=12
    assert len(m.selected_) == 12


def test_the_ratio_keeps_the_papers_half(data):
    m = create("ms-gini", seed=0, secure=False, ratio=0.5).fit(Federation.in_process(data))
    assert len(m.selected_) == round(0.5 * 45) and "auto" not in m.info_


def test_a_pipeline_stage_chooses_n_and_a_deployment_keeping_columns_asks_for_it(data, tmp_path):
    res = verticalfs.run("mi+vfl", data, seed=0, params={"vfl.epochs": 1})
    assert res.info["mi"]["n_select"] in auto_grid(45)
    assert res.selection["n_kept"] == res.info["mi"]["n_select"]
    from types import SimpleNamespace

    from verticalfs.deploy.holder import federated_method

    dep = SimpleNamespace(parties={}, label_party="bank")
    with pytest.raises(ConfigError, match=r"mi: n_select='auto' .* telecom keep\(s\) \(release_columns = false\); "
                                          r"give the number of features to select \(--param n_select=N\)"):
        federated_method(dep, "mi", None, keeping=["telecom"])
    assert federated_method(dep, "mi", {"n_select": 5}, keeping=["telecom"])[0] == "mi+vfl"


def test_the_cli_reports_the_choice(tmp_path):
    from typer.testing import CliRunner

    from verticalfs.cli import app

    res = CliRunner().invoke(app, ["run", "-m", "mi", "-d", "breast_cancer", "--noise", "0.5", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert any(line.split()[1:2] == ["n_select"] and line.split()[-2].isdigit() for line in res.output.splitlines()
               if "n_select" in line), res.output


def test_a_small_validation_split_is_replaced_by_cross_validation():
    """Wine's 18 validation rows scored every N of the grid at 100 %, so the smallest, 2, was kept
    (.833 on the test rows where 10 features reach .972; issue 53). Below auto_cv_below validation
    rows each N is scored by 5-fold cross-validation over the training and validation rows."""
    from verticalfs.methods.filter import _cv_folds

    wine = verticalfs.build_data("wine", parties=3, noise=0.5, seed=0)
    assert len(wine.labels.y["val"]) == 18
    before = create("mi", seed=0, auto_cv_below=0).fit(Federation.in_process(wine))
    after = create("mi", seed=0).fit(Federation.in_process(wine))
    assert before.info_["auto"]["cv_folds"] == 0 and set(before.info_["auto"]["val_scores"]) == {1.0}
    assert before.info_["auto"]["chosen"] == 2
    a = after.info_["auto"]
    assert a["cv_folds"] == 5 and a["chosen"] > 2 and len(set(a["val_scores"])) > 1
    assert after.metrics_["accuracy"] > before.metrics_["accuracy"]
    # the folds: every row of train + val tested once, stratified, seeded
    y = list(wine.labels.y["train"]) + list(wine.labels.y["val"])
    folds = _cv_folds(__import__("numpy").asarray(y), "multiclass", 0)
    tested = sorted(int(i) for _, b in folds for i in b)
    assert tested == list(range(len(y))) and len(folds) == 5
