"""The base of filter-type selection methods (FEAST and its baselines, FATE's IV and lasso).

A filter method first *selects* N features across the parties (:meth:`FilterMethod.select`,
messages in phase ``selection`` only), then the selected columns of every split are gathered at
the label holder (:class:`GatherColumns` -> :class:`Columns`, phase ``train``) and a classifier is
trained there on the training rows: the papers' evaluation (feast.md section 5).

Gathering moves raw feature columns to the label holder: it is the price of the evaluation, not
part of any selection protocol, and the byte count says what it costs (declared in
:attr:`FilterMethod.disclosures`, so the privacy audit knows). Every filter method's party role
extends :class:`FilterRole`, which answers it.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from verticalfs.data.vertical import SPLITS
from verticalfs.evaluation.metrics import prediction_metrics
from verticalfs.exceptions import ConfigError, ProtocolError
from verticalfs.methods.base import FederationView, Method, expect_holder_kind
from verticalfs.model_files import HolderPart
from verticalfs.params import Checked, Constraints, Interval, Options
from verticalfs.party import Context, Role, handles
from verticalfs.selection.blocks import row_blocks
from verticalfs.selection.evaluate import (
    CLASSIFIERS,
    ConstantModel,
    classifier_output,
    fit_classifier,
)
from verticalfs.training.history import History
from verticalfs.transport.messages import Ack, At, message

if TYPE_CHECKING:
    from typing_extensions import Self

    from verticalfs.federation import Federation
    from verticalfs.party import LocalData

SELECTION = At("selection")
GATHER = At("train")


@message("core.GatherColumns")
class GatherColumns:
    """Label holder -> party, phase ``train``: send columns ``indices`` (into the party's prepared
    features) of ``split``. The party also records ``indices`` as the features it keeps."""

    split: str
    indices: np.ndarray


@message("core.Columns")
class Columns:
    """Party -> label holder: the requested columns, ``(rows, len(indices))`` float32, exact (no codec)."""

    values: np.ndarray


class FilterRole(Role):
    """A party's part in a filter method: answers :class:`GatherColumns` after selection."""

    @handles(GatherColumns, policy="release_columns")
    def on_gather_columns(self, msg: GatherColumns, ctx: Context) -> Columns:
        idx = np.asarray(msg.indices, dtype=np.int64).reshape(-1)
        X = self.data.X_all(msg.split).numpy()
        if idx.size and (idx.min() < 0 or idx.max() >= X.shape[1]):
            raise ProtocolError(f"party {self.name!r}: GatherColumns asks for columns {idx.tolist()} but the "
                                f"party has {X.shape[1]} features")
        self.data.keep(idx)
        out = np.empty((X.shape[0], idx.size), dtype=np.float32)
        for s, e, block in row_blocks(X, dtype=np.float32):  # a memory-mapped table a block at a time
            out[s:e] = block[:, idx]
        return Columns(values=out)

    def export(self) -> dict[str, Any]:
        return {}  # a filter method's party keeps only its selected columns (saved by the runtime)

    @classmethod
    def restore(cls, data: LocalData, saved: dict[str, Any], ctx: Context) -> FilterRole:
        return FilterRole(data, None, ctx)

    def columns(self, split: str = "train") -> np.ndarray:
        """All of the party's prepared columns of ``split`` (float32)."""
        out: np.ndarray = self.data.X_all(split).numpy()
        return out


class ColumnsOnlyRole(FilterRole):
    """The party of a method whose whole protocol is sending its columns (``raw``): refused at
    ``Join`` unless its policy has ``release_columns = true``."""

    @classmethod
    def policy_rules(cls, spec: Any) -> tuple[str, ...]:
        return ("release_columns",)


