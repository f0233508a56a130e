"""Real-file loaders, built-in data sets and the data-set registry."""

from __future__ import annotations

import numpy as np
import pytest

from verticalfs.data import builtin, loaders
from verticalfs.data.registry import (
    DATA_ENV,
    DATASETS,
    DatasetInfo,
    list_datasets,
    load_dataset,
    resolve_data_dir,
)
from verticalfs.data.table import Table
from verticalfs.exceptions import ConfigError, DataError

ALL_NAMES = [
    "madelon-synth", "friedman", "multiclass-synth", "multiclass-wide", "digit-images", "breast_cancer", "digits",
    "wine", "madelon",
    "phishing", "adult",
    "wine_quality", "physionet2012", "arcene", "basehock", "relathe", "pcmac", "allaml", "tox_171",
    "usps",
]
FILE_NAMES = ALL_NAMES[8:]

# name -> (n_samples, n_features, class counts by code) as given in each PROVENANCE.md
EXPECTED = {
    "madelon": (2600, 500, [1300, 1300]),
    "phishing": (11055, 30, [4898, 6157]),
    "adult": (48842, 14, [24720 + 12435, 7841 + 3846]),
    # quality > 6: red 199 + 18, white 880 + 175 + 5 = 1277 positives
    "wine_quality": (6497, 12, [6497 - 1277, 1277]),
    "physionet2012": (4000, 41, [3446, 554]),
    "arcene": (200, 10000, [112, 88]),
    "basehock": (1993, 4862, [994, 999]),
    "relathe": (1427, 4322, [779, 648]),
    "pcmac": (1943, 3289, [982, 961]),
    "allaml": (72, 7129, [47, 25]),
    "tox_171": (171, 5748, [45, 45, 39, 42]),
    "usps": (9298, 256, [1553, 1269, 929, 824, 852, 716, 834, 792, 708, 821]),
}


@pytest.fixture(scope="module")
def load(data_dir):
    """Load a real data set once per module (``load("adult")``)."""
    cache: dict[str, Table] = {}

    def _load(name: str) -> Table:
        if name not in cache:
            cache[name] = getattr(loaders, f"load_{name}")(data_dir)
        return cache[name]

    return _load


