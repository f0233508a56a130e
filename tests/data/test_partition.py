"""Vertical partitioning, noise/overlap injection and per-party preparation."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from verticalfs.data.partition import (
    add_noise_features,
    add_overlap,
    load_assignment,
    partition,
)
from verticalfs.data.table import Table
from verticalfs.data.vertical import VerticalDataset
from verticalfs.exceptions import ConfigError, DataError

N = 400


def make_table(n_num: int = 10, *, n: int = N, seed: int = 0, with_cat: bool = True) -> Table:
    """``n_num`` numeric columns c0.. (c8, c9 spurious), optional categorical ``color`` (spurious),
    imbalanced binary labels (30 % positives)."""
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(rng.normal(size=(n, n_num)), columns=[f"c{j}" for j in range(n_num)])
    spurious = np.zeros(n_num, dtype=bool)
    spurious[-2:] = True
    categorical = []
    if with_cat:
        X["color"] = rng.choice(["red", "green", "blue"], size=n)
        spurious = np.append(spurious, True)
        categorical = ["color"]
    y = (np.arange(n) % 10 < 3).astype(int)
    return Table(
        name="toy", X=X, y=rng.permutation(y), task="binary", categorical=categorical,
        spurious=spurious,
    )


@pytest.fixture
def table() -> Table:
    return make_table()


@pytest.fixture
def numeric_table() -> Table:
    return make_table(with_cat=False)


def columns_of(vds: VerticalDataset) -> list[list[str]]:
    return [b.feature_names for b in vds.blocks]


class TestEvenSplit:
    @pytest.mark.parametrize("strategy", ["random", "contiguous"])
    def test_sizes_and_every_column_once(self, table, strategy):
        vds = partition(table, 3, strategy=strategy, seed=0)
        assert vds.party_names == ["party1", "party2", "party3"]
        assert [b.n_features for b in vds.blocks] == [4, 4, 3]  # 11 columns
        flat = [c for cols in columns_of(vds) for c in cols]
        assert sorted(flat) == sorted(table.feature_names)
        assert len(set(flat)) == len(flat)
        assert vds.n_samples == N
        np.testing.assert_array_equal(vds.y, table.y)

    def test_contiguous_keeps_order(self, table):
        vds = partition(table, 3, strategy="contiguous")
        assert columns_of(vds)[0] == ["c0", "c1", "c2", "c3"]
        assert columns_of(vds)[2] == ["c8", "c9", "color"]

    def test_random_is_deterministic_by_seed(self, table):
        a = columns_of(partition(table, 3, seed=5))
        b = columns_of(partition(table, 3, seed=5))
        c = columns_of(partition(table, 3, seed=6))
        assert a == b
        assert a != c

    def test_blocks_carry_values_categoricals_and_ground_truth(self, table):
        vds = partition(table, 4, seed=1)
        for b in vds.blocks:
            pd.testing.assert_frame_equal(b.X, table.X[b.feature_names].reset_index(drop=True))
            expected = [table.spurious[table.feature_names.index(c)] for c in b.feature_names]
            np.testing.assert_array_equal(b.spurious, expected)
            assert b.categorical == [c for c in b.feature_names if c == "color"]

    def test_bad_party_counts(self, table):
        with pytest.raises(DataError, match="at most 11"):
            partition(table, 12)
        with pytest.raises(DataError, match="positive"):
            partition(table, 0)
        with pytest.raises(DataError, match="strategy"):
            partition(table, 2, strategy="zigzag")


class TestAssignment:
    GROUPS = {"bank": ["c0", "c1", "color"], "shop": ["c2", "c3", "c4"], "telco": [f"c{j}" for j in range(5, 10)]}

    def test_toml_file(self, tmp_path, table):
        path = tmp_path / "parties.toml"
        # a JSON list of strings is also a TOML array
        body = "[parties]\n" + "".join(f"{p} = {json.dumps(c)}\n" for p, c in self.GROUPS.items())
        path.write_text(body)
        groups = load_assignment(path)
        assert groups == self.GROUPS
        vds = partition(table, assignment=groups)
        assert vds.party_names == ["bank", "shop", "telco"]
        assert columns_of(vds) == list(self.GROUPS.values())
        assert vds.block("bank").categorical == ["color"]

    @pytest.mark.parametrize("nested", [True, False])
    def test_json_file(self, tmp_path, table, nested):
        path = tmp_path / "parties.json"
        path.write_text(json.dumps({"parties": self.GROUPS} if nested else self.GROUPS))
        vds = partition(table, assignment=load_assignment(path))
        assert columns_of(vds) == list(self.GROUPS.values())

    def test_unknown_column(self, table):
        groups = {**self.GROUPS, "shop": ["c2", "c3", "c4", "height"]}
        with pytest.raises(DataError, match="'height'"):
            partition(table, assignment=groups)

    def test_column_twice(self, table):
        groups = {**self.GROUPS, "shop": ["c2", "c3", "c4", "c0"]}
        with pytest.raises(DataError, match="'c0'.*'bank'.*'shop'"):
            partition(table, assignment=groups)

    def test_unassigned_column(self, table):
        groups = {**self.GROUPS, "telco": ["c5", "c6", "c7", "c8"]}
        with pytest.raises(DataError, match="'c9'"):
            partition(table, assignment=groups)

    def test_file_errors(self, tmp_path):
        """The file is read through the configuration schema: ConfigError naming the file and key."""
        with pytest.raises(ConfigError, match="does not exist"):
            load_assignment(tmp_path / "missing.toml")
        bad = tmp_path / "parties.yaml"
        bad.write_text("bank: [c0]")
        with pytest.raises(ConfigError, match=r"use a \.toml or \.json") as err:
            load_assignment(bad)
        assert "not valid" not in str(err.value)
        broken = tmp_path / "broken.json"
        broken.write_text("{not json")
        with pytest.raises(ConfigError, match="is not valid JSON"):
            load_assignment(broken)
        listed = tmp_path / "list.json"
        listed.write_text('["c0", "c1"]')
        with pytest.raises(ConfigError, match="must hold a table"):
            load_assignment(listed)
        one = tmp_path / "one.toml"
        one.write_text('[parties]\nbank = "c0"\n')
        with pytest.raises(ConfigError, match=r"'.*one.toml': parties.bank = \"c0\": expected"):
            load_assignment(one)
        flat = tmp_path / "flat.toml"  # the [parties] level is optional; numbers are column names
        flat.write_text('bank = ["c0", 1]\n')
        assert load_assignment(flat) == {"bank": ["c0", "1"]}


class TestNoise:
    def test_one_fraction(self, table):
        vds = partition(table, 3, strategy="contiguous")
        noisy = add_noise_features(vds, 0.5, seed=0)
        for before, after in zip(vds.blocks, noisy.blocks, strict=True):
            k = round(0.5 * before.n_features)
            assert after.n_features == before.n_features + k
            assert after.feature_names[: before.n_features] == before.feature_names
            np.testing.assert_array_equal(after.spurious[: before.n_features], before.spurious)
            assert after.spurious[before.n_features:].all()

    def test_per_party_fractions(self):
        t = make_table(80, with_cat=False)
        t.spurious[:] = False
        vds = partition(t, 4, strategy="contiguous")  # 20 columns each
        noisy = add_noise_features(vds, [0.8, 0.25, 0.1, 0.0], seed=1)
        counts = [b.n_features - 20 for b in noisy.blocks]
        assert counts == [16, 5, 2, 0]
        for b, k in zip(noisy.blocks, counts, strict=True):
            is_noise = np.array(["_noise" in c for c in b.feature_names])
            assert is_noise.sum() == k
            np.testing.assert_array_equal(b.spurious, is_noise)  # ground truth = exactly the noise
        noise = np.hstack([b.X.loc[:, b.spurious].to_numpy() for b in noisy.blocks])
        assert noise.shape == (N, 23)
        assert abs(noise.mean()) < 0.05
        assert abs(noise.std() - 1.0) < 0.05
        # deterministic by seed
        again = add_noise_features(vds, [0.8, 0.25, 0.1, 0.0], seed=1)
        pd.testing.assert_frame_equal(again.blocks[0].X, noisy.blocks[0].X)

    def test_ground_truth_survives_prepare(self, numeric_table):
        vds = add_noise_features(partition(numeric_table, 2, strategy="contiguous"), 1.0)
        prep = vds.prepare(seed=0)
        for b in vds.blocks:
            np.testing.assert_array_equal(prep.ground_truth[b.name], b.spurious)
        assert prep.has_ground_truth()

    def test_bad_fractions(self, table):
        vds = partition(table, 3)
        with pytest.raises(DataError, match="3 parties"):
            add_noise_features(vds, [0.5, 0.5])
        with pytest.raises(DataError, match=">= 0"):
            add_noise_features(vds, -0.1)


class TestOverlap:
    def test_copies_come_from_other_parties(self, numeric_table):
        vds = partition(numeric_table, 3, seed=2)
        owner = {c: b.name for b in vds.blocks for c in b.feature_names}
        over = add_overlap(vds, 2, seed=0)
        for before, after in zip(vds.blocks, over.blocks, strict=True):
            assert after.n_features == before.n_features + 2
            copies = after.feature_names[before.n_features:]
            for j, c in enumerate(copies):
                assert c.endswith("@copy")
                src = c[: -len("@copy")]
                assert owner[src] != before.name
                np.testing.assert_array_equal(after.X[c].to_numpy(), numeric_table.X[src].to_numpy())
                # a copy keeps the source's ground truth
                assert after.spurious[before.n_features + j] == vds.block(owner[src]).spurious[
                    vds.block(owner[src]).feature_names.index(src)
                ]

    def test_per_party_counts_and_categorical_copies(self, table):
        vds = partition(table, 3, strategy="contiguous")  # color is in party3
        over = add_overlap(vds, [0, 1, 7], seed=0)
        assert [a.n_features - b.n_features for a, b in zip(over.blocks, vds.blocks, strict=True)] == [0, 1, 7]
        for b in over.blocks:
            for c in b.categorical:
                assert c.split("@")[0] == "color"
        with pytest.raises(DataError, match="cannot copy"):
            add_overlap(vds, 9)


class TestPrepare:
    def test_split_sizes_disjoint(self, numeric_table):
        vds = partition(numeric_table, 2)
        prep = vds.prepare(seed=0, test_size=0.2, val_size=0.1)
        sizes = {s: prep.n_samples(s) for s in ("train", "val", "test")}
        assert sizes == {"train": 280, "val": 40, "test": 80}
        ids = [set(prep.ids[s]) for s in ("train", "val", "test")]
        assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
        assert set().union(*ids) == set(range(N))
        for p in prep.parties:
            for s, n in sizes.items():
                assert p.X[s].shape == (n, p.n_features)
                assert p.X[s].dtype == np.float32

    def test_stratified(self, numeric_table):
        prep = partition(numeric_table, 2).prepare(seed=3, test_size=0.25, val_size=0.15)
        overall = numeric_table.y.mean()
        for s in ("train", "val", "test"):
            assert abs(prep.labels.y[s].mean() - overall) < 0.02

    def test_labels_follow_ids(self, numeric_table):
        prep = partition(numeric_table, 2).prepare(seed=1)
        for s in ("train", "val", "test"):
            np.testing.assert_array_equal(prep.labels.y[s], numeric_table.y[prep.ids[s]])

    def test_minmax_fitted_on_train_only(self, numeric_table):
        prep = partition(numeric_table, 2, strategy="contiguous").prepare(seed=0, scaling="minmax")
        p = prep.party("party1")
        np.testing.assert_allclose(p.X["train"].min(axis=0), 0.0, atol=1e-6)
        np.testing.assert_allclose(p.X["train"].max(axis=0), 1.0, atol=1e-6)
        raw = numeric_table.X[p.feature_names].to_numpy()
        lo, hi = raw[prep.ids["train"]].min(axis=0), raw[prep.ids["train"]].max(axis=0)
        np.testing.assert_allclose(p.X["test"], (raw[prep.ids["test"]] - lo) / (hi - lo), rtol=1e-5, atol=1e-6)

    def test_standard_and_none(self, numeric_table):
        vds = partition(numeric_table, 2)
        p = vds.prepare(scaling="standard").parties[0]
        np.testing.assert_allclose(p.X["train"].mean(axis=0), 0.0, atol=1e-5)
        np.testing.assert_allclose(p.X["train"].std(axis=0), 1.0, atol=1e-4)
        prep = vds.prepare(scaling="none")
        raw = numeric_table.X[prep.parties[0].feature_names].to_numpy()
        np.testing.assert_allclose(prep.parties[0].X["val"], raw[prep.ids["val"]], rtol=1e-6)
        with pytest.raises(DataError, match="scaling"):
            vds.prepare(scaling="log")

    def test_one_hot_categorical(self, table):
        vds = partition(table, 3, strategy="contiguous")  # party3: c8, c9, color
        prep = vds.prepare(seed=0)
        p = prep.party("party3")
        assert p.feature_names == ["c8", "c9", "color=blue", "color=green", "color=red"]
        np.testing.assert_array_equal(prep.ground_truth["party3"], [True] * 5)  # c8, c9, color spurious
        np.testing.assert_array_equal(prep.ground_truth["party1"], [False] * 4)
        onehot = p.X["test"][:, 2:]
        np.testing.assert_array_equal(onehot.sum(axis=1), 1.0)
        colors = table.X["color"].to_numpy()[prep.ids["test"]]
        np.testing.assert_array_equal(np.array(["blue", "green", "red"])[onehot.argmax(axis=1)], colors)

    def test_nan_error_names_party_and_column(self, numeric_table):
        numeric_table.X.loc[7, "c4"] = np.nan
        vds = partition(numeric_table, 2, strategy="contiguous")
        with pytest.raises(DataError, match="party1.*c4"):
            vds.prepare()

    def test_predefined_test_respected(self):
        t = make_table(with_cat=False)
        test_rows = np.zeros(N, dtype=bool)
        test_rows[-100:] = True
        t.predefined_test = test_rows
        t.X.loc[N - 1, "c0"] = 1e6  # an extreme value that only the test split sees
        prep = partition(t, 2, strategy="contiguous").prepare(seed=0, test_size=0.5, val_size=0.1)
        np.testing.assert_array_equal(prep.ids["test"], np.arange(N - 100, N))  # test_size ignored
        assert prep.n_samples("val") == 40
        assert prep.n_samples("train") == 260
        c0 = prep.party("party1").X
        assert c0["train"][:, 0].max() == pytest.approx(1.0)
        assert c0["test"][:, 0].max() > 1.0  # scaling fitted on train only: test may exceed

    def test_regression_labels_float32(self):
        from verticalfs.data.builtin import friedman

        prep = partition(friedman(n_samples=200), 2).prepare(seed=0)
        assert prep.labels.task == "regression"
        assert prep.labels.y["train"].dtype == np.float32
        assert prep.labels.n_outputs == 1
        assert prep.ground_truth["party1"].sum() + prep.ground_truth["party2"].sum() == 5


class TestImputation:
    @staticmethod
    def _table(impute=None):
        import pandas as pd

        from verticalfs.data.table import Table

        rng = np.random.default_rng(0)
        X = pd.DataFrame({"a": rng.normal(size=100), "b": rng.normal(size=100)})
        X.loc[[3, 50, 97], "a"] = np.nan
        return Table("t", X, rng.integers(0, 2, 100), "binary", impute=impute)

    def test_nan_is_an_error_naming_party_column_and_fix(self):
        from verticalfs.data.partition import partition
        from verticalfs.exceptions import DataError

        vds = partition(self._table(), 1)
        with pytest.raises(DataError, match=r"party1.*\['a'\].*impute"):
            vds.prepare(seed=0)

    def test_median_of_the_party_training_rows_only(self):
        from verticalfs.data.partition import partition

        vds = partition(self._table(impute="median"), 1)
        prep = vds.prepare(seed=0, scaling="none")
        ids = prep.ids
        a = vds.blocks[0].X["a"].to_numpy()
        med = np.nanmedian(a[np.sort(ids["train"])])
        col = prep.parties[0].feature_names.index("a")
        for split in ("train", "val", "test"):
            rows = ids[split]
            filled = prep.parties[0].X[split][:, col]
            assert not np.isnan(filled).any()
            missing = np.isnan(a[rows])
            np.testing.assert_allclose(filled[missing], med, rtol=1e-6)
        # the median is a training statistic: it differs from the all-rows median here
        assert med != np.nanmedian(a)


def test_folds_partition_the_rows_and_stratify():
    import verticalfs

    tests = []
    for k in range(5):
        d = verticalfs.build_data("breast_cancer", parties=2, seed=3, fold=(k, 5))
        tests.append(d.ids["test"])
        y = d.labels.y
        assert abs(y["test"].mean() - y["train"].mean()) < 0.05  # stratified
        assert not set(d.ids["test"]) & set(d.ids["train"]) and not set(d.ids["test"]) & set(d.ids["val"])
    allt = np.concatenate(tests)
    assert len(allt) == 569 and len(set(allt.tolist())) == 569  # every row tested exactly once
    with pytest.raises(DataError, match="fold"):
        verticalfs.build_data("breast_cancer", parties=2, fold=(5, 5))


class TestRestrict:
    """``PreparedData.restrict``: a method's support to the data a model is then trained on."""

    def prepared(self):
        return partition(make_table(), 3, strategy="contiguous").prepare(seed=0)

    def test_keeps_exactly_the_masked_columns(self):
        data = self.prepared()
        support = {p.name: np.arange(p.n_features) % 2 == 0 for p in data.parties}
        support[data.parties[1].name][:] = False  # a party with nothing kept is left out
        out = data.restrict(support)
        assert out.party_names == [data.parties[0].name, data.parties[2].name]
        for p in out.parties:
            src, m = data.party(p.name), support[p.name]
            assert p.feature_names == [n for n, k in zip(src.feature_names, m, strict=True) if k]
            for s in ("train", "val", "test"):
                np.testing.assert_array_equal(p.X[s], src.X[s][:, m])
            np.testing.assert_array_equal(out.ground_truth[p.name], data.ground_truth[p.name][m])
        assert out.labels is data.labels
        assert data.parties[1].n_features > 0  # the original is untouched

    def test_bad_supports_name_the_party(self):
        data = self.prepared()
        full = {p.name: np.ones(p.n_features, dtype=bool) for p in data.parties}
        name = data.parties[0].name
        with pytest.raises(DataError, match=f"no support for party '{name}'"):
            data.restrict({k: v for k, v in full.items() if k != name})
        with pytest.raises(DataError, match=f"party '{name}'.*shape"):
            data.restrict({**full, name: full[name][:-1]})
        with pytest.raises(DataError, match=f"party '{name}'.*bool"):
            data.restrict({**full, name: full[name].astype(int)})
        with pytest.raises(DataError, match="does not have"):
            data.restrict({**full, "nobody": np.ones(1, dtype=bool)})
        with pytest.raises(DataError, match="keeps no feature"):
            data.restrict({k: np.zeros_like(v) for k, v in full.items()})