#: the value of ``n_select`` that lets the label holder choose N (:meth:`FilterMethod.select_auto`)
AUTO = "auto"
#: the default ``auto_tol``: the smallest N of the grid whose validation accuracy is at most this far
#: below the grid's best is chosen (see FilterParams.auto_tol for the measurements behind it)
AUTO_TOL = 0.01
#: ``auto_cv_below``'s default: validation splits of fewer rows choose N by cross-validation
AUTO_CV_BELOW = 100
#: the folds of that cross-validation
AUTO_CV_FOLDS = 5


def auto_grid(total: int) -> list[int]:
    """The grid of N that ``n_select="auto"`` searches over ``total`` features: ``ceil(total / 2)``,
    then halved (rounded up) while at least 2, ascending; ``[1]`` for one feature. At most half of
    the features, so that the search gathers at most half of the columns (see FilterParams)."""
    grid, n = [], -(-int(total) // 2) if total > 1 else 1
    while True:
        grid.append(n)
        if n <= 2:
            break
        n = -(-n // 2)
    return sorted(set(grid))


def resolve_n_select(name: str, value: Any, allow_zero: bool = False) -> int | str:
    """``n_select`` as given (an int, a numeric string from ``--param``, or ``"auto"``), checked."""
    if isinstance(value, str):
        v = value.strip().lower()
        if v == AUTO:
            return AUTO
        try:
            value = int(v)
        except ValueError:
            raise ConfigError(f"{name}: n_select must be 'auto' (the label holder chooses N on its validation "
                              f"split) or a whole number of features, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < (0 if allow_zero else 1):
        raise ConfigError(f"{name}: n_select must be 'auto' or a whole number >= {0 if allow_zero else 1}, got "
                          f"{value!r}")
    return int(value)


@dataclass
class FilterParams(Checked):
    """Parameters every filter method has.

    Parameters
    ----------
    n_select : int or "auto"
        N, the number of features to select over all parties; ``"auto"`` (default) = chosen by the
        label holder on its validation split over the grid of :func:`auto_grid` (half of the
        features, then halved down to 2): the smallest N whose validation accuracy (R^2 for a
        regression) is at most ``auto_tol`` below the best N's, the way LESS-VFL chooses its
        ``lambda_m`` (less-vfl.md, our ``choose_m="val"``). The search's selections and the
        columns it gathers are counted on the ledger (``info["auto"]``). The papers fix N per data
        set (feast.md section 5: 10 to 50); a number reproduces them. Before issue 53 the default
        was 10 whatever the width (.52 on a held-out 26-class table of 925 columns where 100
        features reach .91).
    classifier : str
        Model trained on the selected columns for ``metrics_``: lr, svm, rf, xgboost or mlp
        (default lr).
    auto_tol : float
        ``n_select="auto"``: how far below the grid's best validation accuracy the chosen N may
        be (0.01). Measured (issue 53, ``benchmarks/generalise/filters.py --rules`` over eight
        sets, seed 0): 0.02 and 0.03 lost 5-6 points on breast cancer (FEAST and SFFS kept 2-3
        columns) and 1.7 on USPS (``mi``); 0 kept up to twice the columns for gains of at most a point.
        The before/after table is in docs/methods/feast.md, "Choosing N".
    auto_cv_below : int
        ``n_select="auto"`` with fewer validation rows than this (100): each N is scored by 5-fold
        cross-validation over the training and validation rows instead (ours, issue 53: on wine's
        18 validation rows every N of the grid scored 100 % and the smallest, 2, was kept: .833
        on the test rows where 10 features reach .972). 0 = always the validation rows.
    """

    n_select: int | str = AUTO
    classifier: str = "lr"
    auto_tol: float = AUTO_TOL
    auto_cv_below: int = AUTO_CV_BELOW

    #: the values each field may take (:mod:`verticalfs.params`)
    constraints: ClassVar[Constraints] = {
        "n_select": [Interval(int, 1, None), Options(AUTO)],
        "classifier": [Options(*CLASSIFIERS)],
        "auto_tol": [Interval(float, 0, 1, closed="left")],
        "auto_cv_below": [Interval(int, 0, None)],
    }


def _cv_folds(y: np.ndarray, task: str, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """:data:`AUTO_CV_FOLDS` (train, test) row positions of ``y``, stratified for a classification
    whose every class has as many rows, seeded."""
    from sklearn.model_selection import KFold, StratifiedKFold

    k = AUTO_CV_FOLDS
    strat = task != "regression" and np.bincount(np.asarray(y, dtype=np.int64)).min(initial=k) >= k
    cv = (StratifiedKFold if strat else KFold)(n_splits=k, shuffle=True, random_state=seed % 2**32)
    return [(a, b) for a, b in cv.split(np.zeros(len(y)), y if strat else None)]


def _hold_out(X: np.ndarray, y: np.ndarray, task: str, seed: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(X_fit, y_fit, X_held, y_held)``: a fifth of the rows held out (stratified for a
    classification when every class has two rows), seeded."""
    from sklearn.model_selection import train_test_split

    strat = None
    if task != "regression" and len(y) and np.bincount(np.asarray(y, dtype=np.int64)).min(initial=2) >= 2:
        strat = y
    try:
        a, b, c, d = train_test_split(X, y, test_size=0.2, random_state=seed % 2**32, stratify=strat)
    except ValueError:  # too few rows of a class for a stratified split
        a, b, c, d = train_test_split(X, y, test_size=0.2, random_state=seed % 2**32)
    return a, c, b, d


class FilterHolder(HolderPart):
    """The label holder's part of a saved filter-method model (kind ``"filter"``)."""

    selected: list[list[Any]]
    classifier: dict[str, Any]


def _saved_classifier(c: dict[str, Any], task: str, n_classes: int) -> Any:
    """The classifier of a saved filter-method model, rebuilt from its numbers."""
    name = c.get("name")
    if name == "constant":
        model = ConstantModel.__new__(ConstantModel)
        model.task, model.n_classes, model.value = task, n_classes, c["value"].numpy()
        return model
    if name == "LogisticRegression":
        from sklearn.linear_model import LogisticRegression

        model = LogisticRegression()
        model.coef_, model.intercept_ = c["coef"].numpy(), c["intercept"].numpy()
        model.classes_ = np.asarray(c["classes"])
        return model
    if name == "Ridge":
        from sklearn.linear_model import Ridge

        model = Ridge()
        model.coef_, model.intercept_ = c["coef"].numpy(), float(c["intercept"].numpy()[0])
        return model
    raise ConfigError(f"the saved filter-method model names an unknown classifier {name!r}")


class _Evaluation:
    """A filter method's run as its callbacks see it (:class:`~verticalfs.training.history.Run`):
    one step, its selection and evaluation (a round-based selection, FATE's lasso, runs a loop of
    its own inside it)."""

    unit = "epoch"

    def __init__(self) -> None:
        self.position = 0


class FilterMethod(Method):
    """Selects ``n_select`` features across parties, then trains ``classifier`` on them.

    Subclasses implement :meth:`select` (and set ``Role`` to a :class:`FilterRole` subclass that
    handles their selection messages). :meth:`fit` asks the parties' schemas, joins them
    (``Join(name, join_spec())``, phase ``setup``), selects, gathers, and sets

    - ``support_``: bool mask per party (the selected features);
    - ``selected_``: list of ``(party, index)`` in selection order;
    - ``info_``: ``selected`` (``"party:feature_name"`` in order), ``selection_bytes``,
      ``selection_seconds``, ``gather_bytes`` (plus whatever :meth:`select` put there);
    - ``metrics_``: test metrics of the classifier (``prediction_metrics``);
    - ``history_``: one entry ``{"epoch": 0, "phase": "selection", "bytes": selection + gather bytes,
      "bytes_total": ..., test metrics, val_ metrics}``.
    """

    Params = FilterParams
    Role = FilterRole
    codec_policy = "none"
    test_params = {"n_select": 5}
    disclosures = {"columns_to_label_holder": ("Columns",)}
    #: a subclass that selects every feature (``raw``) sets this to skip the n_select check
    selects_all: bool = False
    #: learned by :meth:`fit`: the classifier on the selected columns, and the selection in order
    classifier_ = None
    selected_: list[tuple[str, int]] | None = None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._scores: dict[tuple[str, int], float] = {}  # record_scores: (party, index) -> score

    @abstractmethod
    def select(self, fed: Federation) -> list[tuple[str, int]]:
        """Selected features in order as ``(party name, index into that party's prepared features)``.

        Sends its messages through ``fed.proxy(name)`` in phase ``selection``.
        """

    #: True when the selection of N features is the first N of the selection of any larger N (a
    #: ranking: ``mi``, ``random``, greedy ``cfeast``, ``sffs``, ``ms-gini``, ``fate-iv``), so that
    #: ``n_select="auto"`` selects once, at the grid's largest N; False (``feast``, whose rounds
    #: depend on N) selects once per N of the grid
    nested: bool = True
    #: how many features the last selection's scores rank ahead of the others, which tie among
    #: themselves (``None``: every feature is ranked); ``n_select="auto"`` searches no N beyond it.
    #: sbt-filter's trees split on a few features only: the rest tie at importance 0 in party and
    #: column order, so an N beyond them adds columns by their position in a party's table (issue 53:
    #: on the generalisation suite's 20-class set 28 features were split on and N = 384 was chosen,
    #: 356 of them by position)
    n_ranked_: int | None = None

    def select_auto(self, fed: Federation) -> list[tuple[str, int]]:
        """``n_select="auto"``: the label holder's choice of N on its validation split.

        Over the grid of :func:`auto_grid`: the selection of each N (one selection at the largest
        N when :attr:`nested`, else one per N; phase ``selection``), the union of the candidates'
        columns of the training and validation rows gathered (phase ``train``), ``classifier``
        fitted on each candidate's training columns and scored on the validation rows (accuracy,
        R^2 for a regression); the smallest N at most ``auto_tol`` below the best is chosen
        (LESS-VFL's rule for ``lambda_m``, less-vfl.md; ours for the filters). Without validation
        rows, a stratified fifth of the training rows is held out for the choice. Everything the
        search sends is on the ledger; ``info_["auto"]`` holds the grid, each N's validation score,
        the choice and the search's bytes (``n_select`` is the chosen N in ``info_``)."""
        p = self.params
        total = sum(len(v) for v in self.feature_names(fed).values())
        grid = auto_grid(total)
        led = fed.ledger
        b0 = led.total_bytes
        candidates: dict[int, list[tuple[str, int]]] = {}
        try:
            if self.nested:
                p.n_select = grid[-1]
                order = [(str(q), int(i)) for q, i in self.select(fed)]
                if self.n_ranked_ is not None and 0 < self.n_ranked_ < grid[-1]:
                    grid = sorted({n for n in grid if n < self.n_ranked_} | {self.n_ranked_})
                candidates = {n: order[:n] for n in grid}
            else:
                for n in grid:
                    p.n_select = n
                    candidates[n] = [(str(q), int(i)) for q, i in self.select(fed)]
        finally:
            p.n_select = AUTO
        b1 = led.total_bytes
        union = list(dict.fromkeys(f for n in grid for f in candidates[n]))
        col = {f: k for k, f in enumerate(union)}
        X, y = self.gather(fed, union, splits=("train", "val"))
        b2 = led.total_bytes
        lab = fed.labels
        Xtr, ytr, Xva, yva, held = X["train"], y["train"], X["val"], y["val"], False
        if not len(yva):
            Xtr, ytr, Xva, yva = _hold_out(Xtr, ytr, lab.task, self.seed)
            held = True
        key = "r2" if lab.task == "regression" else "accuracy"
        # a small validation split cannot tell the candidates apart (wine's 18 rows: every N at
        # 100 %): below auto_cv_below rows, each N is scored by cross-validation over the training
        # and validation rows together (both already here)
        folds = _cv_folds(np.concatenate([ytr, yva]), lab.task, self.seed) if (
            not held and len(yva) < int(p.auto_cv_below)) else None
        scores = {}
        for k, n in enumerate(grid):
            for cb in self.callbacks:
                cb.on_stage_step(self, f"n_select=auto: scoring N={n}", k + 1, len(grid))
            cols = [col[f] for f in candidates[n]]
            if folds is None:
                parts = [(Xtr[:, cols], ytr, Xva[:, cols], yva)]
            else:
                Xall, yall = np.concatenate([Xtr, Xva])[:, cols], np.concatenate([ytr, yva])
                parts = [(Xall[a], yall[a], Xall[b], yall[b]) for a, b in folds]
            vals = []
            for Xf, yf, Xs, ys in parts:
                model = fit_classifier(Xf, yf, p.classifier, seed=self.seed, task=lab.task, n_classes=lab.n_classes)
                out = classifier_output(model, Xs, lab.task, lab.n_classes)
                vals.append(float(prediction_metrics(lab.task, ys, out, lab.n_classes).get(key, float("nan"))))
            scores[n] = float(np.mean(vals))
        best = max(scores.values())
        chosen = min(n for n in grid if scores[n] >= best - float(p.auto_tol))
        self.info_["auto"] = {
            "grid": grid, "val_scores": [scores[n] for n in grid], "metric": key, "tol": float(p.auto_tol),
            "chosen": int(chosen), "best": int(max(grid, key=lambda n: (scores[n], -n))),
            "held_out_train": held, "cv_folds": 0 if folds is None else len(folds),
            "selection_runs": 1 if self.nested else len(grid),
            "search_selection_bytes": int(b1 - b0), "search_gather_bytes": int(b2 - b1),
        }
        self.info_["n_select"] = int(chosen)  # a line of the run's table
        return candidates[chosen]

    def record_scores(self, party: str, indices: Any, scores: Any) -> None:
        """Remember the score the method gave features of ``party`` (the latest one counts); they
        become ``feature_scores_`` and the result's per-column scores."""
        for i, v in zip(np.asarray(indices).reshape(-1).tolist(), np.asarray(scores, dtype=np.float64).reshape(-1).tolist(),
                        strict=True):
            self._scores[(str(party), int(i))] = float(v)

    def join_spec(self, fed: Federation) -> Any:
        """The ``spec`` of the ``Join`` every party receives (default none)."""
        return None

    def feature_names(self, fed: Federation) -> dict[str, list[str]]:
        """The parties' prepared feature names (their schemas, or the pooled data's)."""
        if self.needs_pooled_data:
            return {p.name: list(p.feature_names) for p in fed.pooled_data().parties}
        names: dict[str, list[str]] = fed.feature_names()
        return names

    # ------------------------------------------------------------------ checks
    def check_params(self, fed: Federation) -> None:
        """Validate ``n_select`` and ``classifier`` against the federation."""
        p = self.params
        if p.classifier not in CLASSIFIERS:
            raise ConfigError(f"{self.name}: unknown classifier {p.classifier!r}; use one of {CLASSIFIERS}")
        if self.selects_all:
            return
        if not 0 <= float(p.auto_tol) < 1:
            raise ConfigError(f"{self.name}: auto_tol must lie in [0, 1), got {p.auto_tol}")
        p.n_select = resolve_n_select(self.name, p.n_select)
        if p.n_select == AUTO:
            return
        total = sum(len(v) for v in self.feature_names(fed).values())
        if not 1 <= int(p.n_select) <= total:
            raise ConfigError(f"{self.name}: n_select must be between 1 and the {total} features of all "
                              f"parties, got {p.n_select}")

    # --------------------------------------------------------------------- fit
    def join_parties(self, fed: Federation) -> None:
        """Set-up (phase ``setup``): the parties' schemas, the parameter checks against them, and
        every party's ``Join``. :meth:`fit` starts with it; call it before :meth:`select` alone."""
        self.feature_names(fed)  # the schema exchange comes first
        self.check_params(fed)
        if self.Role is not None and not self.needs_pooled_data:
            fed.join(self.name, self.join_spec(fed), expect=Ack)

    def fit(self, fed: Federation) -> Self:
        self.join_parties(fed)
        run = _Evaluation()
        for cb in self.callbacks:
            cb.on_train_begin(run, 1, "selection")
        try:
            entry = self._select_and_evaluate(fed)
            run.position = 1
            for cb in self.callbacks:
                cb.on_epoch_end(run, entry)
        finally:
            for cb in self.callbacks:
                cb.on_train_end(run)
        return self

    def _select_and_evaluate(self, fed: Federation) -> dict[str, Any]:
        """Select, gather, train the classifier; the history entry of the evaluation."""
        led = fed.ledger
        b0 = led.total_bytes
        t0 = time.perf_counter()
        if self.params.n_select == AUTO and not self.selects_all:
            selected = self.select_auto(fed)
        else:
            selected = [(str(p), int(i)) for p, i in self.select(fed)]
        t_sel = time.perf_counter() - t0
        b1 = led.total_bytes
        names = self.feature_names(fed)
        self._check_selected(selected, names)
        self.selected_ = selected
        self.support_ = {p: np.zeros(len(n), dtype=bool) for p, n in names.items()}
        for p, i in selected:
            self.support_[p][i] = True
        self.feature_scores_ = {p: np.full(len(n), np.nan) for p, n in names.items()}
        for (p, i), v in self._scores.items():
            if p in self.feature_scores_ and 0 <= i < len(self.feature_scores_[p]):
                self.feature_scores_[p][i] = v

        X, y = self.gather(fed, selected)
        b2 = led.total_bytes
        lab = fed.labels
        splits = [s for s in ("test", "val") if len(y[s])]
        self.classifier_ = fit_classifier(X["train"], y["train"], self.params.classifier, seed=self.seed,
                                          task=lab.task, n_classes=lab.n_classes)
        outs = [classifier_output(self.classifier_, X[s], lab.task, lab.n_classes) for s in splits]
        entry: dict[str, Any] = {"epoch": 0, "phase": "selection", "bytes": int(b2 - b0), "bytes_total": int(led.total_bytes)}
        self.metrics_ = {}
        for s, out in zip(splits, outs, strict=True):
            met = prediction_metrics(lab.task, y[s], out, lab.n_classes)
            if s == "test":
                self.metrics_ = met
                entry.update(met)
            else:
                entry.update({f"val_{k}": v for k, v in met.items()})
        if self.entry_hook is not None:
            self.entry_hook(entry)
        self.history_ = History([entry])
        self.info_.update(
            selected=[f"{p}:{names[p][i]}" for p, i in selected],
            n_selected=len(selected),
            selection_bytes=int(b1 - b0),
            selection_seconds=float(t_sel),
            gather_bytes=int(b2 - b1),
        )
        return entry

    # --------------------------------------------------------- saved models
    #: the classifiers a saved model holds as plain numbers (a model file unpickles nothing)
    saveable_classifiers = ("lr",)

    def cannot_save(self) -> str | None:
        if self.params.classifier not in self.saveable_classifiers:
            return (f"a saved filter-method model keeps its classifier as plain numbers, which "
                    f"classifier={self.params.classifier!r} cannot be; use classifier=lr")
        return super().cannot_save()

    def export_holder(self) -> FilterHolder:
        """The label holder's part of a saved model (kind ``"filter"``): the selected features in
        order and the classifier's coefficients (``LogisticRegression``, or ``Ridge`` for
        regression), or the training prior / mean of a model without features (``constant``)."""
        why = self.cannot_save()
        if why:
            raise ConfigError(f"{self.name}: {why}")
        clf = self.classifier_
        if clf is None:
            raise ConfigError(f"{self.name} has no model to save (fit it first)")
        out: FilterHolder = {"kind": "filter", "selected": [[p, int(i)] for p, i in self.selected_ or []],
                             "classifier": {}}
        if isinstance(clf, ConstantModel):
            out["classifier"] = {"name": "constant", "value": torch.as_tensor(np.asarray(clf.value, dtype=np.float64))}
            return out
        from sklearn.linear_model import Ridge

        regression = isinstance(clf, Ridge)  # classifier=lr on a regression task
        out["classifier"] = {"name": "Ridge" if regression else "LogisticRegression",
                             "coef": torch.as_tensor(np.asarray(clf.coef_)),
                             "intercept": torch.as_tensor(np.atleast_1d(np.asarray(clf.intercept_, dtype=np.float64))),
                             "classes": [] if regression else [int(c) for c in clf.classes_]}
        return out

    @classmethod
    def predict_from_holder(cls, holder: HolderPart, fed: FederationView, split: str) -> np.ndarray:
        """The selected columns of ``split`` gathered from the parties (phase ``eval``), then the
        saved classifier."""
        expect_holder_kind(holder, "filter", cls.name)
        part: FilterHolder = holder  # type: ignore[assignment]  # its kind was checked
        at = At("eval")
        n = fed.n_samples(split)
        task, n_classes = fed.labels.task, fed.labels.n_classes
        selected = [(str(p), int(i)) for p, i in part["selected"]]
        blocks: list[np.ndarray] = []
        order: list[int] = []
        for p in fed.party_names:
            idx = [i for q, i in selected if q == p]
            rep = fed.proxy(p).request(GatherColumns(split=split, indices=np.asarray(idx, dtype=np.int64)), at,
                                       expect=Columns)
            blocks.append(np.asarray(rep.values, dtype=np.float64).reshape(n, len(idx)))
            order += [k for k, (q, _) in enumerate(selected) if q == p]
        X = np.concatenate(blocks, 1)[:, np.argsort(order)] if blocks else np.zeros((n, 0))
        out: np.ndarray = classifier_output(_saved_classifier(part["classifier"], task, n_classes), X, task, n_classes)
        return out

    def _check_selected(self, selected: list[tuple[str, int]], names: dict[str, list[str]]) -> None:
        seen: set[tuple[str, int]] = set()
        for p, i in selected:
            if p not in names or not 0 <= i < len(names[p]):
                raise ProtocolError(f"{self.name}: selected feature ({p!r}, {i}) does not exist")
            if (p, i) in seen:
                raise ProtocolError(f"{self.name}: feature ({p!r}, {i}) selected twice")
            seen.add((p, i))

    def gather(self, fed: Federation, selected: list[tuple[str, int]], splits: tuple[str, ...] = SPLITS
               ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Pool the selected columns of every split (of ``splits``) at the active party, in
        selection order.

        Every party is asked (an empty index list for a party with nothing selected) so that each
        party records which of its features were kept. Phase ``train``.
        """
        y = {s: np.asarray(fed.labels.y[s]) for s in splits}
        # per party: its selected indices and their positions in the selection order
        where = {p: ([i for q, i in selected if q == p], [k for k, (q, _) in enumerate(selected) if q == p])
                 for p in fed.party_names}
        pos = np.asarray([k for p in fed.party_names for k in where[p][1]], dtype=np.int64)
        X = {}
        for s in splits:
            blocks = []
            for p in fed.party_names:
                idx = np.asarray(where[p][0], dtype=np.int64)
                rep = fed.proxy(p).request(GatherColumns(split=s, indices=idx), GATHER, expect=Columns)
                v = np.asarray(rep.values, dtype=np.float32)
                if v.shape != (len(y[s]), len(idx)):
                    raise ProtocolError(f"party {p!r} sent columns of shape {v.shape} for {s}, expected "
                                        f"{(len(y[s]), len(idx))}")
                blocks.append(v)
            M = np.concatenate(blocks, 1) if blocks else np.zeros((len(y[s]), 0), np.float32)
            X[s] = M[:, np.argsort(pos)] if pos.size else M
        return X, y