class TestRealLoaders:
    @pytest.mark.parametrize("name", list(EXPECTED))
    def test_shape_and_class_counts(self, load, name):
        n, d, counts = EXPECTED[name]
        t = load(name)
        assert isinstance(t, Table)
        assert t.X.shape == (n, d)
        assert len(t.y) == n and len(t.ids) == n
        assert t.y.dtype == np.int64
        assert np.bincount(t.y).tolist() == counts
        assert t.n_classes == len(counts)
        assert t.task == ("binary" if len(counts) == 2 else "multiclass")
        assert len(t.class_names) == len(counts)
        assert len(set(t.feature_names)) == d

    @pytest.mark.parametrize("name", list(EXPECTED))
    def test_numeric_columns_have_no_nan(self, load, name):
        t = load(name)
        num = t.X.drop(columns=t.categorical)
        if t.impute == "median":  # missing values are kept and imputed from training rows
            assert not num.isna().all().any()
            from verticalfs.data.partition import partition

            prep = partition(t, 2, seed=0).prepare(seed=0)
            assert not any(np.isnan(a).any() for p in prep.parties for a in p.X.values())
        else:
            assert not num.isna().to_numpy().any()

    @pytest.mark.parametrize("name", ["arcene", "basehock", "relathe", "pcmac", "allaml", "tox_171", "usps"])
    def test_mat_sets_are_dense_float32(self, load, name):
        t = load(name)
        assert set(t.X.dtypes) == {np.dtype(np.float32)}

    def test_madelon_labels_from_pm1(self, load, data_dir):
        t = load("madelon")
        raw = np.loadtxt(data_dir / "madelon" / "madelon_train.labels")
        np.testing.assert_array_equal(t.y[:2000], (raw > 0).astype(int))
        assert t.class_names == ["-1", "1"]
        assert t.predefined_test is None
        assert (t.X.to_numpy() == np.round(t.X.to_numpy())).all()  # integer features

    def test_phishing_values_numeric(self, load):
        t = load("phishing")
        assert "Result" not in t.X.columns
        assert t.feature_names[0] == "having_IP_Address"
        assert t.feature_names[-1] == "Statistical_report"
        assert set(np.unique(t.X.to_numpy())) <= {-1.0, 0.0, 1.0}
        assert t.class_names == ["-1", "1"]

    def test_adult_split_categoricals_and_missing(self, load):
        t = load("adult")
        assert t.predefined_test is not None
        assert t.predefined_test.sum() == 16281
        assert t.predefined_test[-16281:].all() and not t.predefined_test[:32561].any()
        # test-file labels (trailing dots stripped): 12435 <=50K, 3846 >50K
        assert np.bincount(t.y[t.predefined_test]).tolist() == [12435, 3846]
        assert len(t.categorical) == 8
        assert set(t.categorical) == set(loaders.ADULT_CATEGORICAL)
        assert len(t.X.columns) - len(t.categorical) == 6
        assert (t.X["workclass"] == "?").sum() > 0  # '?' kept as its own category
        assert not t.X["workclass"].str.startswith(" ").any()  # stripped
        assert t.X["age"].dtype == np.float64
        assert t.class_names == ["<=50K", ">50K"]

    def test_wine_quality_colour_column(self, load):
        t = load("wine_quality")
        assert t.feature_names[-1] == "is_red"
        assert t.X["is_red"].sum() == 1599
        assert t.X["is_red"][:1599].eq(1.0).all()
        assert "quality" not in t.X.columns
        assert "fixed acidity" in t.X.columns

    def test_physionet_ids_label_and_imputation(self, load):
        t = load("physionet2012")
        assert len(np.unique(t.ids)) == 4000
        assert t.ids.min() == 132539 and t.ids.max() == 142673
        for col in ("RecordID", "In-hospital_death", "Length_of_stay"):
            assert col not in t.X.columns
        assert {"Age", "Gender", "WBC", "Urine"} <= set(t.X.columns)
        # missing values stay missing; preparation imputes from each party's training rows
        assert t.X.isna().any().any() and t.impute == "median"
        # the challenge's -1 ("not recorded") in Height/Weight/Gender is missing, not a value
        coded = t.X[["Height", "Weight", "Gender"]]
        assert not (coded == -1).any().any()
        assert coded.isna().sum().tolist() == [1894, 296, 3]

    def test_usps_split_and_digits(self, load):
        t = load("usps")
        assert t.predefined_test.sum() == 2007
        assert t.predefined_test[-2007:].all()
        train_counts = np.bincount(t.y[~t.predefined_test]).tolist()
        assert train_counts == [1194, 1005, 731, 658, 652, 556, 664, 645, 542, 644]
        X = t.X.to_numpy()
        assert X.min() >= 0.0 and X.max() <= 1.0
        assert t.class_names == [str(d) for d in range(10)]

    def test_asu_class_names_are_original_labels(self, load):
        assert load("arcene").class_names == ["-1", "1"]
        assert load("tox_171").class_names == ["1", "2", "3", "4"]

    @pytest.mark.parametrize("name", FILE_NAMES)
    def test_missing_file_names_path_and_fix(self, tmp_path, name):
        with pytest.raises(DataError) as err:
            getattr(loaders, f"load_{name}")(tmp_path)
        msg = str(err.value)
        assert str(tmp_path) in msg
        assert DATA_ENV in msg and "--data-dir" in msg


class TestBuiltin:
    def test_madelon_synth_layout(self):
        t = builtin.madelon_synth(n_samples=600, seed=3)
        assert t.name == "madelon-synth"
        assert t.X.shape == (600, 500)
        assert t.feature_names[:2] == ["f0", "f1"] and t.feature_names[-1] == "f499"
        assert t.task == "binary"
        np.testing.assert_array_equal(np.flatnonzero(~t.spurious), np.arange(20))
        assert t.spurious.sum() == 480
        assert abs(t.y.mean() - 0.5) < 0.05

    def test_madelon_synth_redundant_are_combinations_of_informative(self):
        X = builtin.madelon_synth(n_samples=300, seed=0).X.to_numpy()
        coef, *_ = np.linalg.lstsq(X[:, :5], X[:, 5:20], rcond=None)
        assert np.allclose(X[:, :5] @ coef, X[:, 5:20], atol=1e-8)
        # a probe is not such a combination
        coef, *_ = np.linalg.lstsq(X[:, :5], X[:, 20], rcond=None)
        assert not np.allclose(X[:, :5] @ coef, X[:, 20], atol=1e-3)

    def test_madelon_synth_default_and_seed(self):
        a = builtin.madelon_synth()
        assert a.X.shape == (2600, 500)
        b = builtin.madelon_synth()
        c = builtin.madelon_synth(seed=1)
        np.testing.assert_array_equal(a.X.to_numpy(), b.X.to_numpy())
        assert not np.array_equal(a.X.to_numpy(), c.X.to_numpy())

    def test_friedman(self):
        t = builtin.friedman(n_samples=500, seed=0)
        assert t.name == "friedman"
        assert t.task == "regression"
        assert t.X.shape == (500, 10)
        assert t.feature_names == [f"x{j}" for j in range(10)]
        np.testing.assert_array_equal(np.flatnonzero(t.spurious), np.arange(5, 10))
        assert t.y.dtype == np.float64
        assert t.n_classes == 1
        # x3 enters linearly with coefficient 10; x7 does not enter
        assert np.corrcoef(t.X["x3"], t.y)[0, 1] > 0.3
        assert abs(np.corrcoef(t.X["x7"], t.y)[0, 1]) < 0.15
        assert builtin.friedman().X.shape == (2000, 10)

    @pytest.mark.parametrize(
        ("fn", "shape", "counts", "task", "a_feature"),
        [
            (builtin.breast_cancer, (569, 30), [212, 357], "binary", "mean radius"),
            (builtin.digits, (1797, 64), None, "multiclass", "pixel_0_0"),
            (builtin.wine, (178, 13), [59, 71, 48], "multiclass", "alcohol"),
        ],
    )
    def test_sklearn_bundled(self, fn, shape, counts, task, a_feature):
        t = fn()
        assert t.X.shape == shape
        assert t.task == task
        assert a_feature in t.feature_names
        if counts is not None:
            assert np.bincount(t.y).tolist() == counts
        assert len(t.class_names) == t.n_classes
        assert not t.spurious.any()

    def test_sklearn_class_names(self):
        assert builtin.breast_cancer().class_names == ["malignant", "benign"]
        assert builtin.digits().class_names == [str(d) for d in range(10)]
        assert builtin.digits().n_classes == 10


