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


@dataclass
class FilterParams(Checked):
    """Parameters every filter method has.

    Parameters
    ----------
    n_select : int
        N, the number of features to select over all parties (default 10).
    classifier : str
        Model trained on the selected columns for ``metrics_``: lr, svm, rf, xgboost or mlp
        (default lr).
    """

    n_select: int = 10
    classifier: str = "lr"

    #: the values each field may take (:mod:`verticalfs.params`)
    constraints: ClassVar[Constraints] = {
        "n_select": [Interval(int, 1, None)],
        "classifier": [Options(*CLASSIFIERS)],
    }


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

    def gather(self, fed: Federation, selected: list[tuple[str, int]]) -> tuple[dict[str, np.ndarray],
                                                                               dict[str, np.ndarray]]:
        """Pool the selected columns of every split at the active party, in selection order.

        Every party is asked (an empty index list for a party with nothing selected) so that each
        party records which of its features were kept. Phase ``train``.
        """
        y = {s: np.asarray(fed.labels.y[s]) for s in SPLITS}
        # per party: its selected indices and their positions in the selection order
        where = {p: ([i for q, i in selected if q == p], [k for k, (q, _) in enumerate(selected) if q == p])
                 for p in fed.party_names}
        pos = np.asarray([k for p in fed.party_names for k in where[p][1]], dtype=np.int64)
        X = {}
        for s in SPLITS:
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
