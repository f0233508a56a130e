"""A scikit-learn feature selector over federated selection: :class:`VerticalSelector`.

The way a data scientist tries these methods on a pooled table before a real deployment: the
columns are split between simulated parties (``parties``), the chosen method runs over the metered
in-process transport exactly as it would between organisations, and the selection comes back as a
scikit-learn selector (``fit``, ``transform``, ``get_support``, ``get_feature_names_out``), usable in
a :class:`~sklearn.pipeline.Pipeline`, with :func:`~sklearn.base.clone` and in
:class:`~sklearn.model_selection.GridSearchCV`.

>>> from sklearn.datasets import load_breast_cancer
>>> from verticalfs.sklearn import VerticalSelector
>>> X, y = load_breast_cancer(return_X_y=True)
>>> sel = VerticalSelector(method="feast", parties={"bank": range(0, 15), "telecom": range(15, 30)},
...                        params={"n_select": 5}).fit(X, y)
>>> sel.transform(X).shape  # doctest: +SKIP
(569, 5)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.feature_selection import SelectorMixin
from sklearn.preprocessing import LabelEncoder
from sklearn.utils.multiclass import type_of_target
from sklearn.utils.validation import check_is_fitted, validate_data

from verticalfs.exceptions import ConfigError


class VerticalSelector(SelectorMixin, BaseEstimator):
    """Select features with a verticalfs method run over simulated parties.

    Parameters
    ----------
    method : str
        A registered method (``verticalfs methods``): a filter method (``feast``, ``mi``,
        ``fate-iv``, ...) or one that selects while training (``less-vfl``, ``group-lasso``, ...).
    parties : mapping, optional
        ``{party name: column indices (or names, for a DataFrame)}``; columns listed nowhere are not
        used (never selected). Default: the columns split evenly into ``n_parties`` blocks.
    n_parties : int
        Parties of the default split (at most the number of columns).
    params : dict, optional
        The method's parameters (``verticalfs methods`` lists them). A filter method's ``n_select``
        larger than the number of columns is lowered to it (``"auto"``, its default, chooses it
        on the validation split, ``val_size``).
    val_size : float
        Fraction of the rows held out as the method's validation split (0 = none; lowered to 0
        when a class has too few rows for a stratified split).
    scaling : {"minmax", "standard", "robust", "quantile", "none"}
        Per-party scaling fitted on the party's training rows.
    random_state : int
        Seeds the split and the method.

    Attributes
    ----------
    support_ : ndarray of bool, shape (n_features_in_,)
        The selected columns.
    party_of_ : ndarray of object, shape (n_features_in_,)
        The party each column was given to (``None`` for unused columns).
    result_ : verticalfs.RunResult
        The whole run: metrics, selection, bytes (``result_.communication``), history.
    bytes_sent_ : int
        Bytes the parties exchanged during ``fit``.
    """

    def __init__(self, method: str = "feast", parties: Mapping | None = None, n_parties: int = 2,
                 params: dict | None = None, val_size: float = 0.1, scaling: str = "minmax",
                 random_state: int = 0) -> None:
        self.method = method
        self.parties = parties
        self.n_parties = n_parties
        self.params = params
        self.val_size = val_size
        self.scaling = scaling
        self.random_state = random_state

    # ------------------------------------------------------------------ fit
    def _assignment(self, n_features: int) -> dict[str, list[int]]:
        names = list(getattr(self, "feature_names_in_", []))
        if self.parties is None:
            k = max(1, min(int(self.n_parties), n_features))
            return {f"party{i + 1}": [int(j) for j in block]
                    for i, block in enumerate(np.array_split(np.arange(n_features), k))}
        out: dict[str, list[int]] = {}
        seen: dict[int, str] = {}
        for party, cols in self.parties.items():
            idx = []
            for c in cols:
                if isinstance(c, str):
                    if c not in names:
                        raise ConfigError(f"party {party!r}: column {c!r} is not in X (columns: {names[:10]}...)")
                    j = names.index(c)
                else:
                    j = int(c)
                    if not 0 <= j < n_features:
                        raise ConfigError(f"party {party!r}: column index {j} outside X's {n_features} columns")
                if j in seen:
                    raise ConfigError(f"column {j} is given to both {seen[j]!r} and {party!r}; give it to one")
                seen[j] = str(party)
                idx.append(j)
            if not idx:
                raise ConfigError(f"party {party!r} has no column; give every party at least one")
            out[str(party)] = idx
        return out

    def fit(self, X, y):
        """Split the columns between parties, run the method, keep its selection."""
        import pandas as pd

        from verticalfs.api import run
        from verticalfs.data.vertical import PartyBlock, VerticalDataset
        from verticalfs.methods import registry

        X, y = validate_data(self, X, y, dtype=np.float64, ensure_min_samples=2)
        n, d = X.shape
        kind = type_of_target(y, raise_unknown=True)
        if kind in ("binary", "multiclass"):
            self.classes_ = np.unique(y)
            codes = LabelEncoder().fit_transform(y)
            task = "binary" if len(self.classes_) == 2 else "multiclass"
            if len(self.classes_) < 2:
                raise ValueError("y has a single class; selection needs at least two")
        elif kind in ("continuous",):
            codes, task = np.asarray(y, dtype=np.float64), "regression"
        else:
            raise ValueError(f"y of type {kind!r} is not supported; pass class labels or a continuous target")
        assign = self._assignment(d)
        cls = registry.get(self.method)
        params = dict(self.params or {})
        fields = {f.name for f in dataclasses.fields(cls.Params)}
        if "n_select" in fields:
            wanted = params.get("n_select", cls.Params.__dataclass_fields__["n_select"].default)
            if not (isinstance(wanted, str) and wanted.strip().lower() == "auto"):
                params["n_select"] = min(int(wanted), sum(len(v) for v in assign.values()))
        cols = [f"x{j}" for j in range(d)]
        frame = pd.DataFrame(X, columns=cols)
        blocks = [PartyBlock(p, frame[[cols[j] for j in idx]].reset_index(drop=True)) for p, idx in assign.items()]
        vds = VerticalDataset(name="pooled", blocks=blocks, y=codes, task=task, ids=np.arange(n))
        val = float(self.val_size)
        if task != "regression" and val > 0 and np.bincount(codes).min() < 2:
            val = 0.0
        try:
            data = vds.prepare(seed=int(self.random_state), test_size=0.0, val_size=val, scaling=self.scaling)
        except ValueError:  # a validation split the labels cannot give (very few rows)
            data = vds.prepare(seed=int(self.random_state), test_size=0.0, val_size=0.0, scaling=self.scaling)
        res = run(self.method, data, seed=int(self.random_state), params=params)
        support = np.zeros(d, dtype=bool)
        party_of = np.full(d, None, dtype=object)
        for p, idx in assign.items():
            kept = set(res.selection["parties"][p]["kept"])
            for j in idx:
                party_of[j] = p
                support[j] = cols[j] in kept
        self.support_ = support
        self.party_of_ = party_of
        self.bytes_sent_ = int(res.communication["total_bytes"])
        res.federation = None  # keep the figures, not the parties
        res.method_obj = None
        self.result_ = res
        return self

    def _get_support_mask(self) -> np.ndarray:
        check_is_fitted(self, "support_")
        return self.support_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.target_tags.required = True
        return tags
