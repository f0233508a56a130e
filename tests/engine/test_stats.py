"""The mergeable statistics of an engine's fit (verticalfs.engine.stats): the preprocessor built from
blocks' statistics is the in-memory fit of the whole block, exactly where the docs say exact."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from verticalfs.data.preprocess import PartyPreprocessor
from verticalfs.data.stream import _typed
from verticalfs.engine import stats as S
from verticalfs.exceptions import DataError


def _frame(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"a": rng.normal(3, 2, n), "b": rng.integers(0, 7, n).astype(float),
                       "c": rng.choice(["x", "y", "z"], n).astype(object), "d": rng.exponential(1, n)})
    df.loc[rng.random(n) < 0.1, "a"] = np.nan
    df.loc[rng.random(n) < 0.1, "c"] = None
    return df


def _from_blocks(df: pd.DataFrame, cats: list[str], *, scaling: str, impute: str, blocks: int, seed: int = 1):
    cuts = np.sort(np.random.default_rng(seed).choice(np.arange(1, len(df)), blocks - 1, replace=False))
    merged: dict = {}
    for part in np.split(np.arange(len(df)), cuts):
        X = df.iloc[part].reset_index(drop=True)
        X = pd.DataFrame({c: _typed(X[c], c in cats) for c in df.columns})
        S.merge(merged, S.block_stats(X, set(cats), counts_numeric=impute == "most-frequent"))
    return S.preprocessor("p", list(df.columns), cats, merged, scaling=scaling, impute=impute), merged


def _reference(df, cats, *, scaling, impute):
    X = pd.DataFrame({c: _typed(df[c], c in cats) for c in df.columns})
    return PartyPreprocessor.fit("p", X, cats, scaling=scaling, impute=impute)


@pytest.mark.parametrize("scaling,impute", [("minmax", "median"), ("robust", "most-frequent"),
                                            ("minmax", "most-frequent"), ("none", "median"),
                                            ("robust", "median")])
def test_exact_statistics_give_the_in_memory_fit_to_the_bit(scaling, impute):
    df = _frame(3000)
    got, merged = _from_blocks(df, ["c"], scaling=scaling, impute=impute, blocks=4)
    ref = _reference(df, ["c"], scaling=scaling, impute=impute)
    assert all(st.exact_points for st in merged.values() if not st.categorical)  # 3000 rows < 4 x SKETCH
    assert (got.numeric, got.categorical, got.categories) == (ref.numeric, ref.categorical, ref.categories)
    assert got.fill == ref.fill and got.scale == ref.scale and got.offset == ref.offset  # == on floats: the bits
    X = pd.DataFrame({c: _typed(df[c], c == "c") for c in df.columns})
    assert np.array_equal(got.transform(X), ref.transform(X))


def test_mean_and_variance_merge_to_the_last_bits():
    df = _frame(5000)
    got, _ = _from_blocks(df, ["c"], scaling="standard", impute="mean", blocks=7)
    ref = _reference(df, ["c"], scaling="standard", impute="mean")
    np.testing.assert_allclose([got.fill[c] for c in ("a",)], [ref.fill["a"]], rtol=1e-12)
    np.testing.assert_allclose(got.scale, ref.scale, rtol=1e-12)
    np.testing.assert_allclose(got.offset, ref.offset, rtol=1e-12, atol=1e-15)
    assert got.categories == ref.categories and got.fill["c"] == ref.fill["c"]


def test_large_blocks_give_approximate_quartiles_within_the_stated_rank_error():
    n = 4 * S.SKETCH * 10
    df = _frame(n, seed=3)[["a", "d"]]
    got, merged = _from_blocks(df, [], scaling="robust", impute="median", blocks=3)
    assert all(S.approximate(st) for st in merged.values())  # each block holds > SKETCH values
    for c in ("a", "d"):
        v = np.sort(df[c].dropna().to_numpy())
        med = got.fill[c]
        rank = np.searchsorted(v, med) / len(v)
        assert abs(rank - 0.5) <= 1 / S.SKETCH + 1e-9  # rows / SKETCH ranks at most (docs)
        q25, q75 = np.percentile(np.where(np.isnan(df[c]), med, df[c]), [25, 75])
        assert got.scale[list(df.columns).index(c)] == pytest.approx(q75 - q25, rel=0.01)


def test_missing_values_without_imputation_and_constant_parties_are_reported_as_the_fit_does():
    df = _frame(200)
    with pytest.raises(DataError, match="have missing values"):
        _from_blocks(df[["a"]], [], scaling="minmax", impute="none", blocks=3)
    with pytest.raises(DataError, match="categorical column 'c'"):
        _from_blocks(df[["c"]], ["c"], scaling="minmax", impute="none", blocks=3)
    flat = pd.DataFrame({"k": np.ones(50), "e": ["u"] * 50})
    got, _ = _from_blocks(flat, ["e"], scaling="minmax", impute="none", blocks=2)
    ref = _reference(flat, ["e"], scaling="minmax", impute="none")
    assert got.warnings == ref.warnings and len(got.warnings) == 1 and "constant" in got.warnings[0]
    assert got.scale == ref.scale and got.offset == ref.offset


def test_extreme_values_warn_as_the_in_memory_fit_warns():
    rng = np.random.default_rng(0)
    v = rng.normal(0, 1, 1000)
    v[0] = 1e9
    df = pd.DataFrame({"v": v})
    got, _ = _from_blocks(df, [], scaling="minmax", impute="none", blocks=3)
    ref = _reference(df, [], scaling="minmax", impute="none")
    assert got.warnings == ref.warnings and "extreme values" in got.warnings[0]


def test_the_library_imports_no_ray_until_the_ray_engine_is_used():
    import subprocess
    import sys

    code = ("import sys, verticalfs, verticalfs.engine, verticalfs.deploy.party, verticalfs.psi, "
            "verticalfs.engine.stats; assert 'ray' not in sys.modules, 'ray imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