class TestRegistry:
    def test_names(self):
        assert list(DATASETS) == ALL_NAMES
        for name, info in DATASETS.items():
            assert isinstance(info, DatasetInfo)
            assert info.name == name
            assert info.task in ("binary", "multiclass", "regression")
            assert info.needs_files == (name in FILE_NAMES)

    def test_info_is_frozen(self):
        with pytest.raises(AttributeError):
            DATASETS["wine"].name = "x"  # type: ignore[misc]

    def test_unknown_name_lists_valid_names(self):
        with pytest.raises(ConfigError) as err:
            load_dataset("no-such-set")
        msg = str(err.value)
        assert "no-such-set" in msg
        for name in ALL_NAMES:
            assert name in msg

    def test_missing_data_dir_names_env_var(self, monkeypatch):
        monkeypatch.delenv(DATA_ENV, raising=False)
        with pytest.raises(DataError) as err:
            load_dataset("adult")
        assert DATA_ENV in str(err.value)
        assert "--data-dir" in str(err.value)

    def test_wrong_data_dir_names_path(self, tmp_path):
        with pytest.raises(DataError, match=DATA_ENV) as err:
            load_dataset("phishing", data_dir=tmp_path)
        assert str(tmp_path / "phishing") in str(err.value)

    def test_resolve_data_dir_precedence(self, monkeypatch, tmp_path):
        monkeypatch.delenv(DATA_ENV, raising=False)
        assert resolve_data_dir() is None
        monkeypatch.setenv(DATA_ENV, str(tmp_path / "env"))
        assert resolve_data_dir() == tmp_path / "env"
        assert resolve_data_dir(tmp_path / "arg") == tmp_path / "arg"
        assert resolve_data_dir(str(tmp_path)) == tmp_path

    def test_builtin_by_name_and_seed(self, monkeypatch):
        monkeypatch.delenv(DATA_ENV, raising=False)
        a = load_dataset("madelon-synth", seed=2)
        b = load_dataset("MADELON_SYNTH", seed=2)  # case and -/_ insensitive
        np.testing.assert_array_equal(a.X.to_numpy(), b.X.to_numpy())
        assert load_dataset("friedman").task == "regression"
        assert load_dataset("wine").n_samples == 178

    def test_file_set_via_env_var(self, monkeypatch, data_dir):
        monkeypatch.setenv(DATA_ENV, str(data_dir))
        t = load_dataset("wine_quality")
        assert t.X.shape == (6497, 12)

    def test_list_datasets_with_data(self, data_dir):
        rows = list_datasets(data_dir)
        assert [r["name"] for r in rows] == ALL_NAMES
        by = {r["name"]: r for r in rows}
        assert all(r["available"] for r in rows)
        assert (by["usps"]["n_samples"], by["usps"]["n_features"], by["usps"]["n_classes"]) == (9298, 256, 10)
        assert by["friedman"]["n_classes"] is None
        assert by["madelon"]["used_by"] == "FedSDG-FS"
        assert set(rows[0]) == {
            "name", "task", "available", "n_samples", "n_features", "n_classes", "used_by",
            "description",
        }

    def test_list_datasets_without_data(self, tmp_path, monkeypatch):
        monkeypatch.delenv(DATA_ENV, raising=False)
        for root in (None, tmp_path):
            by = {r["name"]: r for r in list_datasets(root)}
            assert list(by) == ALL_NAMES
            for name in FILE_NAMES:
                assert by[name]["available"] is False
                assert by[name]["n_samples"] is None and by[name]["n_features"] is None
            assert by["digits"]["available"] is True
            assert by["digits"]["n_features"] == 64

