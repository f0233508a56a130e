"""Named paper layouts: ``--partition paper`` builds the benchmark's own columns and rows."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from verticalfs.cli import app
from verticalfs.data.layouts import LAYOUTS, build_layout, resolve_layout
from verticalfs.exceptions import ConfigError


def test_adult_is_table_a1_and_table_1(data_dir):
    data = build_layout("paper", "adult", seed=3, data_dir=data_dir)
    assert [data.n_samples(s) for s in ("train", "val", "test")] == [29304, 3257, 16281]
    assert [p.n_features for p in data.parties] == [28, 35, 45]
    lay = LAYOUTS["sparsevfl"]["adult"]
    for p in data.parties:  # every prepared column comes from the party's Table A1 columns
        assert all(any(n == c or n.startswith(c) for c in lay.assignment[p.name]) for n in p.feature_names), p.name


def test_cli_equals_the_benchmark_split(data_dir):
    """The CLI's `--partition paper` data and the library's layout that the SparseVFL benchmark
    builds (``build_layout("sparsevfl", ...)``) are the same arrays."""
    from verticalfs.cli import DataOptions

    opts = DataOptions(dataset="adult", parties=None, noise="0", overlap="0", partition="paper", assignment=None,
                       scaling="minmax", impute="auto", party_file=None, label_party=None, label_column=None,
                       id_column="id", categorical=None, na_values=None, delimiter=",", encoding="utf-8", task=None,
                       max_file_mb=1024.0, data_dir=data_dir)
    cli = opts.build(2, opts.check())
    ref = build_layout("sparsevfl", "adult", seed=2, data_dir=data_dir)
    for a, b in zip(cli.parties, ref.parties, strict=True):
        assert a.feature_names == b.feature_names
        for s in ("train", "val", "test"):
            np.testing.assert_array_equal(a.X[s], b.X[s])
    for s in ("train", "val", "test"):
        np.testing.assert_array_equal(cli.labels.y[s], ref.labels.y[s])


def test_cli_run_records_the_layout(data_dir, tmp_path):
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["run", "-d", "wine_quality", "-m", "vfl", "--partition", "sparsevfl", "-e", "1",
                                   "--no-progress", "--data-dir", str(data_dir), "--out", str(out)],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    d = json.loads(out.read_text())
    assert d["config"]["data"]["layout"]["name"] == "sparsevfl"
    assert d["selection"]["n_features"] == 12  # Table A1: 4 + 4 + 4 columns


@pytest.mark.parametrize("args, match", [
    (["-d", "breast_cancer", "--partition", "paper"], "no paper layout"),
    (["-d", "adult", "--partition", "sparsevfl", "-k", "4"], "3 parties"),
    (["-d", "adult", "--partition", "nope"], "must be one of"),
])
def test_bad_layouts_are_named(args, match):
    res = CliRunner().invoke(app, ["run", "-m", "vfl", "--no-progress", *args])
    assert res.exit_code == 2 and match in res.output, res.output


def test_resolve():
    assert resolve_layout("paper", "wine_quality") is LAYOUTS["sparsevfl"]["wine_quality"]
    with pytest.raises(ConfigError, match="covers"):
        resolve_layout("sparsevfl", "madelon")
