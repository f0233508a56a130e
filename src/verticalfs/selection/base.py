"""The base class of filter-type selection methods (FEAST and its baselines, FATE's IV and lasso).

A filter method first *selects* N features across the parties (:meth:`FilterMethod.select`,
messages in phase ``selection`` only), then the selected columns of every split are gathered at
the active party (:class:`~verticalfs.selection.messages.GatherColumns`, phase ``train``) and a
classifier is trained there on the training rows: the papers' evaluation (feast.md section 5).
"""

from __future__ import annotations

import time
from abc import abstractmethod
from dataclasses import dataclass

import numpy as np

from verticalfs.data.vertical import ACTIVE, SPLITS
from verticalfs.evaluation.metrics import prediction_metrics
from verticalfs.exceptions import ConfigError, ProtocolError
from verticalfs.methods.base import Method
from verticalfs.selection.evaluate import CLASSIFIERS, fit_predict
from verticalfs.selection.messages import Columns, GatherColumns
from verticalfs.training.history import History


@dataclass
class FilterParams:
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


class FilterMethod(Method):
    """Selects ``n_select`` features across parties, then trains ``classifier`` on them.

    Subclasses implement :meth:`select`. :meth:`fit` sets

    - ``support_``: bool mask per party (the selected features);
    - ``selected_``: list of ``(party, index)`` in selection order;
    - ``info_``: ``selected`` (``"party:feature_name"`` in order), ``selection_bytes``,
      ``selection_seconds``, ``gather_bytes`` (plus whatever :meth:`select` put there);
    - ``metrics_``: test metrics of the classifier (``prediction_metrics``);
    - ``history_``: one entry ``{"epoch": 0, "phase": "selection", "bytes": selection + gather bytes,
      "bytes_total": ..., test metrics, val_ metrics}``.
    """

    Params = FilterParams
    #: a subclass that selects every feature (``raw``) sets this to skip the n_select check
    selects_all: bool = False

    @abstractmethod
    def select(self, fed) -> list[tuple[str, int]]:
        """Selected features in order as ``(party name, index into that party's prepared features)``.

        Runs inside ``fed.channel.at("selection")``; uses only messages on ``fed.channel``.
        """

    # ------------------------------------------------------------------ checks
    def check_params(self, fed) -> None:
        """Validate ``n_select`` and ``classifier`` against the federation."""
        p = self.params
        if p.classifier not in CLASSIFIERS:
            raise ConfigError(f"{self.name}: unknown classifier {p.classifier!r}; use one of {CLASSIFIERS}")
        if self.selects_all:
            return
        total = sum(len(v) for v in fed.feature_names().values())
        if not 1 <= int(p.n_select) <= total:
            raise ConfigError(f"{self.name}: n_select must be between 1 and the {total} features of all "
                              f"parties, got {p.n_select}")

    # --------------------------------------------------------------------- fit
    def fit(self, fed) -> FilterMethod:
        self.check_params(fed)
        for cb in self.callbacks:
            cb.on_train_begin(self, 1, "selection")
        led = fed.ledger
        b0 = led.total_bytes
        t0 = time.perf_counter()
        with fed.channel.at("selection"):
            selected = [(str(p), int(i)) for p, i in self.select(fed)]
        t_sel = time.perf_counter() - t0
        b1 = led.total_bytes
        names = fed.feature_names()
        self._check_selected(selected, names)
        self.selected_ = selected
        self.support_ = {p: np.zeros(len(n), dtype=bool) for p, n in names.items()}
        for p, i in selected:
            self.support_[p][i] = True

        X, y = self.gather(fed, selected)
        b2 = led.total_bytes
        lab = fed.server.labels
        splits = [s for s in ("test", "val") if len(y[s])]
        outs = fit_predict(X["train"], y["train"], [X[s] for s in splits], self.params.classifier,
                           seed=self.seed, task=lab.task, n_classes=lab.n_classes)
        entry: dict = {"epoch": 0, "phase": "selection", "bytes": int(b2 - b0), "bytes_total": int(led.total_bytes)}
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
        for cb in self.callbacks:
            cb.on_epoch_end(self, entry)
        for cb in self.callbacks:
            cb.on_train_end(self)
        self.info_.update(
            selected=[f"{p}:{names[p][i]}" for p, i in selected],
            n_selected=len(selected),
            selection_bytes=int(b1 - b0),
            selection_seconds=float(t_sel),
            gather_bytes=int(b2 - b1),
        )
        return self

    def _check_selected(self, selected, names) -> None:
        seen = set()
        for p, i in selected:
            if p not in names or not 0 <= i < len(names[p]):
                raise ProtocolError(f"{self.name}: selected feature ({p!r}, {i}) does not exist")
            if (p, i) in seen:
                raise ProtocolError(f"{self.name}: feature ({p!r}, {i}) selected twice")
            seen.add((p, i))

    def gather(self, fed, selected: list[tuple[str, int]]) -> tuple[dict, dict]:
        """Pool the selected columns of every split at the active party, in selection order.

        Every party is asked (an empty index list for a party with nothing selected) so that each
        party records which of its features were kept. Phase ``train``.
        """
        y = {s: np.asarray(fed.server.labels.y[s]) for s in SPLITS}
        # per party: its selected indices and their positions in the selection order
        where = {p: ([i for q, i in selected if q == p], [k for k, (q, _) in enumerate(selected) if q == p])
                 for p in fed.party_names}
        pos = np.asarray([k for p in fed.party_names for k in where[p][1]], dtype=np.int64)
        X = {}
        with fed.channel.at("train"):
            for s in SPLITS:
                blocks = []
                for p in fed.party_names:
                    idx = np.asarray(where[p][0], dtype=np.int64)
                    rep = fed.channel.request(ACTIVE, p, GatherColumns(split=s, indices=idx))
                    if not isinstance(rep, Columns):
                        raise ProtocolError(f"party {p!r} answered GatherColumns with {type(rep).__name__}")
                    blocks.append(np.asarray(rep.values, dtype=np.float32).reshape(len(y[s]), len(idx)))
                M = np.concatenate(blocks, 1) if blocks else np.zeros((len(y[s]), 0), np.float32)
                X[s] = M[:, np.argsort(pos)] if pos.size else M
        return X, y
