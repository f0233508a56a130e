"""``feast``: FEAST, communication-efficient federated feature selection by conditional mutual
information (Fu et al., SIGMOD 2023; feast.md section 4).

Protocol (Figure 2), all messages in phase ``selection``:

1. **Sampling** (section 4.1, 4.6). The label holder draws a stratified sample of
   ``L' = min(L, B^(m+1) |Y|)`` training rows and sends the sampled row indices and **their labels
   to every feature party** (:class:`~verticalfs.methods.feast.messages.FeastSetup`). Each party
   bins its own prepared columns (equal-frequency, ``B = 8`` by default).
2. **Round 1**: every party scores its features by ``I(Y; F_i)`` (equation 3) and reports them.
3. **Ranking and selection** (section 4.4): the label holder ranks all reported scores, takes the
   top ``N-hat`` (``N-hat^1 = N``; afterwards ``N-hat^{t+1} = N-hat^t - N^t``), groups them by party
   and selects the party with the highest average score among them; that party's features in the
   top ``N-hat`` are selected. Optionally the bottom ``tail_delete`` % of the rest are pruned at
   their parties.
4. **Round t >= 2**: the party selected last round merges its newly selected features into a
   statistical variable ``V^t`` (random groups of at most ``m`` features, projection with duplicate
   elimination, Figure 3) and sends only ``V^t`` **directly to the remaining candidate parties**
   (party-to-party). Each candidate scores its candidates by equation 13 (the mean over all
   received ``V_j`` of the symmetric-uncertainty-normalised CMI of equation 12, with
   ``alpha = sqrt(|Y, F_i, V_j|)``), deletes overlapping features locally (a score of 0 or under
   ``overlap_ratio`` x the median) and reports the rest. Then step 3 again.
5. Rounds end when ``N`` features are selected. A party is selected at most once (section 4.5,
   ``t <= M``); if every party has been selected (or has no candidate left) before ``N`` features
   are chosen, selection stops early and ``info_["n_selected"] < n_select`` says so.

**Mapping to verticalfs.** In the paper the active party ``p_0`` holds the labels *and* features.
Here the label holder is the separate party ``"active"`` with no feature columns, and every feature
block is a passive party; so ``"active"`` does the sampling, ranking and selection, and the sampled
labels go to *every* feature party (in the paper, to the passive parties only: ``p_0`` already has
them).

**Privacy (read this before using FEAST).** FEAST is not label-private: the labels of the ``L'``
sampled rows (all training rows when ``L' = L``, as on PhysioNet 2012 with B = 8, m = 3) are sent
in the clear to every feature party. A feature party also receives, from each selected party, the
statistical variables of its selected features (group ids of merged bins, section 4.5 bounds the
chance of inverting them). The label holder learns feature scores and which features were
selected, never raw values. The selected columns are pooled at the label holder only afterwards,
for the evaluation classifier (phase ``train``, see :class:`~verticalfs.selection.FilterMethod`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from verticalfs.exceptions import ConfigError
from verticalfs.methods.feast.messages import (
    DropCandidates,
    FeastSetup,
    FeatureScores,
    ScoreRequest,
    ShareSelected,
)
from verticalfs.methods.feast.party import SCORES
from verticalfs.methods.feast.role import FeastRole
from verticalfs.methods.feast.statvar import smallest_uint
from verticalfs.methods.filter import FilterMethod, FilterParams
from verticalfs.methods.registry import register
from verticalfs.params import Constraints, Interval, Options, Predicate
from verticalfs.selection.discretize import canonical_discretizer
from verticalfs.selection.info import ESTIMATORS
from verticalfs.selection.sampling import resolve_sample_size, stratified_sample
from verticalfs.training.history import derive_seed
from verticalfs.transport.messages import At


def _known_discretizer(name: str) -> bool:
    try:
        canonical_discretizer(name)
    except ConfigError:
        return False
    return True


#: a discretiser's name (or an alias of one)
DISCRETIZER = Predicate(_known_discretizer, "equal-frequency, equal-width, mdlp or chimerge")


@dataclass
class FeastParams(FilterParams):
    """FEAST (feast.md section 4).

    Parameters
    ----------
    n_select : int or "auto"
        N, features to select over all parties; ``"auto"`` (default) = chosen by the label holder on
        its validation split (:meth:`~verticalfs.methods.filter.FilterMethod.select_auto`: FEAST's
        rounds depend on N, so one FEAST selection per N of the grid, each counted on the ledger).
        The paper sets N per data set (section 5); give it to reproduce them.
    classifier : str
        Model trained on the selected columns for the metrics: lr, svm, rf, xgboost, mlp.
    bins : int
        B, the maximum number of bins per feature (section 5: 8).
    discretizer : str
        equal-frequency (the paper's default), equal-width, mdlp or chimerge. The last two are
        supervised: refused at the feature parties unless ``supervised_bins``.
    supervised_bins : bool
        Let the feature parties fit a supervised discretizer on the sampled labels FEAST sends them
        (default False: only the label holder may run a supervised method, and it has no columns).
    m : int
        Merge parameter: at most m features per statistical-variable group (section 4.6: 3).
    sample_size : int
        Rows of the stratified sample L': 0 = the paper's rule min(L, B^(m+1) |Y|) (equation 17),
        -1 = all training rows, otherwise that many rows.
    tail_delete : float
        Percentage of the features ranked below the top N-hat that the label holder prunes each
        round (section 4.4, Table 1: 0-20; default 0 = off).
    overlap_delete : bool
        Overlapping-feature deletion at the candidate parties (section 4.3; default on).
    overlap_ratio : float
        A candidate whose smallest score is under this fraction of the median is "similar"
        (section 4.3: one tenth).
    n_hat : int
        Size of the top-ranked window per round; 0 = the paper's N-hat (the number of features still
        to select), otherwise min(n_hat, still to select).
    score : str
        su (equation 12, default), su-noalpha or cmi: the ablations of section 5.4.2.
    estimator : str
        How the parties estimate ``I(Y; F_i)`` (round 1) and ``I(Y; F_i | V_j)`` (equation 12's
        numerator) for the ranking: ``plugin`` = empirical probabilities, the paper's (sections 3.1
        and 4.3; it knows the plug-in bias towards large domains, and normalises it by equation
        12), ``adjusted`` (default since issue 53, ours) = the plug-in value less its mean over 8
        permutations of the sampled labels within the strata of ``V_j``
        (:func:`~verticalfs.selection.info.null_joint_entropy`; the chance adjustment of the paper's
        reference [49]); overlap deletion keeps the plug-in values. Why: a Gaussian noise column
        fills all B bins, a pixel column few, and the plug-in CMI of a column independent of Y
        given a ``V_j`` of hundreds of merged values is large (Example 1 of section 4.3), so on
        digits with 50 % noise columns FEAST ranked 9 noise columns among the 16 of round 2 and
        kept 12 of 31 at N = 48 (61 % removed, .969; vfl .947) where the adjusted estimate keeps
        none (.967). Measured on six sets (benchmarks/generalise/filters.py, docs/methods/feast.md
        "The estimator"). The paper benchmarks (benchmarks/feast/) pass ``plugin``.
    """

    bins: int = 8
    discretizer: str = "equal-frequency"
    supervised_bins: bool = False
    m: int = 3
    sample_size: int = 0
    tail_delete: float = 0.0
    overlap_delete: bool = True
    overlap_ratio: float = 0.1
    n_hat: int = 0
    score: str = "su"
    estimator: str = "adjusted"

    #: the values each field may take (:mod:`verticalfs.params`)
    constraints: ClassVar[Constraints] = {
        "bins": [Interval(int, 2, None)],
        "discretizer": [DISCRETIZER],
        "m": [Interval(int, 1, None)],
        "sample_size": [Interval(int, -1, None)],
        "tail_delete": [Interval(float, 0, 100, closed="left")],
        "overlap_ratio": [Interval(float, 0, 1, closed="left")],
        "n_hat": [Interval(int, 0, None)],
        "score": [Options(*SCORES)],
        "estimator": [Options(*ESTIMATORS)],
    }


def draw_sample(method, fed, m: int) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """The label holder's stratified sample: ``(rows or None for all, row indices, labels)``."""
    p = method.params
    y = np.asarray(fed.labels.y["train"])
    n = len(y)
    if fed.task == "regression":
        raise ConfigError(f"{method.name} scores features by mutual information with class labels; "
                          "it needs a classification task")
    size = resolve_sample_size(int(p.sample_size), n, int(p.bins), m, int(fed.n_classes))
    rows = stratified_sample(y, size, np.random.default_rng(derive_seed(method.seed, "feast-sample")))
    labels = y[rows].astype(smallest_uint(max(int(fed.n_classes) - 1, 0)))
    sent_rows = None if size == n else rows.astype(smallest_uint(n - 1))
    return sent_rows, rows, labels


