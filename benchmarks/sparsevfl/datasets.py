"""The data of sparsevfl.md section 5 / Table 1 / Appendix A (Table A1), built with ``build_data``.

- **adult**: the UCI training file (32,561 rows) gives 29,304 training and 3,257 validation rows
  (10 % of the training file, stratified, seeded), the UCI test file the 16,281 test rows (Table 1).
  Columns over three parties as in Table A1. e = 8.
- **wine_quality**: red and white wines stacked (6,497 rows), label ``quality > 6`` (the loader's
  default label, already binary), colour as the ``is_red`` column; 80 / 10 / 10 % split as Table 1's
  5,197 / 650 / 650. Columns as in Table A1 (``color`` = ``is_red``). e = 4.
- **physionet2012** stands in for Covertype (not available here; see README.md): PhysioNet 2012 set
  A per-patient means (4,000 rows, 41 features, label in-hospital death; missing values imputed with
  each party's own training medians), the 41 columns split contiguously over three parties
  (14 / 14 / 13), 80 / 10 / 10 % split like Covertype's in Table 1. e = 4.

Categorical columns are one-hot encoded and numerical ones min-max scaled, both fitted on the
owning party's training rows (Appendix A). The split is seeded with the run's seed.
"""

from __future__ import annotations

from verticalfs.data.layouts import LAYOUTS, build_layout
from verticalfs.exceptions import DataError

#: Table A1 with the loader's column names (hyphens; ``is_red`` for Wine Quality's ``color``);
#: defined once, in :mod:`verticalfs.data.layouts` (``verticalfs run --partition paper`` uses it too).
ASSIGNMENTS: dict[str, dict[str, list[str]] | None] = {k: v.assignment for k, v in LAYOUTS["sparsevfl"].items()}
#: e = D_{h,m} per data set (sparsevfl.md section 5: 8 on Adult, 4 on the others)
EMBEDDING_DIM = {k: v.extra["embedding_dim"] for k, v in LAYOUTS["sparsevfl"].items()}
#: what the paper used instead
STANDS_IN_FOR = {"adult": "Adult", "wine_quality": "Wine Quality", "physionet2012": "Covertype"}
#: Table 1's (train, validation, test) rows for the data sets we have
TABLE1_SIZES = {k: v.sizes for k, v in LAYOUTS["sparsevfl"].items() if v.sizes is not None}


def build(name: str, seed: int, data_dir=None):
    """Prepared data of ``name`` for one seed (see the module docstring)."""
    if name not in ASSIGNMENTS:
        raise DataError(f"unknown benchmark data set {name!r}; use one of {sorted(ASSIGNMENTS)}")
    return build_layout("sparsevfl", name, seed=seed, data_dir=data_dir)
