"""The data of sparsevfl.md section 5 / Table 1 / Appendix A (Table A1), built with ``build_data``.

- **adult**: the UCI training file (32,561 rows) gives 29,304 training and 3,257 validation rows
  (10 % of the training file, stratified, seeded), the UCI test file the 16,281 test rows (Table 1).
  Columns over three parties as in Table A1. e = 8.
- **wine_quality**: red and white wines stacked (6,497 rows), label ``quality > 6`` (the loader's
  default label, already binary), colour as the ``is_red`` column; 80 / 10 / 10 % split as Table 1's
  5,197 / 650 / 650. Columns as in Table A1 (``color`` = ``is_red``). e = 4.
- **physionet2012** stands in for Covertype (not available here; see README.md): PhysioNet 2012 set
  A per-patient means (4,000 rows, 40 features, label in-hospital death; missing values imputed with
  each party's own training medians), the 40 columns split contiguously over three parties
  (14 / 13 / 13), 80 / 10 / 10 % split like Covertype's in Table 1. e = 4.

Categorical columns are one-hot encoded and numerical ones min-max scaled, both fitted on the
owning party's training rows (Appendix A). The split is seeded with the run's seed.
"""

from __future__ import annotations

import numpy as np

from verticalfs import build_data
from verticalfs.data.registry import load_dataset
from verticalfs.exceptions import DataError

#: Table A1 with the loader's column names (hyphens; ``is_red`` for Wine Quality's ``color``).
ASSIGNMENTS: dict[str, dict[str, list[str]] | None] = {
    "adult": {
        "party1": ["age", "workclass", "fnlwgt", "education", "education-num"],
        "party2": ["marital-status", "occupation", "relationship", "race", "sex"],
        "party3": ["capital-gain", "capital-loss", "hours-per-week", "native-country"],
    },
    "wine_quality": {
        "party1": ["fixed acidity", "volatile acidity", "citric acid", "residual sugar"],
        "party2": ["chlorides", "free sulfur dioxide", "total sulfur dioxide", "density"],
        "party3": ["pH", "sulphates", "alcohol", "is_red"],
    },
    "physionet2012": None,  # contiguous split over 3 parties
}
#: e = D_{h,m} per data set (sparsevfl.md section 5: 8 on Adult, 4 on the others)
EMBEDDING_DIM = {"adult": 8, "wine_quality": 4, "physionet2012": 4}
#: what the paper used instead
STANDS_IN_FOR = {"adult": "Adult", "wine_quality": "Wine Quality", "physionet2012": "Covertype"}
#: Table 1's (train, validation, test) rows for the data sets we have
TABLE1_SIZES = {"adult": (29304, 3257, 16281), "wine_quality": (5197, 650, 650)}


def build(name: str, seed: int, data_dir=None):
    """Prepared data of ``name`` for one seed (see the module docstring)."""
    if name == "adult":
        table = load_dataset("adult", data_dir=data_dir, seed=seed)
        n = len(table.y)
        n_file = int(np.count_nonzero(~np.asarray(table.predefined_test, dtype=bool)))
        # build_data's val_size is a fraction of *all* rows; 10 % of the training file is this.
        data = build_data(table, assignment=ASSIGNMENTS["adult"], seed=seed, val_size=0.1 * n_file / n)
    elif name == "wine_quality":
        data = build_data("wine_quality", assignment=ASSIGNMENTS["wine_quality"], seed=seed,
                          data_dir=data_dir, test_size=0.1, val_size=0.1)
    elif name == "physionet2012":
        data = build_data("physionet2012", parties=3, partition_strategy="contiguous", seed=seed,
                          data_dir=data_dir, test_size=0.1, val_size=0.1)
    else:
        raise DataError(f"unknown benchmark data set {name!r}; use one of {sorted(ASSIGNMENTS)}")
    want = TABLE1_SIZES.get(name)
    got = tuple(data.n_samples(s) for s in ("train", "val", "test"))
    if want is not None and got != want:
        raise DataError(f"{name}: split sizes {got} differ from sparsevfl.md Table 1 {want}")
    return data