def rank_and_pick(reports: dict[str, tuple[np.ndarray, np.ndarray]], order: list[str], window: int):
    """Section 4.4: global ranking, top ``window``, party with the best average score among them.

    Returns ``(party, its features in the top window (best first), ranking list of
    (party, index, score) best first)``. Ties: higher score first, then party order, then the
    party's own order.
    """
    names = [q for q in order if q in reports]
    if not names:
        return None, [], []
    party = np.concatenate([np.full(len(reports[q][0]), k) for k, q in enumerate(names)]).astype(np.int64)
    index = np.concatenate([np.asarray(reports[q][0], dtype=np.int64) for q in names])
    score = np.concatenate([np.asarray(reports[q][1], dtype=np.float64) for q in names])
    pos = np.concatenate([np.arange(len(reports[q][0])) for q in names]).astype(np.int64)
    rank = np.lexsort((pos, party, -score))
    ranking = list(zip([names[k] for k in party[rank]], index[rank].tolist(), score[rank].tolist(), strict=True))
    top = rank[:window]
    if top.size == 0:
        return None, [], ranking
    sums = np.bincount(party[top], weights=score[top], minlength=len(names))
    counts = np.bincount(party[top], minlength=len(names))
    avg = np.where(counts > 0, sums / np.maximum(counts, 1), -np.inf)
    best = int(np.argmax(avg))  # first party in order among equal averages
    return names[best], index[top][party[top] == best].tolist(), ranking


