"""A user's own per-party files: alignment by id, task inference and every bad-input error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from verticalfs.data.user import AlignmentReport, load_party_files
from verticalfs.data.vertical import VerticalDataset
from verticalfs.exceptions import DataError

COMMON = np.arange(5, 18)  # ids present in all three files below


def write(path: Path, df: pd.DataFrame) -> Path:
    """Write ``df`` as CSV or Parquet according to the file suffix."""
    if path.name.endswith((".parquet", ".pq")):
        df.to_parquet(path, index=False)
    else:
        df.to_csv(path, index=False)  # .csv.gz is compressed by pandas from the suffix
    return path


def bank_frame(rng: np.random.Generator) -> pd.DataFrame:
    ids = rng.permutation(np.arange(0, 20))  # label party, rows in random order
    return pd.DataFrame(
        {"id": ids, "default": np.where(ids % 3 == 0, "yes", "no"), "income": ids * 1.5}
    )


def shop_frame(rng: np.random.Generator) -> pd.DataFrame:
    ids = rng.permutation(np.arange(5, 25))
    return pd.DataFrame(
        {"id": ids, "spend": ids * 2.0, "segment": np.where(ids % 2 == 0, "gold", "silver")}
    )


def telecom_frame(rng: np.random.Generator) -> pd.DataFrame:
    ids = rng.permutation(np.r_[np.arange(3, 18), 100])
    return pd.DataFrame({"id": ids, "calls": ids + 100})


@pytest.fixture
def frames() -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(0)
    return {"bank": bank_frame(rng), "shop": shop_frame(rng), "telecom": telecom_frame(rng)}


@pytest.fixture
def csv_files(tmp_path, frames) -> dict[str, Path]:
    return {p: write(tmp_path / f"{p}.csv", df) for p, df in frames.items()}


@pytest.fixture
def good_kwargs() -> dict:
    return dict(label_party="bank", label_column="default", categorical={"shop": ["segment"]})


class TestGoodFiles:
    def test_three_csv_parties(self, csv_files, good_kwargs):
        vds, report = load_party_files(csv_files, **good_kwargs)
        assert isinstance(vds, VerticalDataset)
        assert vds.party_names == ["bank", "shop", "telecom"]
        np.testing.assert_array_equal(vds.ids, COMMON.astype(str))  # inner join, ordered by id (read as text)
        # labels follow the ids
        assert vds.task == "binary"
        assert vds.class_names == ["no", "yes"]
        np.testing.assert_array_equal(vds.y, (COMMON % 3 == 0).astype(int))
        # features follow the ids
        np.testing.assert_allclose(vds.block("bank").X["income"], COMMON * 1.5)
        np.testing.assert_allclose(vds.block("shop").X["spend"], COMMON * 2.0)
        np.testing.assert_allclose(vds.block("telecom").X["calls"], COMMON + 100)
        assert vds.block("bank").feature_names == ["income"]  # the label is not a feature
        assert vds.block("shop").categorical == ["segment"]
        assert list(vds.block("shop").X["segment"]) == ["gold" if i % 2 == 0 else "silver" for i in COMMON]

    def test_report_counts(self, csv_files, good_kwargs):
        _, report = load_party_files(csv_files, **good_kwargs)
        assert isinstance(report, AlignmentReport)
        assert report.n_aligned == len(COMMON)
        assert report.rows_in_file == {"bank": 20, "shop": 20, "telecom": 16}
        assert report.rows_kept == {"bank": 13, "shop": 13, "telecom": 13}
        assert report.rows_lost == {"bank": 7, "shop": 7, "telecom": 3}
        text = report.summary()
        for party, path in csv_files.items():
            assert party in text and str(path) in text
        assert "13" in text and str(report) == text

    def test_parquet_and_gzip_files(self, tmp_path, frames, good_kwargs):
        files = {
            "bank": write(tmp_path / "bank.csv.gz", frames["bank"]),
            "shop": write(tmp_path / "shop.parquet", frames["shop"]),
            "telecom": write(tmp_path / "telecom.pq", frames["telecom"]),
        }
        vds, report = load_party_files(files, **good_kwargs)
        np.testing.assert_array_equal(vds.ids, COMMON.astype(str))
        np.testing.assert_allclose(vds.block("shop").X["spend"], COMMON * 2.0)
        np.testing.assert_array_equal(vds.y, (COMMON % 3 == 0).astype(int))
        assert report.rows_lost == {"bank": 7, "shop": 7, "telecom": 3}

    def test_label_only_file_gives_no_block(self, tmp_path, frames, good_kwargs):
        files = {
            "bank": write(tmp_path / "bank.csv", frames["bank"][["id", "default"]]),
            "shop": write(tmp_path / "shop.csv", frames["shop"]),
        }
        vds, report = load_party_files(files, **good_kwargs)
        assert vds.party_names == ["shop"]
        np.testing.assert_array_equal(vds.ids, np.arange(5, 20).astype(str))
        assert report.rows_lost == {"bank": 5, "shop": 5}

    def test_prepare_runs_on_user_data(self, csv_files, good_kwargs):
        vds, _ = load_party_files(csv_files, **good_kwargs)
        prep = vds.prepare(seed=0, test_size=0.3, val_size=0.0)
        assert prep.party("shop").feature_names == ["spend", "segment=gold", "segment=silver"]
        assert sum(prep.n_samples(s) for s in ("train", "val", "test")) == len(COMMON)

    def test_string_ids(self, tmp_path):
        a = pd.DataFrame({"key": ["c", "a", "b", "z"], "y": [1, 0, 1, 0], "u": [3.0, 1.0, 2.0, 9.0]})
        b = pd.DataFrame({"key": ["b", "c", "a", "q"], "v": [20.0, 30.0, 10.0, 0.0]})
        vds, report = load_party_files(
            {"a": write(tmp_path / "a.csv", a), "b": write(tmp_path / "b.csv", b)},
            label_party="a", label_column="y", id_column="key",
        )
        assert list(vds.ids) == ["a", "b", "c"]
        np.testing.assert_array_equal(vds.y, [0, 1, 1])
        np.testing.assert_allclose(vds.block("b").X["v"], [10.0, 20.0, 30.0])
        assert report.rows_lost == {"a": 1, "b": 1}


class TestTaskInference:
    def make(self, tmp_path, labels, **kw):
        n = len(labels)
        a = pd.DataFrame({"id": np.arange(n), "target": labels})
        b = pd.DataFrame({"id": np.arange(n), "x": np.linspace(0, 1, n)})
        files = {"a": write(tmp_path / "a.csv", a), "b": write(tmp_path / "b.csv", b)}
        return load_party_files(files, label_party="a", label_column="target", **kw)[0]

    def test_float_labels_are_regression(self, tmp_path):
        vds = self.make(tmp_path, [0.5, 1.25, 3.0, 2.0])
        assert vds.task == "regression"
        assert vds.y.dtype == np.float64
        assert vds.class_names is None

    def test_two_values_binary_codes(self, tmp_path):
        vds = self.make(tmp_path, [-1, 1, 1, -1])
        assert vds.task == "binary"
        np.testing.assert_array_equal(vds.y, [0, 1, 1, 0])
        assert vds.class_names == ["-1", "1"]

    def test_integer_multiclass_codes(self, tmp_path):
        vds = self.make(tmp_path, [3, 7, 5, 7, 3])
        assert vds.task == "multiclass"
        np.testing.assert_array_equal(vds.y, [0, 2, 1, 2, 0])
        assert vds.class_names == ["3", "5", "7"]

    def test_many_integer_values_are_ambiguous(self, tmp_path):
        with pytest.raises(DataError, match="--task"):
            self.make(tmp_path, list(range(60)))
        assert self.make(tmp_path, list(range(60)), task="regression").task == "regression"
        assert self.make(tmp_path, list(range(60)), task="classification").task == "multiclass"

    def test_many_classes_with_many_rows_each_are_classes(self, tmp_path):
        # 26 letters over 1,560 rows (60 a class): scikit-learn's type_of_target says multiclass
        labels = np.tile(np.arange(1, 27), 60)
        vds = self.make(tmp_path, labels.tolist())
        assert vds.task == "multiclass" and len(vds.class_names) == 26
        # 1,000 integers over 2,000 rows (2 a class) stay ambiguous
        with pytest.raises(DataError, match="1000 distinct integer values over 2000 rows.*--task"):
            self.make(tmp_path, np.tile(np.arange(1000), 2).tolist())

    def test_a_stray_value_among_classes_is_ambiguous(self, tmp_path):
        with pytest.raises(DataError, match="0.5"):
            self.make(tmp_path, [0, 1] * 30 + [0.5])

    def test_explicit_task(self, tmp_path):
        vds = self.make(tmp_path, [1, 2, 3, 1], task="regression")
        assert vds.task == "regression"
        with pytest.raises(DataError, match="task='binary'"):
            self.make(tmp_path, [1, 2, 3, 1], task="binary")


class TestBadInput:
    """Each error is a DataError naming the file and (where there is one) the column."""

    def load(self, files, **kw):
        args = dict(label_party="bank", label_column="default", categorical={"shop": ["segment"]})
        args.update(kw)
        return load_party_files(files, **args)

    def test_missing_file(self, csv_files, tmp_path):
        csv_files["telecom"] = tmp_path / "nope.csv"
        with pytest.raises(DataError) as err:
            self.load(csv_files)
        assert str(tmp_path / "nope.csv") in str(err.value)
        assert "telecom" in str(err.value)

    def test_unsupported_suffix(self, csv_files, tmp_path, frames):
        path = tmp_path / "telecom.xlsx"
        path.write_text("not really excel")
        csv_files["telecom"] = path
        with pytest.raises(DataError) as err:
            self.load(csv_files)
        msg = str(err.value)
        assert str(path) in msg and ".parquet" in msg and ".csv" in msg

    def test_missing_id_column(self, csv_files, frames):
        write(csv_files["shop"], frames["shop"].rename(columns={"id": "customer"}))
        with pytest.raises(DataError) as err:
            self.load(csv_files)
        msg = str(err.value)
        assert str(csv_files["shop"]) in msg and "'id'" in msg
        assert "'customer'" in msg and "'spend'" in msg  # lists the columns that exist

    def test_duplicate_ids(self, csv_files, frames):
        df = frames["telecom"]
        write(csv_files["telecom"], pd.concat([df, df[df["id"].isin([7, 9])]]))
        with pytest.raises(DataError) as err:
            self.load(csv_files)
        msg = str(err.value)
        assert str(csv_files["telecom"]) in msg and "'id'" in msg
        assert "7" in msg and "9" in msg and "duplicated" in msg

    def test_undeclared_non_numeric_column(self, csv_files):
        with pytest.raises(DataError) as err:
            self.load(csv_files, categorical=None)
        msg = str(err.value)
        assert str(csv_files["shop"]) in msg and "'segment'" in msg
        assert "categorical={'shop': ['segment']}" in msg

    def test_declared_categorical_column_absent(self, csv_files):
        with pytest.raises(DataError) as err:
            self.load(csv_files, categorical={"shop": ["colour"]})
        assert str(csv_files["shop"]) in str(err.value) and "'colour'" in str(err.value)

    def test_nan_in_feature_column(self, csv_files, frames):
        df = frames["telecom"].astype({"calls": float})
        df.loc[df["id"].isin([6, 8, 10]), "calls"] = np.nan
        write(csv_files["telecom"], df)
        vds, report = self.load(csv_files)  # missing values are read; imputation is decided later
        assert report.missing["telecom"] == {"calls": 3}
        with pytest.raises(DataError) as err:
            vds.prepare(seed=0, test_size=0.3, val_size=0.0)
        msg = str(err.value)
        assert str(csv_files["telecom"]) in msg and "'calls'" in msg and "impute" in msg
        prep = vds.prepare(seed=0, test_size=0.3, val_size=0.0, impute="median")
        assert np.isfinite(prep.party("telecom").X["train"]).all()

    def test_nan_in_label_column(self, csv_files, frames):
        df = frames["bank"].copy()
        df.loc[df["id"] == 10, "default"] = np.nan
        write(csv_files["bank"], df)
        with pytest.raises(DataError) as err:
            self.load(csv_files)
        assert str(csv_files["bank"]) in str(err.value) and "'default'" in str(err.value)

    def test_no_overlapping_ids(self, csv_files, frames):
        df = frames["telecom"].assign(id=frames["telecom"]["id"] + 1000)
        write(csv_files["telecom"], df)
        with pytest.raises(DataError) as err:
            self.load(csv_files)
        msg = str(err.value)
        assert str(csv_files["telecom"]) in msg and "'id'" in msg
        assert "no id" in msg

    def test_label_column_missing(self, csv_files):
        with pytest.raises(DataError) as err:
            self.load(csv_files, label_column="churn")
        msg = str(err.value)
        assert str(csv_files["bank"]) in msg and "'churn'" in msg and "'income'" in msg

    def test_single_class_label(self, csv_files, frames):
        write(csv_files["bank"], frames["bank"].assign(default="no"))
        with pytest.raises(DataError) as err:
            self.load(csv_files)
        msg = str(err.value)
        assert str(csv_files["bank"]) in msg and "'default'" in msg and "one class" in msg

    def test_feature_name_clash(self, csv_files, frames):
        write(csv_files["telecom"], frames["telecom"].rename(columns={"calls": "spend"}))
        with pytest.raises(DataError) as err:
            self.load(csv_files)
        msg = str(err.value)
        assert "'spend'" in msg and "'shop'" in msg and "'telecom'" in msg
        assert str(csv_files["shop"]) in msg and str(csv_files["telecom"]) in msg

    def test_label_party_without_file(self, csv_files):
        with pytest.raises(DataError, match="'insurer'"):
            self.load(csv_files, label_party="insurer")

    def test_reserved_party_name(self, csv_files):
        csv_files["active"] = csv_files.pop("telecom")
        with pytest.raises(DataError, match="reserved") as err:
            self.load(csv_files)
        assert str(csv_files["active"]) in str(err.value)

    def test_parquet_without_pyarrow(self, tmp_path, frames, monkeypatch):
        import importlib.util

        files = {
            "bank": write(tmp_path / "bank.csv", frames["bank"]),
            "shop": write(tmp_path / "shop.parquet", frames["shop"]),
        }
        real = importlib.util.find_spec
        monkeypatch.setattr(
            importlib.util, "find_spec",
            lambda name, *a: None if name in ("pyarrow", "fastparquet") else real(name, *a),
        )
        with pytest.raises(DataError, match="pip install pyarrow") as err:
            self.load(files)
        assert str(files["shop"]) in str(err.value)


def test_a_report_without_labels_does_not_name_an_empty_label_party():
    """``verticalfs predict`` aligns new rows without labels: it printed "(labels from '')" (issue 53)."""
    report = AlignmentReport(files={"a": "a.csv"}, rows_in_file={"a": 3}, rows_kept={"a": 3}, rows_lost={"a": 0},
                             n_aligned=3, label_party="")
    assert "labels from" not in report.summary() and "no labels" in report.summary()
    report.label_party = "bank"
    assert "(labels from 'bank')" in report.summary()


def test_reading_party_files_leaves_no_file_open(tmp_path):
    """The header was read through a text wrapper that was never closed: a ResourceWarning per CSV
    file at garbage collection (issue 53)."""
    import gc
    import warnings

    rng = np.random.default_rng(0)
    ids = [f"u{i}" for i in range(40)]
    pd.DataFrame({"id": ids, "a": rng.normal(size=40), "y": rng.integers(0, 2, 40)}).to_csv(tmp_path / "p1.csv",
                                                                                           index=False)
    pd.DataFrame({"id": ids, "b": rng.normal(size=40)}).to_csv(tmp_path / "p2.csv", index=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        load_party_files({"p1": tmp_path / "p1.csv", "p2": tmp_path / "p2.csv"}, id_column="id",
                         label_party="p1", label_column="y")
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)], [str(w.message) for w in caught]
