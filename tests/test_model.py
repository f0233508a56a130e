"""Saved models, one per kind of label-holder part: a split-trained method (``vfl``; ``sparsevfl``,
whose binary top model has one logit), ICAFS (its gated selectors) and a filter method
(``fate-iv``, a logistic regression on gathered columns), SecureBoost (its trees; the thresholds
saved at the parties), and a pipeline (its last stage's part,
the parties restored under the last stage's name). Each method saves and predicts its own
part (``Method.export_holder`` / ``predict_from_holder``); saved, loaded back from disk by fresh
parties and run on the raw test rows, the model predicts what the fitted one does, and its test
metrics are the run's."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import verticalfs
from verticalfs.data.user import load_party_files
from verticalfs.evaluation.metrics import prediction_metrics
from verticalfs.exceptions import ConfigError
from verticalfs.methods import registry
from verticalfs.model import predict

N = 240


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Two parties' files about the same customers (a categorical column, shuffled rows); the
    label at ``bank``."""
    tmp = tmp_path_factory.mktemp("model")
    rng = np.random.default_rng(3)
    ids = np.arange(500, 500 + N)
    income, age, calls = rng.normal(50, 15, N), rng.integers(18, 80, N), rng.poisson(20, N)
    plan = rng.choice(["basic", "plus", "premium"], N)
    logit = 0.08 * (income - 50) - 0.03 * (age - 50) + 0.1 * (calls - 20) - 0.8 * (plan == "premium")
    y = (logit + rng.logistic(size=N) > 0).astype(int)
    frames = {"bank": pd.DataFrame({"id": ids, "income": income.round(2), "age": age, "y": y}),
              "telecom": pd.DataFrame({"id": ids, "calls": calls, "plan": plan, "noise": rng.normal(size=N)})}
    paths = {}
    for name, df in frames.items():
        paths[name] = tmp / f"{name}.csv"
        df.sample(frac=1.0, random_state=2).to_csv(paths[name], index=False)
    vds, _ = load_party_files(paths, label_party="bank", label_column="y", id_column="id", categorical="auto")
    data = verticalfs.build_data(vds, seed=1)
    test = {}
    for name, df in frames.items():  # the test rows only, as new files (no label)
        rows = df[df["id"].astype(str).isin(data.ids["test"])].drop(columns=["y"], errors="ignore")
        test[name] = tmp / f"test_{name}.csv"
        rows.sample(frac=1.0, random_state=4).to_csv(test[name], index=False)
    return data, test


@pytest.mark.parametrize("method, kind", [("vfl", "split"), ("sparsevfl", "split"), ("icafs", "icafs"),
                                          ("fate-iv", "filter"), ("mi+vfl", "split"),
                                          ("secureboost", "secureboost")])
def test_saved_model_predicts_what_the_fitted_one_does(files, tmp_path, method, kind):
    data, test = files
    params = dict(registry.get(method).test_params) or {"mi.n_select": 3, "vfl.epochs": 3}
    res = verticalfs.run(method, data, seed=0, params=params, save_model=tmp_path / "m")
    m, fed = res.method_obj, res.federation
    holder = m.export_holder()
    assert holder["kind"] == kind
    if method == "sparsevfl":
        assert holder["two_column"]  # one logit, saved as [0, logit]
    expected = m.predict_proba(fed, "test")

    out = predict(tmp_path / "m", test)  # fresh parties restore their parts from their own files
    assert out["method"] == method
    got = pd.DataFrame(out["probabilities"], index=out["ids"]).loc[data.ids["test"]].to_numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    # and these are the run's own test predictions: the saved model's metrics are the fitted one's
    y = data.labels.y["test"]
    met = prediction_metrics(data.labels.task, y, np.log(np.clip(got, 1e-300, None)), data.labels.n_classes)
    for k in ("accuracy", "roc_auc"):
        assert met[k] == pytest.approx(m.metrics_[k], abs=1e-9), k


def test_a_party_an_earlier_stage_left_without_features_is_not_in_the_saved_model(files, tmp_path):
    """random keeps one feature, so one of the two parties keeps none and never joins vfl: it saves
    no part (it has none; asking it failed before), the manifest names it, and inference needs
    only the other party's file (a file for it is refused, naming it)."""
    import json

    data, test = files
    res = verticalfs.run("random+vfl", data, seed=0, params={"random.n_select": 1, "vfl.epochs": 2,
                                                              "vfl.hidden": (4,)}, save_model=tmp_path / "m")
    m, fed = res.method_obj, res.federation
    (left,) = m.info_["random"]["parties_left"]
    (kept,) = [p for p in data.party_names if p != left]
    man = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert list(man["parties"]) == [kept] and man["parties_left_out"] == [left]
    assert not (tmp_path / "m" / f"{left}.pt").exists()
    out = predict(tmp_path / "m", {kept: test[kept]})
    got = pd.DataFrame(out["probabilities"], index=out["ids"]).loc[data.ids["test"]].to_numpy()
    np.testing.assert_allclose(got, m.predict_proba(fed.restrict([kept]), "test"), rtol=1e-6, atol=1e-7)
    with pytest.raises(ConfigError, match=f"party '{left}' takes no part in the model.*leave its --party-file out"):
        predict(tmp_path / "m", test)