#: ``score(t, party, top) -> (indices best first, scores, n_deleted)``: one candidate party's report
ScoreFn = Callable[[int, str, int], tuple[np.ndarray, np.ndarray, int]]
#: ``share(t, party, indices, receivers)``: the party selected last round passes on its selection
ShareFn = Callable[[int, str, list[int], tuple[str, ...]], None]
#: ``drop(party, indices)``: tail deletion at a candidate party
DropFn = Callable[[str, list[int]], None]


def select_in_rounds(name: str, names: list[str], n_select: int, n_hat: int, tail_delete: float,
                     score: ScoreFn, share: ShareFn, drop: DropFn, begin_round: Callable[[int], None] | None = None,
                     stacklevel: int = 4) -> tuple[list[tuple[str, int]], list[dict]]:
    """FEAST's round structure (feast.md sections 4.1 and 4.4), independent of where the scores come from.

    Round ``t``: ``begin_round(t)``; from ``t = 2`` on, ``share`` the party selected last round (its
    newly selected features) with the remaining candidates; ``score`` every candidate party (the top
    ``N-hat`` of each, or all of them when tail deletion is on); a party with no candidate left
    leaves; :func:`rank_and_pick` chooses the party and its features; ``N-hat^{t+1} = N-hat^t - N^t``;
    optionally ``drop`` the bottom ``tail_delete`` % of the features ranked below the top ``N-hat``
    (of the parties that stay candidates). Each party is selected at most once (section 4.5); if
    the parties run out before ``n_select`` features, a warning names ``name`` and the count.

    ``feast`` runs it with messages (scores at the parties from statistical variables); ``cfeast``
    with ``rounds="parties"`` runs it on the pooled data (scores from the selected features
    themselves). ``stacklevel`` points the warning at the caller of ``fit`` (4: called from
    ``select``). Returns ``(selected (party, index) in order, per-round info)``.
    """
    remaining = int(n_select)
    candidates = list(names)
    selected: list[tuple[str, int]] = []
    prev: tuple[str, list[int]] | None = None
    rounds = []
    t = 0
    while remaining > 0 and candidates:
        t += 1
        if begin_round is not None:
            begin_round(t)
        if prev is not None:
            share(t, prev[0], prev[1], tuple(candidates))
        window = remaining if n_hat <= 0 else min(int(n_hat), remaining)
        top = -1 if tail_delete > 0 else window
        reports: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        deleted = {}
        for q in candidates:
            idx, s, n_del = score(t, q, top)
            reports[q] = (np.asarray(idx, dtype=np.int64), np.asarray(s, dtype=np.float64))
            deleted[q] = int(n_del)
        # a party with no candidate left leaves the candidate set
        candidates = [q for q in candidates if len(reports[q][0])]
        best, chosen, ranking = rank_and_pick({q: reports[q] for q in candidates}, names, window)
        if best is None:
            break
        selected += [(best, i) for i in chosen]
        remaining -= len(chosen)
        candidates.remove(best)
        prev = (best, chosen)
        n_tail = 0
        if tail_delete > 0 and remaining > 0:
            # the features ranked below the top N-hat, of the parties that stay candidates
            rest = [(q, i) for q, i, _ in ranking[window:] if q != best]
            n_tail = int(len(rest) * float(tail_delete) / 100.0)
            to_drop: dict[str, list[int]] = {}
            for q, i in rest[len(rest) - n_tail:] if n_tail else []:
                to_drop.setdefault(q, []).append(i)
            for q, idx in to_drop.items():
                drop(q, idx)
        rounds.append({"round": t, "party": best, "n_selected": len(chosen), "window": window,
                       "overlap_deleted": deleted, "tail_deleted": n_tail})
    if remaining > 0:
        warnings.warn(f"{name}: every party has been selected once (or has no candidate left) after "
                      f"{len(selected)} of n_select={n_select} features; selection stopped early "
                      "(feast.md section 4.5: a party is selected at most once)", stacklevel=stacklevel)
    return selected, rounds


