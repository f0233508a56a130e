"""The feature parties' side of FEAST and of the ``mi`` baseline (feast.md section 4, Figure 2).

:class:`FeastRole` holds one party's :class:`~verticalfs.methods.feast.party.FeastPartyState` (its
own columns' bin codes on the sampled rows, the sampled labels it was sent, the statistical
variables it received) and answers the label holder's messages; the party selected in a round
sends its statistical variables *directly* to the candidate parties (:class:`StatVariables`,
party to party, the only handler that accepts messages from other feature parties).
:class:`MIRole` answers the ``mi`` baseline's one request.
"""

from __future__ import annotations

import numpy as np

from verticalfs.exceptions import ProtocolError
from verticalfs.methods.feast.messages import (
    DropCandidates,
    FeastSetup,
    FeatureScores,
    LabelScoresRequest,
    ScoreRequest,
    ShareSelected,
    StatVariables,
)
from verticalfs.methods.feast.party import FeastPartyState, discretize_party, party_edges
from verticalfs.methods.feast.statvar import random_groups, statistical_variables
from verticalfs.methods.filter import FilterRole
from verticalfs.party import Context, handles
from verticalfs.selection.info import ESTIMATORS, binned_mutual_info
from verticalfs.training.history import derive_seed


def _rows(rows) -> np.ndarray | None:
    return None if rows is None else np.asarray(rows, dtype=np.int64)


class FeastRole(FilterRole):
    """One feature party in FEAST."""

    state: FeastPartyState | None = None

    def _state(self) -> FeastPartyState:
        if self.state is None:
            raise ProtocolError(f"party {self.name!r} received a FEAST message before FeastSetup")
        return self.state

    @classmethod
    def policy_rules(cls, spec) -> tuple[str, ...]:
        return ("accept_labels",)  # FeastSetup carries the training labels (the paper's design)

    @handles(FeastSetup, policy="accept_labels")
    def on_setup(self, msg: FeastSetup, ctx: Context) -> None:
        codes = discretize_party(self.columns("train"), _rows(msg.rows), np.asarray(msg.labels), msg.discretizer,
                                 msg.bins, msg.supervised_bins, self.name)
        self.state = FeastPartyState(codes, msg.labels, seed=derive_seed(msg.seed, "feast-groups", self.name))
        return None

    @handles(ScoreRequest)
    def on_score(self, msg: ScoreRequest, ctx: Context) -> FeatureScores:
        if msg.estimator not in ESTIMATORS:
            raise ProtocolError(f"party {self.name!r}: ScoreRequest.estimator must be one of {ESTIMATORS}, got "
                                f"{msg.estimator!r}")
        idx, s, n_del = self._state().score(msg.score, msg.overlap_delete, msg.overlap_ratio, str(msg.estimator))
        if msg.top >= 0:
            idx, s = idx[: msg.top], s[: msg.top]
        return FeatureScores(indices=idx.astype(np.int32), scores=s.astype(np.float64), n_deleted=n_del)

    @handles(ShareSelected)
    def on_share_selected(self, msg: ShareSelected, ctx: Context) -> None:
        st = self._state()
        idx = np.asarray(msg.indices, dtype=np.int64)
        st.select(idx)
        if not msg.receivers:
            return None
        rng = np.random.default_rng([st.seed, int(msg.round)])
        V = statistical_variables(st.codes[:, idx], random_groups(len(idx), int(msg.m), rng))
        for r in msg.receivers:
            ctx.send(str(r), StatVariables(values=V))
        return None

    @handles(StatVariables, peers=True)
    def on_stat_variables(self, msg: StatVariables, ctx: Context) -> None:
        self._state().receive(msg.values)
        return None

    @handles(DropCandidates)
    def on_drop(self, msg: DropCandidates, ctx: Context) -> None:
        self._state().drop(msg.indices)
        return None


class MIRole(FilterRole):
    """One feature party in the ``mi`` baseline: bins its columns, scores them by ``I(Y; F_i)``."""

    @classmethod
    def policy_rules(cls, spec) -> tuple[str, ...]:
        return ("accept_labels",)  # LabelScoresRequest carries the training labels

    @handles(LabelScoresRequest, policy="accept_labels")
    def on_label_scores(self, msg: LabelScoresRequest, ctx: Context) -> FeatureScores:
        if msg.estimator not in ESTIMATORS:
            raise ProtocolError(f"party {self.name!r}: LabelScoresRequest.estimator must be one of {ESTIMATORS}, "
                                f"got {msg.estimator!r}")
        labels = np.asarray(msg.labels)
        X, rows = self.columns("train"), _rows(msg.rows)
        edges = party_edges(X, rows, labels, msg.discretizer, msg.bins, msg.supervised_bins, self.name)
        # counts over row blocks, no code matrix; the permutations of "adjusted" from the run's seed and its name
        rng = np.random.default_rng(derive_seed(int(msg.seed), "mi-null", self.name))
        s = binned_mutual_info(X, edges, labels, rows, str(msg.estimator), rng)
        order = np.lexsort((np.arange(len(s)), -s))
        if msg.top >= 0:
            order = order[: msg.top]
        return FeatureScores(indices=order.astype(np.int32), scores=s[order].astype(np.float64))
