"""A feature party's side of FEAST: its discretised sample, its candidates and their scores.

:class:`FeastPartyState` lives in ``party.state["feast"]`` of a passive party. It holds only what
the party owns or was sent: its own columns' bin codes on the sampled rows, the sampled labels
(sent by the label holder, feast.md section 4.1) and the statistical variables received from the
selected parties (section 4.2). Scores are kept as running sums over the statistical variables, so
each round only scores the candidates against the newly received ``V^t`` (one
:func:`numpy.bincount` per variable for all candidates at once).
"""

from __future__ import annotations

import numpy as np

from verticalfs.exceptions import ConfigError
from verticalfs.selection.discretize import SUPERVISED, apply_bins, check_discretizer, fit_bins_blocked
from verticalfs.selection.info import ESTIMATORS, adjusted_mutual_info, column_mutual_info, normalised_cmi_pair

SCORES: tuple[str, ...] = ("su", "su-noalpha", "cmi")
#: an SU value at or below this counts as 0 (identical feature), absorbing rounding in the entropies
ZERO = 1e-12


def party_edges(X_train: np.ndarray, rows: np.ndarray | None, labels: np.ndarray, discretizer: str, bins: int,
                supervised_bins: bool, party: str) -> np.ndarray:
    """The cut points a party bins its own columns with (see :func:`discretize_party`), fitted
    without a copy of its table (:func:`~verticalfs.selection.discretize.fit_bins_blocked`)."""
    key = check_discretizer(discretizer, has_labels=True, party=party)
    if key in SUPERVISED and not supervised_bins:
        raise ConfigError(
            f"party {party!r} holds no labels of its own, so it cannot fit the supervised discretizer "
            f"{key!r}: only the label holder can run a supervised method on its own columns, and in "
            "verticalfs the label holder holds no feature columns. Use discretizer='equal-frequency' (the "
            "paper's default) or 'equal-width', or set supervised_bins=True to let each party fit the bins "
            "on the labels of the sampled rows that FEAST already sends it"
        )
    if key in SUPERVISED:
        return fit_bins_blocked(X_train, key, bins, labels, party=party, rows=rows)
    return fit_bins_blocked(X_train, key, bins, party=party)


def discretize_party(X_train: np.ndarray, rows: np.ndarray | None, labels: np.ndarray, discretizer: str,
                     bins: int, supervised_bins: bool, party: str) -> np.ndarray:
    """Bin codes of a party's own columns on the sampled rows.

    Unsupervised bins are fitted on all of the party's training rows (its own data) and applied to
    the sampled rows. A supervised discretiser (``mdlp``, ``chimerge``) needs labels: a feature party
    only has the labels of the sampled rows, which FEAST sent it for scoring. Using them to fit bins
    is allowed only with ``supervised_bins=True``; otherwise :class:`ConfigError` names the party.

    ``X_train`` is read in row blocks and column groups (issue 39): a memory-mapped table is never
    copied whole; the codes are those of the sampled rows only (FEAST's sample, feast.md 4.1).
    """
    edges = party_edges(X_train, rows, labels, discretizer, bins, supervised_bins, party)
    return apply_bins(X_train, edges, rows=rows)