@register
class Feast(FilterMethod):
    name = "feast"
    summary = ("FEAST: multi-round CMI feature selection across parties with statistical variables, "
               "stratified sampling and overlap deletion (labels of the sample go to every party).")
    paper = "feast.md section 4 (Fu et al., SIGMOD 2023)"
    Params = FeastParams
    #: FEAST's rounds depend on N (N-hat starts at N), so n_select="auto" runs one selection per N
    nested = False
    Role = FeastRole
    disclosures = {"columns_to_label_holder": ("Columns",), "labels_to_parties": ("FeastSetup",)}

    def select(self, fed) -> list[tuple[str, int]]:
        p = self.params  # (its bins, discretizer, m, ... are checked when it is built: FeastParams.constraints)
        names = list(fed.party_names)
        sent_rows, rows, labels = draw_sample(self, fed, int(p.m))
        self.info_["sample_size"] = int(len(rows))
        for q in names:
            fed.proxy(q).send(FeastSetup(rows=sent_rows, labels=labels, bins=int(p.bins), discretizer=p.discretizer,
                                         supervised_bins=bool(p.supervised_bins), seed=int(self.seed)),
                              At("selection", 0))

        def share(t: int, q: str, chosen: list[int], receivers: tuple[str, ...]) -> None:
            # the selected party merges its features into V^t and sends it to the candidates itself
            fed.proxy(q).send(ShareSelected(indices=np.asarray(chosen, dtype=np.int32), m=int(p.m), round=t,
                                            receivers=receivers), At("selection", t))

        def score(t: int, q: str, top: int) -> tuple[np.ndarray, np.ndarray, int]:
            rep = fed.proxy(q).request(ScoreRequest(round=t, top=top, score=p.score,
                                                    overlap_delete=bool(p.overlap_delete),
                                                    overlap_ratio=float(p.overlap_ratio),
                                                    estimator=str(p.estimator)),
                                       At("selection", t), expect=FeatureScores)
            self.record_scores(q, rep.indices, rep.scores)
            return rep.indices, rep.scores, rep.n_deleted

        def drop(q: str, idx: list[int]) -> None:
            fed.proxy(q).send(DropCandidates(indices=np.asarray(idx, dtype=np.int32)), At("selection", current[0]))

        current = [0]

        def begin_round(t: int) -> None:
            current[0] = t

        selected, rounds = select_in_rounds(self.name, names, int(p.n_select), int(p.n_hat), float(p.tail_delete),
                                            score, share, drop, begin_round=begin_round)
        self.info_["rounds"] = rounds
        return selected
