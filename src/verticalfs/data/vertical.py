"""Vertically partitioned data: per-party column blocks, labels at the active party only.

A :class:`VerticalDataset` is the result of partitioning a :class:`~verticalfs.data.table.Table` (or
of loading one file per party). It still holds raw columns (categoricals as strings). Calling
:meth:`VerticalDataset.prepare` draws the train/validation/test split and fits each party's
preprocessing on that party's own training rows, giving a :class:`PreparedData`: exactly the arrays
each party will own once the federation is built.

Ground truth about injected spurious features is stored in ``spurious`` (per party) and copied into
:attr:`PreparedData.ground_truth`. It is for evaluation only: :mod:`verticalfs.party` never
receives it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
from sklearn.model_selection import train_test_split

from verticalfs.data.preprocess import PartyPreprocessor
from verticalfs.data.table import Task
from verticalfs.exceptions import DataError
from verticalfs.names import LABEL_HOLDER

SPLITS: tuple[str, ...] = ("train", "val", "test")
from verticalfs.data.choices import IMPUTATIONS, SCALINGS  # noqa: E402  (read by the CLI without pandas)


@dataclass
class PartyBlock:
    """One party's raw columns (rows aligned with the data set's sample ids)."""

    name: str
    X: pd.DataFrame
    categorical: list[str] = field(default_factory=list)
    spurious: np.ndarray | None = None  # ground truth per column, evaluation only
    source: str = ""  # the file the block came from (named in error messages)
    dates: dict[str, str] = field(default_factory=dict)  # date columns (format) derived into <c>_year, _month, _day

    def __post_init__(self) -> None:
        if self.spurious is None:
            self.spurious = np.zeros(self.X.shape[1], dtype=bool)
        self.spurious = np.asarray(self.spurious, dtype=bool)
        if self.spurious.shape != (self.X.shape[1],):
            raise DataError(
                f"party {self.name!r}: spurious mask has shape {self.spurious.shape}, expected "
                f"({self.X.shape[1]},)"
            )

    @property
    def feature_names(self) -> list[str]:
        return [str(c) for c in self.X.columns]

    @property
    def n_features(self) -> int:
        return self.X.shape[1]


@dataclass
class VerticalDataset:
    """Per-party column blocks over one sample-id space; labels belong to the active party.

    The active party (named ``"active"``, the "server" of the papers) holds the labels and the top
    model; each block belongs to one passive party holding features.
    """

    name: str
    blocks: list[PartyBlock]
    y: np.ndarray
    task: Task
    ids: np.ndarray
    class_names: list[str] | None = None
    predefined_test: np.ndarray | None = None
    impute: str | None = None  # default imputation of missing numeric values (see prepare)
    warnings: list[str] = field(default_factory=list)  # found when loading: carried into PreparedData

    def __post_init__(self) -> None:
        n = len(self.y)
        names = [b.name for b in self.blocks]
        if len(set(names)) != len(names):
            raise DataError(f"data set {self.name!r}: party names must be unique, got {names}")
        if LABEL_HOLDER in names:
            raise DataError(f"party name {LABEL_HOLDER!r} is reserved for the label holder; rename the block")
        for b in self.blocks:
            if len(b.X) != n:
                raise DataError(
                    f"party {b.name!r} has {len(b.X)} rows but there are {n} labels; align rows by id "
                    "first (verticalfs.data.load_party_files does this)"
                )
            if b.n_features == 0:
                raise DataError(f"party {b.name!r} holds no columns; give every party at least one")

    # ------------------------------------------------------------------ views
    @property
    def party_names(self) -> list[str]:
        return [b.name for b in self.blocks]

    @property
    def n_parties(self) -> int:
        return len(self.blocks)

    @property
    def n_samples(self) -> int:
        return len(self.y)

    @property
    def n_classes(self) -> int:
        return 1 if self.task == "regression" else int(np.max(self.y)) + 1

    def block(self, name: str) -> PartyBlock:
        for b in self.blocks:
            if b.name == name:
                return b
        raise DataError(f"no party named {name!r}; parties are {self.party_names}")

    def with_blocks(self, blocks: list[PartyBlock]) -> VerticalDataset:
        return replace(self, blocks=blocks)

    # ------------------------------------------------------------ preparation
    def prepare(
        self,
        *,
        seed: int = 0,
        test_size: float = 0.2,
        val_size: float = 0.1,
        scaling: str = "minmax",
        impute: str = "auto",
        fold: tuple[int, int] | None = None,
    ) -> PreparedData:
        """Split the samples and fit each party's preprocessing on its own training rows.

        Parameters
        ----------
        seed : int
            Seed of the (stratified, for classification) split.
        test_size, val_size : float
            Fractions of all samples for the test and validation splits. If the data set has a
            predefined test split (Adult, USPS) it is used and ``test_size`` is ignored.
        scaling : {"minmax", "standard", "robust", "quantile", "none"}
            Per-column scaling fitted on the training rows only (``robust``: minus the median, over
            the interquartile range, as scikit-learn's ``RobustScaler``). Categorical columns are one-hot
            encoded (categories seen in training; unseen ones encode as all zeros).
        impute : {"auto", "median", "mean", "most-frequent", "none"}
            Missing values, filled from each party's own training rows
            (:class:`~verticalfs.data.preprocess.PartyPreprocessor`): ``median`` / ``mean`` for
            numeric columns (categorical ones get their most frequent category), ``most-frequent``
            for every column; ``none`` makes them an error; ``auto`` uses the data set's default
            (``median`` for loaders that document it, e.g. physionet2012; ``none`` otherwise).
        fold : (k, K), optional
            K-fold cross-validation: the test split is fold ``k`` of ``K`` (stratified for
            classification, shuffled with ``seed``) and ``test_size`` is not used; the validation
            split is drawn from the other folds as usual.
        """
        if scaling not in SCALINGS:
            raise DataError(f"unknown scaling {scaling!r}; use one of {SCALINGS}")
        if impute not in IMPUTATIONS:
            raise DataError(f"unknown imputation {impute!r}; use one of {IMPUTATIONS}")
        if impute == "auto":
            impute = self.impute or "none"
        for frac, what in ((test_size, "test_size"), (val_size, "val_size")):
            if not 0.0 <= frac < 1.0:
                raise DataError(f"{what} must be in [0, 1), got {frac}")
        for b in self.blocks:  # unusable numbers are reported before any split or fit
            if hasattr(b, "check_values"):  # rows in a file, read in pieces (data/stream.py's streamed_block)
                b.check_values()
            else:
                PartyPreprocessor.check_values(b.name, b.X, b.categorical, where=b.source)
        idx = split_indices(self.y, self.task, seed=seed, test_size=test_size, val_size=val_size, name=self.name,
                            predefined_test=self.predefined_test, fold=fold)
        parties = []
        ground_truth = {}
        notes = list(self.warnings)
        for b in self.blocks:
            parties.append(prepare_block(b, idx, scaling=scaling, impute=impute))
            notes += [w for w in parties[-1].preprocessor.warnings if w not in notes]
            spur_of = dict(zip(b.X.columns, b.spurious, strict=True))
            ground_truth[b.name] = np.asarray([bool(spur_of[c]) for c in parties[-1].sources], dtype=bool)
        y = {s: self.y[idx[s]] for s in SPLITS}
        if self.task == "regression":
            y = {s: v.astype(np.float32) for s, v in y.items()}
        labels = LabelData(y=y, task=self.task, n_classes=self.n_classes, class_names=self.class_names)
        return PreparedData(
            name=self.name,
            parties=parties,
            labels=labels,
            ground_truth=ground_truth,
            ids={s: self.ids[idx[s]] for s in SPLITS},
            warnings=notes,
        )


@dataclass
class PartyData:
    """What one passive party owns after preparation: its own columns, per split.

    ``preprocessor`` is its fitted preprocessing (to apply to new rows); ``sources`` names the
    user's column behind each prepared feature (a one-hot level's source column).
    """

    name: str
    feature_names: list[str]
    X: dict[str, np.ndarray]  # split -> float32 (n_split, d)
    preprocessor: PartyPreprocessor | None = None
    sources: list[str] | None = None

    def __post_init__(self) -> None:
        if self.sources is None:
            self.sources = list(self.feature_names)

    @property
    def n_features(self) -> int:
        return len(self.feature_names)


@dataclass
class LabelData:
    """What the active party owns after preparation: the labels, per split."""

    y: dict[str, np.ndarray]
    task: Task
    n_classes: int
    class_names: list[str] | None = None

    @property
    def n_outputs(self) -> int:
        return 1 if self.task == "regression" else self.n_classes


@dataclass
class PreparedData:
    """Split and preprocessed vertical data, ready to be handed to the parties."""

    name: str
    parties: list[PartyData]
    labels: LabelData
    ground_truth: dict[str, np.ndarray]  # party -> bool per prepared feature; evaluation only
    ids: dict[str, np.ndarray]
    #: what loading and preparing found that a user should hear about (each once); a run copies
    #: them into its result's ``warnings``
    warnings: list[str] = field(default_factory=list)

    @property
    def party_names(self) -> list[str]:
        return [p.name for p in self.parties]

    def n_samples(self, split: str = "train") -> int:
        return len(self.labels.y[split])

    def party(self, name: str) -> PartyData:
        for p in self.parties:
            if p.name == name:
                return p
        raise DataError(f"no party named {name!r}; parties are {self.party_names}")

    def has_ground_truth(self) -> bool:
        return any(m.any() for m in self.ground_truth.values())

    def restrict(self, support: dict[str, np.ndarray]) -> PreparedData:
        """The same rows and labels with only the features ``support`` keeps (a bool mask per
        party over its prepared features, as a method's ``get_support()`` gives): for training a
        model on a method's selection, the evaluation of most feature-selection papers.

        A party with no kept feature is left out (it has nothing to contribute); the parties'
        fitted preprocessing is not carried over (it maps a party's *raw* columns to all of its
        prepared ones). Raises :class:`DataError` naming the party when a mask is missing, is not
        bool or has the wrong length, or names a party the data does not have, and when no feature
        is kept at all.
        """
        unknown = sorted(set(support) - set(self.party_names))
        if unknown:
            raise DataError(f"restrict: support names parties {unknown} that this data does not have "
                            f"(parties: {self.party_names})")
        parties = []
        for p in self.parties:
            if p.name not in support:
                raise DataError(f"restrict: no support for party {p.name!r}; give a bool mask over its "
                                f"{p.n_features} prepared features for each of {self.party_names}")
            m = np.asarray(support[p.name])
            if m.dtype != bool or m.shape != (p.n_features,):
                raise DataError(f"restrict: party {p.name!r}'s support must be a bool mask of shape ({p.n_features},), "
                                f"got {m.dtype} {m.shape}")
            if not m.any():
                continue
            idx = np.flatnonzero(m)
            parties.append(PartyData(p.name, [p.feature_names[i] for i in idx],
                                     {s: np.ascontiguousarray(X[:, idx]) for s, X in p.X.items()},
                                     None, [p.sources[i] for i in idx]))
        if not parties:
            raise DataError(f"restrict: the support keeps no feature of {self.name!r}; nothing to train on")
        gt = {p.name: np.asarray(self.ground_truth[p.name])[np.asarray(support[p.name])]
              for p in parties if p.name in self.ground_truth}
        return replace(self, parties=parties, ground_truth=gt)


# ---------------------------------------------------------------------------- helpers
def _check_stratifiable(name: str, y: np.ndarray, fraction: float, what: str) -> None:
    """A stratified split of ``fraction`` needs every class twice and room for every class on both
    sides; say so (with the fix) before scikit-learn does in its own words."""
    counts = np.bincount(np.asarray(y, dtype=np.int64))
    counts = counts[counts > 0]
    n, k = len(y), len(counts)
    rare = int((counts < 2).sum())
    n_small = int(np.ceil(fraction * n))
    if rare or n_small < k or n - n_small < k:
        why = (f"{rare} of its {k} classes have a single row" if rare else
               f"its {k} classes cannot all appear in a {what} split of {n_small} rows and the rest ({n - n_small})")
        raise DataError(
            f"data set {name!r}: cannot draw a stratified {what} split from {n} rows: {why}. Merge rare "
            f"classes or drop them, use more rows, lower the {what} fraction, or if the label is a quantity "
            "say --task regression")


#: rows transformed at a time by :func:`prepare_block` (progress lines between pieces)
PREPARE_ROWS = 50_000


def prepare_block(block: PartyBlock, idx: dict[str, np.ndarray], *, scaling: str = "minmax",
                  impute: str = "none") -> PartyData:
    """One party's block split by ``idx`` (split -> row positions), its preprocessing fitted on its
    own training rows only. A networked party runs exactly this on its own file."""
    if hasattr(block, "prepare"):  # rows in a file, prepared in pieces (data/stream.py's streamed_block)
        return block.prepare(idx, scaling=scaling, impute=impute)
    from verticalfs.utils.progress import Ticker

    ticker = Ticker(f"party {block.name!r}: preparing its rows", sum(len(idx[s]) for s in SPLITS), "rows")
    pp = PartyPreprocessor.fit(block.name, block.X.iloc[idx["train"]], block.categorical, scaling=scaling,
                               impute=impute, where=block.source, dates=block.dates)
    X_parts, done = {}, 0
    for s in SPLITS:  # in pieces of PREPARE_ROWS rows: the same floats (every step is per row), and a line
        parts = []    # every few seconds on a large table (issue 53)
        for a in range(0, len(idx[s]), PREPARE_ROWS):
            rows = idx[s][a:a + PREPARE_ROWS]
            parts.append(pp.transform(block.X.iloc[rows], where=block.source))
            done += len(rows)
            ticker(done)
        X_parts[s] = np.concatenate(parts) if len(parts) > 1 else (
            parts[0] if parts else pp.transform(block.X.iloc[idx[s]], where=block.source))
    ticker.end(f" ({len(pp.feature_names)} features)")
    return PartyData(name=block.name, feature_names=pp.feature_names, X=X_parts, preprocessor=pp,
                     sources=pp.sources)


def split_indices(y: np.ndarray, task: str, *, seed: int, test_size: float, val_size: float, name: str = "data",
                  predefined_test: np.ndarray | None = None, fold: tuple[int, int] | None = None) -> dict[str, np.ndarray]:
    """Row positions of the train, validation and test splits (stratified for classification),
    sorted; what the label holder decides and, networked, sends to the parties. ``fold = (k, K)``:
    the test split is fold ``k`` of a shuffled (stratified) K-fold split."""
    n = len(y)
    all_idx = np.arange(n)
    strat = y if task != "regression" else None
    if fold is not None:
        k, K = (int(v) for v in fold)
        if K < 2 or not 0 <= k < K:
            raise DataError(f"data set {name!r}: fold must be (k, K) with K >= 2 and 0 <= k < K, got {fold}")
        if predefined_test is not None and np.asarray(predefined_test).any():
            raise DataError(f"data set {name!r} has a predefined test split; cross-validation folds would "
                            "discard it: leave fold out")
        from sklearn.model_selection import KFold, StratifiedKFold

        if strat is not None:
            _check_stratifiable(name, strat, 1.0 / K, "test")
            splitter = StratifiedKFold(K, shuffle=True, random_state=seed).split(all_idx, strat)
        else:
            splitter = KFold(K, shuffle=True, random_state=seed).split(all_idx)
        rest, test = list(splitter)[k]
    elif predefined_test is not None and np.asarray(predefined_test).any():
        test = all_idx[np.asarray(predefined_test, dtype=bool)]
        rest = all_idx[~np.asarray(predefined_test, dtype=bool)]
    elif test_size > 0:
        if strat is not None:
            _check_stratifiable(name, strat, test_size, "test")
        rest, test = train_test_split(
            all_idx, test_size=test_size, random_state=seed, stratify=strat
        )
    else:
        rest, test = all_idx, all_idx[:0]
    if val_size > 0:
        frac = val_size / max(1e-12, (len(rest) / n))
        frac = min(frac, 0.5)
        strat_rest = y[rest] if strat is not None else None
        if strat_rest is not None:
            _check_stratifiable(name, strat_rest, frac, "validation")
        try:
            train, val = train_test_split(rest, test_size=frac, random_state=seed, stratify=strat_rest)
        except ValueError as exc:
            raise DataError(f"data set {name!r}: cannot draw a validation split: {exc}") from exc
    else:
        train, val = rest, rest[:0]
    return {"train": np.sort(train), "val": np.sort(val), "test": np.sort(test)}