def test_the_parties_in_a_split_model_are_its_trainers(files):
    """A split-trained method's model asks the parties its top model takes embeddings from (e.g.
    less-vfl's stage 3 drops a party with no significant component from the trainer): only they
    save a part."""
    import types

    data, _ = files
    res = verticalfs.run("vfl", data, seed=0, params={"epochs": 1, "hidden": (4,)})
    m, fed = res.method_obj, res.federation
    assert m.parties_in_model(fed) == list(data.party_names)
    m.trainer_ = types.SimpleNamespace(parties=[data.party_names[-1]])
    assert m.parties_in_model(fed) == [data.party_names[-1]]
    m.trainer_ = None  # no split model (a filter's own classifier, trees): every party
    assert m.parties_in_model(fed) == list(data.party_names)


def test_a_model_that_cannot_be_saved_is_refused_before_training(files, tmp_path):
    data, _ = files
    m = registry.create("fate-iv", classifier="rf")
    assert "classifier=lr" in m.cannot_save()
    with pytest.raises(ConfigError, match="classifier=lr"):
        verticalfs.run("fate-iv", data, params={"classifier": "rf"}, save_model=tmp_path / "m")
    assert not (tmp_path / "m").exists()  # refused before anything ran or was written


def test_a_method_refuses_another_methods_saved_part(files):
    data, _ = files
    fed = verticalfs.Federation.in_process(data)
    for method, wrong in (("vfl", "icafs"), ("icafs", "split"), ("fate-iv", "split")):
        with pytest.raises(ConfigError, match=f"of kind {wrong!r}"):
            registry.get(method).predict_from_holder({"kind": wrong}, fed, "test")


@pytest.fixture(scope="module")
def saved(files, tmp_path_factory):
    data, test = files
    folder = tmp_path_factory.mktemp("saved") / "m"
    verticalfs.run("vfl", data, seed=0, params={"epochs": 1, "hidden": (8,)}, save_model=folder)
    return folder, test


def test_predict_sends_its_events(saved):
    """``predict(..., callbacks=)``: the events of a prediction (issue 49)."""
    from tests.event_stream import Lines, check_stream

    folder, test = saved
    sink = Lines()
    out = predict(folder, test, callbacks=[sink])
    events = sink.events()
    check_stream(events, method="vfl", parties=["bank", "telecom"])
    assert events[0].kind == "predict" and events[0].dataset == "m"
    assert [e.name for e in events if e.type == "phase"] == ["predict", "predict"]
    assert events[-1].bytes_total == out["communication"]["total_bytes"] > 0


def _copy_with(saved, tmp_path, entry: str, name: str):
    import json
    import shutil

    folder, _ = saved
    bad = tmp_path / "m"
    shutil.copytree(folder, bad)
    m = json.loads((bad / "manifest.json").read_text())
    (m["parties"]["telecom"] if entry == "parties.telecom" else m["label_holder"])["file"] = name
    (bad / "manifest.json").write_text(json.dumps(m))
    return bad


@pytest.mark.parametrize("entry", ["parties.telecom", "label_holder"])
def test_manifest_file_names_stay_in_the_model_folder(saved, tmp_path, entry):
    import shutil

    folder, test = saved
    outside = tmp_path / "outside.txt"
    shutil.copy(folder / ("telecom.pt" if entry.startswith("parties") else "active.pt"), outside)
    for name in ("../outside.txt", str(outside), "sub/../../outside.txt", ""):
        bad = _copy_with(saved, tmp_path / f"c{abs(hash(name))}", entry, name)
        with pytest.raises(ConfigError, match=rf"{entry}\.file.*plain names inside its folder"):
            predict(bad, test)
    # a symbolic link in the folder that leads out of it (to a file with the right checksum, even)
    bad = _copy_with(saved, tmp_path / "link", entry, "link.pt")
    (bad / "link.pt").symlink_to(outside)
    with pytest.raises(ConfigError, match=rf"{entry}\.file.*'link\.pt', a link to .*outside"):
        predict(bad, test)
    # the untouched model predicts (the checks refuse only what leaves the folder)
    assert len(predict(folder, test)["ids"]) > 0


def test_a_manifest_without_a_checksum_is_refused(saved, tmp_path):
    import json
    import shutil

    folder, test = saved
    bad = tmp_path / "m"
    shutil.copytree(folder, bad)
    m = json.loads((bad / "manifest.json").read_text())
    m["parties"]["telecom"]["sha256"] = None  # would skip the file's checksum
    (bad / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ConfigError, match=r"parties\.telecom\.sha256"):
        predict(bad, test)
