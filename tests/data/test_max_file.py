"""``max_bytes`` (``--max-file-mb``) bounds every kind of party file before it is read (issue 37: a
215 MB plain CSV was read although the help said the option limited it, peaking at 2.3 GiB)."""

from __future__ import annotations

import gzip

import numpy as np
import pandas as pd
import pytest

from verticalfs.data.user import load_party_files
from verticalfs.exceptions import DataError

N = 2000


def _frames():
    rng = np.random.default_rng(0)
    ids = np.arange(N)
    label = pd.DataFrame({"id": ids, "x": rng.normal(size=N), "y": rng.integers(0, 2, N)})
    other = pd.DataFrame({"id": ids, "z": rng.normal(size=N), **{f"zeros{i}": np.zeros(N) for i in range(10)}})
    return label, other


def _load(files, max_bytes):
    return load_party_files(files, label_party="bank", label_column="y", id_column="id", max_bytes=max_bytes)


@pytest.mark.parametrize("kind", ["csv", "csv.gz", "parquet"])
def test_a_file_over_the_limit_is_refused_before_reading(tmp_path, kind):
    label, other = _frames()
    label.to_csv(tmp_path / "bank.csv", index=False)
    path = tmp_path / f"shop.{kind}"
    if kind == "parquet":
        pytest.importorskip("pyarrow")
        other.to_parquet(path)
    elif kind == "csv.gz":
        with gzip.open(path, "wt") as fh:
            other.to_csv(fh, index=False)
    else:
        other.to_csv(path, index=False)
    size = path.stat().st_size
    files = {"bank": tmp_path / "bank.csv", "shop": path}
    limit = (tmp_path / "bank.csv").stat().st_size  # the label party's file is within it
    assert kind != "csv" or size > limit
    if kind != "csv":
        limit = max(limit, size)  # small on disk (columns of zeros): refused by what it holds decompressed
    with pytest.raises(DataError, match=rf"party 'shop': '.*shop\.{kind}' .* more than the limit of {limit:,} bytes "
                                        r"\(.* MiB, --max-file-mb / max_bytes=\)"):
        _load(files, limit)
    if kind == "csv":
        with pytest.raises(DataError, match=rf"is {size:,} bytes"):
            _load(files, limit)
    vds, report = _load(files, 1 << 30)  # within the limit: read
    assert report.rows_kept["shop"] == N


def test_the_help_says_what_it_bounds():
    from typer.testing import CliRunner

    from verticalfs.cli import app

    out = " ".join(CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "400"}).output.split())
    assert "--max-file-mb" in out and "CSV, .csv.gz and Parquet" in out
