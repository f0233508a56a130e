"""The data checks of issue 37 below the command line: the robust scaler, id stripping, the label
look-alikes, the extreme-value and constant-party notes, and where a bad byte is."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from sklearn.preprocessing import RobustScaler

from verticalfs.data.preprocess import PartyPreprocessor
from verticalfs.data.user import _bad_byte, label_lookalikes, load_party_files, strip_ids
from verticalfs.data.vertical import PartyData
from verticalfs.exceptions import DataError


def test_robust_scaling_is_scikit_learns_robust_scaler():
    rng = np.random.default_rng(0)
    train = pd.DataFrame({"a": rng.normal(3, 2, 200), "b": rng.lognormal(0, 2, 200), "c": np.r_[np.zeros(180), np.ones(20)]})
    train.loc[:4, "a"] = 1e9
    new = pd.DataFrame({"a": rng.normal(3, 2, 30), "b": rng.lognormal(0, 2, 30), "c": np.ones(30)})
    pp = PartyPreprocessor.fit("p", train, [], scaling="robust")
    sk = RobustScaler().fit(train.to_numpy())
    np.testing.assert_allclose(pp.transform(new), sk.transform(new.to_numpy()).astype(np.float32), rtol=1e-6)
    assert pp.scale[2] == 1.0  # an interquartile range of 0 scales by 1, as scikit-learn does
    again = PartyPreprocessor.from_dict(pp.to_dict())  # saved with a model
    np.testing.assert_array_equal(again.transform(new), pp.transform(new))
    assert np.median(pp.transform(train)[5:, 0]) == pytest.approx(0, abs=0.1)  # the bulk is not squashed


def test_extreme_values_are_noted_only_under_minmax_and_not_for_heavy_tails():
    rng = np.random.default_rng(1)
    X = pd.DataFrame({"spiky": np.r_[rng.normal(2, 1, 95), np.full(5, 1e300)],
                      "lognormal": rng.lognormal(0, 1.5, 100), "sparse": np.r_[np.zeros(90), rng.normal(1e6, 1, 10)]})
    notes = PartyPreprocessor.fit("p", X, [], scaling="minmax").warnings
    assert len(notes) == 1 and "'spiky'" in notes[0]
    assert PartyPreprocessor.fit("p", X[["lognormal", "sparse"]], [], scaling="standard").warnings == []


def test_a_constant_party_is_noted_but_one_informative_column_is_enough():
    X = pd.DataFrame({"a": np.full(20, 3.0), "b": ["x"] * 20})
    assert "no informative column" in PartyPreprocessor.fit("p", X, ["b"]).warnings[0]
    X["b"] = ["x", "y"] * 10
    assert PartyPreprocessor.fit("p", X, ["b"]).warnings == []


def test_strip_ids():
    got = strip_ids(np.array([" 7", "007 ", "0", "000", "A007", " a b ", "-07", "12"]))
    assert got.tolist() == ["7", "7", "0", "0", "A007", "a b", "-07", "12"]


def test_strip_ids_refuses_ids_that_become_duplicates(tmp_path):
    pd.DataFrame({"id": ["7", "007"], "y": [0, 1], "x": [1.0, 2.0]}).to_csv(tmp_path / "a.csv", index=False)
    with pytest.raises(DataError, match="duplicated ids"):
        load_party_files({"a": tmp_path / "a.csv"}, label_party="a", label_column="y", strip_ids=True)


def test_label_lookalikes_for_a_regression_target():
    y = pd.Series(np.linspace(0, 1, 50))
    aligned = {"bank": pd.DataFrame({"y": y, "x": np.arange(50.0)}),
               "shop": pd.DataFrame({"copy": y.to_numpy(), "noise": y.to_numpy() + 1e-9})}
    files = {"bank": Path("bank.csv"), "shop": Path("shop.csv")}
    notes = label_lookalikes(aligned, {"bank": ["x"], "shop": ["copy", "noise"]}, "bank", "y", files, classes=False)
    assert len(notes) == 1 and "'copy'" in notes[0] and "holds the label 'y'" in notes[0]


def test_a_deployed_party_serving_a_column_named_like_the_label_is_noted():
    from verticalfs.deploy.holder import _named_like_label

    dep = SimpleNamespace(label_column="default", label_party="bank", path=Path("deployment.toml"))
    parties = [PartyData("bank", ["income"], {}), PartyData("shop", ["DEFAULT", "plan=a", "plan=b"], {},
                                                            sources=["DEFAULT", "plan", "plan"])]
    notes = _named_like_label(parties, dep)
    assert len(notes) == 1 and "party 'shop' serves a column 'DEFAULT'" in notes[0]


def test_the_first_bad_byte_is_found_across_read_chunks(tmp_path):
    n = 1 << 20
    head = (b"a" * 99 + b"\n") * (n // 100)
    head += b"b" * (n - 1 - len(head))  # a two-byte character split by the first chunk's end
    data = head + b"\xc3\xa9xyz\n" + b"ok\n" + b"q\xffr\n"
    (tmp_path / "f.csv").write_bytes(data)
    msg = str(_bad_byte("p", tmp_path / "f.csv", "utf-8", 1 << 30))
    pos = data.index(b"\xff")
    line = data[:pos].count(b"\n") + 1
    assert f"line {line}, column 2 (byte offset {pos})" in msg


# ------------------------------------------------------------------ dates and times (issue 53)
def _dated(tmp_path, n=200):
    rng = np.random.default_rng(0)
    when = pd.date_range("2018-01-01", periods=n, freq="4D")
    a = pd.DataFrame({"id": np.arange(n), "x": rng.normal(size=n), "when": when.strftime("%d/%m/%Y"),
                      "y": (when.month > 6).astype(int)})
    b = pd.DataFrame({"id": np.arange(n), "z": rng.normal(size=n)})
    a.to_csv(tmp_path / "a.csv", index=False)
    b.to_csv(tmp_path / "b.csv", index=False)
    return {"a": tmp_path / "a.csv", "b": tmp_path / "b.csv"}, when


def test_date_columns_are_found_and_not_mistaken():
    from verticalfs.data.preprocess import datetime_columns

    df = pd.DataFrame({"iso": ["2021-03-04", "2022-11-30"] * 50, "dmy": ["03/04/2021", "30/11/2022"] * 50,
                       "stamp": pd.to_datetime(["2021-03-04 10:00", "2021-03-05 11:30"] * 50),
                       "plan": ["gold", "basic"] * 50, "code": ["A-12", "B-7"] * 50, "num": [1.5, 2.0] * 50,
                       "year": [2021, 2022] * 50, "ratio": ["3-4", "5-6"] * 50})
    assert datetime_columns(df, list(df.columns)) == {"iso": "ISO8601", "dmy": "%d/%m/%Y", "stamp": ""}


def test_dates_are_refused_dropped_or_derived_and_a_saved_model_derives_them(tmp_path):
    from verticalfs.data.preprocess import PartyPreprocessor
    from verticalfs.data.vertical import prepare_block

    files, when = _dated(tmp_path)
    kw = dict(id_column="id", label_party="a", label_column="y", categorical="auto")
    with pytest.raises(DataError, match=r"column 'when' in .*a\.csv' holds dates or times \(when: 200 distinct "
                                        r"values\).*--datetime derive.*--datetime drop"):
        load_party_files(files, **kw)
    vds, _ = load_party_files(files, datetime="drop", **kw)
    assert list(vds.blocks[0].X.columns) == ["x"]
    vds, _ = load_party_files(files, datetime="derive", **kw)
    block = vds.blocks[0]
    assert list(block.X.columns) == ["x", "when_year", "when_month", "when_day"] and list(block.dates) == ["when"]
    assert block.X["when_month"].tolist() == when.month.astype(float).tolist()
    idx = {"train": np.arange(150), "val": np.arange(150, 170), "test": np.arange(170, 200)}
    part = prepare_block(block, idx, scaling="minmax")
    pp = part.preprocessor
    assert pp.sources == ["x", "when", "when", "when"] and pp.dates == {"when": "%d/%m/%Y"}  # the selection is reported by the user's column
    again = PartyPreprocessor.from_dict(pp.to_dict())  # saved with a model
    raw = pd.read_csv(files["a"]).drop(columns=["id", "y"]).iloc[170:]  # new rows hold the date itself
    np.testing.assert_array_equal(again.transform(raw), part.X["test"])


def test_a_deployed_party_refuses_or_derives_its_dates(tmp_path):
    from verticalfs.deploy.party import DeployedParty

    files, _ = _dated(tmp_path)
    with pytest.raises(DataError, match=r"column 'when' .*holds dates or times"):
        DeployedParty("a", files["a"], label_column="y")
    with pytest.raises(DataError, match=r"column 'when' .*holds dates or times"):
        DeployedParty("a", files["a"], label_column="y", stream=True)
    with pytest.raises(DataError, match=r"read in pieces .*cannot be derived"):
        DeployedParty("a", files["a"], label_column="y", stream=True, datetime="derive")
    assert DeployedParty("a", files["a"], label_column="y", stream=True, datetime="drop").columns == ["x"]
    assert DeployedParty("a", files["a"], label_column="y", datetime="derive").columns == [
        "x", "when_year", "when_month", "when_day"]


# ------------------------------------------------------- extreme magnitudes (issue 53)
def test_a_column_collapsed_by_its_scaling_is_named_and_quantile_scaling_keeps_it():
    """Half of a column at 1e300: min-max and robust scaling made the other half one number,
    without a word (the min-max note looks at the middle half, which 1e300 then spans)."""
    rng = np.random.default_rng(0)
    bulk = rng.normal(50, 10, 100)
    X = pd.DataFrame({"spiky": np.r_[bulk[:50], np.full(50, 1e300)], "fine": bulk})
    for scaling in ("minmax", "robust"):
        notes = PartyPreprocessor.fit("p", X, [], scaling=scaling).warnings
        assert len(notes) == 1 and "column 'spiky'" in notes[0] and f"under {scaling} scaling its 51 distinct" in notes[0]
        assert "--scaling quantile" in notes[0]
    pp = PartyPreprocessor.fit("p", X, [], scaling="quantile")
    assert pp.warnings == []
    T = pp.transform(X)
    assert len(np.unique(T[:50, 0])) == 50 and T.min() >= 0 and T.max() <= 1  # the bulk stays apart
    few = pd.DataFrame({"x": np.r_[bulk[:95], np.full(5, 1e300)]})
    with pytest.raises(DataError, match="--scaling quantile"):  # robust keeps 1e300 / IQR: beyond float32
        PartyPreprocessor.fit("p", few, [], scaling="robust").transform(few)
    assert len(np.unique(PartyPreprocessor.fit("p", few, [], scaling="quantile").transform(few))) >= 90


def test_quantile_scaling_is_scikit_learns_quantile_transformer():
    from sklearn.preprocessing import QuantileTransformer

    rng = np.random.default_rng(2)
    train = pd.DataFrame({"a": rng.normal(3, 2, 300), "b": rng.lognormal(0, 2, 300), "c": rng.integers(0, 4, 300)})
    new = pd.DataFrame({"a": rng.normal(3, 4, 40), "b": rng.lognormal(0, 3, 40), "c": rng.integers(-1, 6, 40)})
    pp = PartyPreprocessor.fit("p", train, [], scaling="quantile")
    sk = QuantileTransformer(n_quantiles=300).fit(train.to_numpy())
    np.testing.assert_allclose(pp.transform(new), sk.transform(new.to_numpy()).astype(np.float32), atol=1e-6)
    again = PartyPreprocessor.from_dict(pp.to_dict())  # saved with a model
    np.testing.assert_array_equal(again.transform(new), pp.transform(new))
    sub, pos = pp.subset(["b"])
    np.testing.assert_array_equal(sub.transform(new[["b"]]), pp.transform(new)[:, pos])


def test_a_deployed_party_says_its_data_notes_on_its_own_log(tmp_path, caplog):
    import logging

    from verticalfs.deploy.party import DeployedParty

    rng = np.random.default_rng(0)
    n = 120
    pd.DataFrame({"id": np.arange(n), "spiky": np.r_[rng.normal(size=60), np.full(60, 1e300)]}).to_csv(
        tmp_path / "p.csv", index=False)
    party = DeployedParty("p", tmp_path / "p.csv")
    from verticalfs.deploy.party import Align

    codes = np.r_[np.zeros(100, dtype=np.int64), np.ones(10, dtype=np.int64), np.full(10, 2, dtype=np.int64)]
    with caplog.at_level(logging.WARNING, logger="verticalfs.data"):
        party._align(Align(ids=np.asarray([str(i) for i in range(n)]), split=codes, scaling="minmax",
                           impute="none"))
    assert any("column 'spiky'" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