class FeastPartyState:
    """One party's FEAST state.

    Parameters
    ----------
    codes : int array (L', d)
        Bin codes of the party's prepared columns on the sampled rows.
    labels : int array (L',)
        Labels of the sampled rows (from the label holder).
    seed : int
        The party's own seed for the random feature groups of its statistical variables.
    """

    def __init__(self, codes: np.ndarray, labels: np.ndarray, seed: int = 0) -> None:
        self.codes = np.asarray(codes, dtype=np.int32)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.seed = int(seed)
        #: the permutations of the ``adjusted`` estimator: a stream of its own beside its groups' (from
        #: ``seed``, which the label holder derives: it could compute them, see ``LabelScoresRequest``)
        self.null_rng = np.random.default_rng([self.seed, 0x6E756C6C])
        d = self.codes.shape[1]
        self.candidate = np.ones(d, dtype=bool)
        self.sum_score = np.zeros(d)
        self.min_score = np.full(d, np.inf)
        self.n_v = 0
        self.pending: list[np.ndarray] = []
        self.selected: list[int] = []
        self.deleted_overlap: list[int] = []
        self.deleted_tail: list[int] = []

    # ------------------------------------------------------------------ scoring
    def receive(self, V: np.ndarray) -> None:
        """Store a statistical variable ``V^t`` (rows, groups); scored at the next request."""
        V = np.asarray(V)
        self.pending.append(V.reshape(len(V), -1))

    def score(self, score: str = "su", overlap_delete: bool = True, overlap_ratio: float = 0.1,
              estimator: str = "plugin") -> tuple[np.ndarray, np.ndarray, int]:
        """Scores of the remaining candidates, best first: ``(indices, scores, n_deleted)``.

        Without statistical variables (round 1) the score is ``I(Y; F_i)`` (feast.md equation 3).
        Otherwise it is equation 13, the mean over all received ``V_j`` of equation 12, after
        overlapping-feature deletion (section 4.3): a candidate whose smallest per-``V_j`` score is 0
        (identical to a merged selected group) or below ``overlap_ratio`` times the median over the
        party's candidates of that smallest score (similar) is deleted and not reported.

        Interpretation (section 4.3 says "SU values less than one-tenth of the median"): the median
        is taken over the party's candidates of each candidate's smallest SU value, as in the
        public FEAST implementation (which divides by 100 where the paper says a tenth; we follow
        the paper).

        ``estimator``: ``plugin`` (the paper's empirical probabilities) or ``adjusted`` (each
        ``I(Y; F_i)`` and ``I(Y; F_i | V_j)`` of the ranking less its mean under label permutation,
        drawn from the state's ``seed``: :func:`~verticalfs.selection.info.null_joint_entropy`).
        Overlap deletion tests the plug-in SU values either way: the paper's "identical" (0) and
        "similar" (under a tenth of the median) are statements about them, and an adjusted value
        of about 0 means "no information beyond chance given this V_j", which would delete most
        weak features after a few rounds (breast cancer: FEAST stopped at 6-12 features).
        """
        if score not in SCORES:
            raise ConfigError(f"unknown FEAST score {score!r}; use one of {SCORES}")
        if estimator not in ESTIMATORS:
            raise ConfigError(f"unknown FEAST estimator {estimator!r}; use one of {ESTIMATORS}")
        idx = np.flatnonzero(self.candidate)
        n_del = 0
        if self.n_v == 0 and not self.pending:
            C = self.codes[:, idx]
            if not idx.size:
                s = np.zeros(0)
            elif estimator == "adjusted":
                s = adjusted_mutual_info(C, self.labels, self.null_rng)
            else:
                s = column_mutual_info(C, self.labels)
        else:
            for V in self.pending:
                for v in V.T:
                    if idx.size:
                        su, plugin = normalised_cmi_pair(self.codes[:, idx], self.labels, v, score, estimator,
                                                         self.null_rng)
                        self.sum_score[idx] += su
                        self.min_score[idx] = np.minimum(self.min_score[idx], plugin)
                    self.n_v += 1
            self.pending = []
            if overlap_delete and idx.size:
                mins = self.min_score[idx]
                med = float(np.median(mins))
                drop = (mins <= ZERO) | (mins < overlap_ratio * med)
                if drop.any():
                    self.candidate[idx[drop]] = False
                    self.deleted_overlap += idx[drop].tolist()
                    n_del = int(drop.sum())
                    idx = idx[~drop]
            s = self.sum_score[idx] / max(self.n_v, 1)
        order = np.lexsort((idx, -s))  # best first, ties by feature index
        return idx[order].astype(np.int64), s[order], n_del

    def select(self, indices) -> None:
        idx = np.asarray(indices, dtype=np.int64)
        self.candidate[idx] = False
        self.selected += idx.tolist()

    def drop(self, indices) -> None:
        idx = np.asarray(indices, dtype=np.int64)
        self.candidate[idx] = False
        self.deleted_tail += idx.tolist()
