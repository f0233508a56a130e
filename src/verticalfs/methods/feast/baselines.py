"""FEAST's baselines (feast.md section 5.1): ``cfeast``, ``mi``, ``random`` and ``raw``.

The two FATE baselines (``fate-iv``, ``fate-lasso``) live in ``methods/fate``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from verticalfs.data.partition import COPY_SUFFIX, is_overlap_copy
from verticalfs.exceptions import ConfigError, DataError
from verticalfs.methods.feast.messages import FeatureScores, LabelScoresRequest
from verticalfs.methods.feast.method import (
    DISCRETIZER,
    draw_sample,
    rank_and_pick,
    select_in_rounds,
)
from verticalfs.methods.feast.party import SCORES, ZERO, FeastPartyState, discretize_party
from verticalfs.methods.feast.role import MIRole
from verticalfs.methods.filter import ColumnsOnlyRole, FilterMethod, FilterParams
from verticalfs.methods.registry import register
from verticalfs.params import Constraints, Interval, Options
from verticalfs.selection.info import ESTIMATORS, adjusted_mutual_info, column_mutual_info, normalised_cmi_pair
from verticalfs.training.history import derive_seed
from verticalfs.transport.messages import At


@dataclass
class CFeastParams(FilterParams):
    """Centralised FEAST (feast.md section 5.1, "CFEAST").

    Parameters
    ----------
    n_select : int or "auto"
        N, features to select; ``"auto"`` (default): chosen on the label holder's validation split
        (:meth:`~verticalfs.methods.filter.FilterMethod.select_auto`).
    classifier : str
        lr, svm, rf, xgboost or mlp.
    bins : int
        B, the maximum number of bins per feature (8).
    discretizer : str
        equal-frequency, equal-width, mdlp or chimerge (all allowed: the data are pooled with the
        labels).
    m : int
        Only used by the sample-size rule, so that ``cfeast`` sees the same sample as ``feast``.
    sample_size : int
        0 = FEAST's rule min(L, B^(m+1)|Y|), -1 = all training rows, otherwise that many rows.
    overlap_delete : bool
        Delete candidates whose smallest score is 0 or under ``overlap_ratio`` x the median
        (over all candidates) before each pick.
    overlap_ratio : float
        One tenth (section 4.3).
    score : str
        su (equation 12), su-noalpha or cmi.
    rounds : str
        How CFEAST reads section 5.1 (see :class:`CFeast`): ``greedy`` (default) one feature per
        step over all pooled features; ``parties`` FEAST's rounds of section 4.4 over the pooled
        data's party blocks (per round all top-ranked features of the best party).
    tail_delete : float
        ``rounds="parties"`` only: FEAST's tail deletion, percentage of the features ranked below
        the top N-hat pruned each round (default 0 = off).
    n_hat : int
        ``rounds="parties"`` only: FEAST's window, 0 = the paper's N-hat (features still to select).
    estimator : str
        ``plugin`` or ``adjusted``: as ``feast``'s (:class:`~verticalfs.methods.feast.method.FeastParams`).
    """

    bins: int = 8
    discretizer: str = "equal-frequency"
    m: int = 3
    sample_size: int = 0
    overlap_delete: bool = True
    overlap_ratio: float = 0.1
    score: str = "su"
    rounds: str = "greedy"
    tail_delete: float = 0.0
    n_hat: int = 0
    estimator: str = "plugin"

    #: the values each field may take (:mod:`verticalfs.params`)
    constraints: ClassVar[Constraints] = {
        "bins": [Interval(int, 2, None)],
        "discretizer": [DISCRETIZER],
        "m": [Interval(int, 1, None)],
        "sample_size": [Interval(int, -1, None)],
        "overlap_ratio": [Interval(float, 0, 1, closed="left")],
        "score": [Options(*SCORES)],
        "rounds": [Options("greedy", "parties")],
        "tail_delete": [Interval(float, 0, 100, closed="left")],
        "n_hat": [Interval(int, 0, None)],
        "estimator": [Options(*ESTIMATORS)],
    }


#: the two readings of CFEAST (feast.md section 5.1), values of ``CFeastParams.rounds``
CFEAST_ROUNDS: tuple[str, ...] = ("greedy", "parties")


@register
class CFeast(FilterMethod):
    """``cfeast``: FEAST's normalised CMI criterion on pooled data (feast.md section 5.1, "CFEAST").

    Not federated: it reads the pooled data (``needs_pooled_data``), so it sends no bytes during
    selection (nor to evaluate: the columns are already pooled). It draws the same stratified sample
    as ``feast`` (same seed, ``bins``, ``m``, ``sample_size``) and bins each party block's columns
    exactly as that party would, so the two see the same codes.

    Section 5.1 says only "we transfer all datasets directly to the active party and select
    features using a centralized method, i.e., using a variant of Equation 13 (replacing V_j with
    the selected feature F_j)". It admits two readings, chosen by ``rounds``:

    - ``"greedy"`` (default): a centralised method forgets the parties. One feature per step (the
      public implementation's ``featureSelectionInSingleParty``): the first pick maximises
      ``I(Y; F_i)``, each later pick maximises ``(1/|S|) sum_{F_j in S} SU(Y; F_i | F_j)`` over all
      remaining features; overlap deletion uses the median over all candidates.
    - ``"parties"``: only the scores change, not FEAST's procedure. FEAST's rounds of section 4.4
      over the pooled data's party blocks (:func:`~verticalfs.methods.feast.method.select_in_rounds`):
      round 1 scores by ``I(Y; F_i)``, later rounds by equation 13 with every selected feature
      ``F_j`` as its own ``V_j`` (FEAST's :class:`~verticalfs.methods.feast.party.FeastPartyState`
      fed the selected columns instead of statistical variables; same normalised score, alpha,
      overlap deletion per party block, tail deletion and ``n_hat``); global ranking, the party
      with the best average among the top N-hat gives all of its top features, ``N-hat -= N^t``;
      each party at most once. With one party it selects what ``feast`` (and ``mi``) select. With
      ``m = 1`` (for both: ``m`` also sets the sample size ``L'``) each of FEAST's statistical
      variables is one selected feature with its bins renumbered by first appearance, a bijection,
      so every SU value is the same and the two select the same features in the same rounds; the
      scores differ only by floating-point rounding (~1e-16: the renumbering reorders the cells
      summed in each entropy, FEAST's random groups reorder the sum over ``V_j``), which could
      matter only for two features whose scores tie to the last bits.

    Both readings fit the paper's "centralized method" and its remark that CFEAST beats FEAST "in
    most cases" (section 5.2); ``greedy`` stays the default, as the public implementation's
    ``featureSelectionInSingleParty`` selects one feature per step.
    """

    name = "cfeast"
    summary = ("Reference: FEAST's normalised CMI criterion on pooled data, greedy one feature at a time "
               "(rounds='parties': FEAST's rounds over the parties).")
    paper = "feast.md section 5.1 (CFEAST)"
    Params = CFeastParams
    Role = None
    needs_pooled_data = True

    def cannot_save(self) -> str | None:
        return ("a non-federated reference trained on pooled data: no party holds a part of its model, so it "
                "cannot be saved as a federated model")

    def select(self, fed) -> list[tuple[str, int]]:
        p = self.params
        if p.rounds not in CFEAST_ROUNDS:
            raise ConfigError(f"{self.name}: unknown rounds {p.rounds!r}; use 'greedy' (one feature per step) "
                              "or 'parties' (FEAST's rounds over the parties, feast.md section 4.4)")
        if p.rounds == "greedy" and (float(p.tail_delete) > 0 or int(p.n_hat) > 0):
            raise ConfigError(f"{self.name}: tail_delete={p.tail_delete} and n_hat={p.n_hat} belong to FEAST's "
                              "rounds over the parties; set rounds='parties' or leave them at 0")
        data = fed.pooled_data()
        _, rows, labels = draw_sample(self, fed, int(p.m))
        self.info_["sample_size"] = int(len(rows))
        labels = labels.astype(np.int64)
        codes = {part.name: discretize_party(part.X["train"], rows, labels, p.discretizer, int(p.bins), True,
                                             part.name)
                 for part in data.parties}
        if p.rounds == "parties":
            return self._select_by_party(list(fed.party_names), codes, labels)
        return self._select_greedy(codes, labels)

    def _select_greedy(self, codes: dict[str, np.ndarray], labels: np.ndarray) -> list[tuple[str, int]]:
        """``rounds="greedy"``: one feature per step over all pooled features."""
        p = self.params
        owner = [(q, j) for q, c in codes.items() for j in range(c.shape[1])]
        C = np.concatenate(list(codes.values()), 1)
        d = C.shape[1]
        cand = np.ones(d, dtype=bool)
        total = np.zeros(d)
        low = np.full(d, np.inf)
        picked: list[int] = []
        adjusted = p.estimator == "adjusted"
        rng = np.random.default_rng(derive_seed(self.seed, "cfeast-null"))
        first = adjusted_mutual_info(C, labels, rng) if adjusted else column_mutual_info(C, labels)
        score = first
        for step in range(int(p.n_select)):
            idx = np.flatnonzero(cand)
            if step > 0:
                j = picked[-1]
                su, plugin = normalised_cmi_pair(C[:, idx], labels, C[:, j], p.score, p.estimator, rng)
                total[idx] += su
                low[idx] = np.minimum(low[idx], plugin)  # overlap deletion on the paper's values (FEAST's)
                if p.overlap_delete:
                    med = float(np.median(low[idx]))
                    drop = (low[idx] <= ZERO) | (low[idx] < float(p.overlap_ratio) * med)
                    cand[idx[drop]] = False
                    idx = idx[~drop]
                score = total / step
            if idx.size == 0:
                break
            best = int(idx[np.lexsort((idx, -score[idx]))[0]])
            picked.append(best)
            cand[best] = False
        return [owner[j] for j in picked]

    def _select_by_party(self, names: list[str], codes: dict[str, np.ndarray], labels: np.ndarray
                         ) -> list[tuple[str, int]]:
        """``rounds="parties"``: FEAST's rounds (section 4.4) on the pooled party blocks, ``V_j = F_j``."""
        p = self.params
        # one FEAST scoring state per party block, held here (pooled data, no messages)
        states = {q: FeastPartyState(codes[q], labels, seed=derive_seed(self.seed, "cfeast-null", q)) for q in names}

        def share(t: int, q: str, chosen: list[int], receivers: tuple[str, ...]) -> None:
            # section 5.1: the selected features F_j themselves, one V_j each, instead of FEAST's
            # merged statistical variables
            states[q].select(chosen)
            F = states[q].codes[:, np.asarray(chosen, dtype=np.int64)]
            for r in receivers:
                states[r].receive(F)

        def score(t: int, q: str, top: int) -> tuple[np.ndarray, np.ndarray, int]:
            idx, s, n_del = states[q].score(p.score, bool(p.overlap_delete), float(p.overlap_ratio), p.estimator)
            return (idx, s, n_del) if top < 0 else (idx[:top], s[:top], n_del)

        def drop(q: str, idx: list[int]) -> None:
            states[q].drop(idx)

        selected, rounds = select_in_rounds(self.name, names, int(p.n_select), int(p.n_hat), float(p.tail_delete),
                                            score, share, drop, stacklevel=5)  # via select, _select_by_party
        self.info_["rounds"] = rounds
        return selected

    @property
    def nested(self) -> bool:  # type: ignore[override]
        """``rounds="greedy"`` picks one feature per step whatever N (a ranking); ``"parties"``
        runs FEAST's rounds, which depend on N."""
        return self.params.rounds != "parties"

    def gather(self, fed, selected, splits=("train", "val", "test")):
        """Pooled data: the columns are read directly (no messages)."""
        data = fed.pooled_data()
        X = {}
        for s in splits:
            cols = [data.party(q).X[s][:, [i]] for q, i in selected]
            X[s] = np.concatenate(cols, 1) if cols else np.zeros((data.n_samples(s), 0), np.float32)
        y = {s: np.asarray(data.labels.y[s]) for s in splits}
        return X, y


@dataclass
class MIParams(FilterParams):
    """Top-N features by mutual information with the label (feast.md section 5.1, "MI").

    Parameters
    ----------
    n_select : int or "auto"
        N, features to select; ``"auto"`` (default): chosen on the label holder's validation split
        (:meth:`~verticalfs.methods.filter.FilterMethod.select_auto`).
    classifier : str
        lr, svm, rf, xgboost or mlp.
    bins : int
        B, bins per feature (8).
    discretizer : str
        equal-frequency (default) or equal-width; mdlp/chimerge only with ``supervised_bins``.
    supervised_bins : bool
        Let the parties fit a supervised discretizer on the labels they are sent.
    sample_size : int
        Rows whose labels are sent: -1 = all training rows (default), 0 = FEAST's rule with m = 3,
        otherwise that many (stratified).
    estimator : str
        ``plugin`` or ``adjusted``: as ``feast``'s (:class:`~verticalfs.methods.feast.method.FeastParams`).
    """

    bins: int = 8
    discretizer: str = "equal-frequency"
    supervised_bins: bool = False
    sample_size: int = -1
    estimator: str = "plugin"

    #: the values each field may take (:mod:`verticalfs.params`)
    constraints: ClassVar[Constraints] = {
        "bins": [Interval(int, 2, None)],
        "discretizer": [DISCRETIZER],
        "sample_size": [Interval(int, -1, None)],
        "estimator": [Options(*ESTIMATORS)],
    }


@register
class MutualInfo(FilterMethod):
    """``mi``: one round. The label holder sends the labels (of all training rows by default) to
    every party once; each party bins its columns, scores them by ``I(Y; F_i)`` and returns its top
    N scores with their indices; the label holder keeps the global top N. This is the cheapest
    faithful protocol for the MI baseline: labels once per party (one byte each for up to 256
    classes), N scores back; no feature information travels. Like FEAST it discloses the labels to
    every feature party.
    """

    name = "mi"
    summary = "Top-N by mutual information with the label (labels sent once to every party)."
    paper = "feast.md section 5.1 (MI)"
    Params = MIParams
    Role = MIRole
    disclosures = {"columns_to_label_holder": ("Columns",), "labels_to_parties": ("LabelScoresRequest",)}

    def select(self, fed) -> list[tuple[str, int]]:
        p = self.params
        sent_rows, rows, labels = draw_sample(self, fed, 3)
        self.info_["sample_size"] = int(len(rows))
        reports = {}
        for q in fed.party_names:
            rep = fed.proxy(q).request(LabelScoresRequest(
                rows=sent_rows, labels=labels, bins=int(p.bins), discretizer=p.discretizer,
                supervised_bins=bool(p.supervised_bins), top=int(p.n_select), estimator=str(p.estimator),
                seed=int(self.seed)), At("selection"), expect=FeatureScores)
            reports[q] = (np.asarray(rep.indices, dtype=np.int64), np.asarray(rep.scores, dtype=np.float64))
            self.record_scores(q, *reports[q])
        _, _, ranking = rank_and_pick(reports, list(fed.party_names), int(p.n_select))
        return [(q, i) for q, i, _ in ranking[: int(p.n_select)]]


@dataclass
class RandomParams(FilterParams):
    """Random selection (feast.md section 5.1, "Random").

    Parameters
    ----------
    n_select : int or "auto"
        N, features to select; ``"auto"`` (default): chosen on the label holder's validation split
        (:meth:`~verticalfs.methods.filter.FilterMethod.select_auto`).
    classifier : str
        lr, svm, rf, xgboost or mlp.
    """


@register
class RandomSelect(FilterMethod):
    """``random``: each round a random party (among those with features left) and a random one of its
    remaining features. The label holder draws both from the parties' public schemas (feature
    counts), so selection sends no message; the method's seed makes it reproducible."""

    name = "random"
    summary = "Baseline: a random party and a random remaining feature of it, per round."
    paper = "feast.md section 5.1 (Random)"
    Params = RandomParams

    def select(self, fed) -> list[tuple[str, int]]:
        rng = np.random.default_rng(derive_seed(self.seed, "random-selection"))
        left = {q: list(range(len(n))) for q, n in self.feature_names(fed).items()}
        out = []
        for _ in range(int(self.params.n_select)):
            parties = [q for q in fed.party_names if left[q]]
            q = parties[int(rng.integers(len(parties)))]
            i = left[q].pop(int(rng.integers(len(left[q]))))
            out.append((q, i))
        return out


@dataclass
class RawParams(FilterParams):
    """All original features (feast.md section 5.1, "Raw").

    Parameters
    ----------
    n_select : int
        Ignored: every feature that is not an overlap copy is kept.
    classifier : str
        lr, svm, rf, xgboost or mlp.
    """


@register
class Raw(FilterMethod):
    """``raw``: no selection; the classifier is trained on every original feature of every party.

    feast.md section 5.1: "the original feature set, which does not contain overlapping features".
    A party knows which of its columns it received as copies of other parties' columns (injected
    with ``overlap``, :func:`verticalfs.data.partition.add_overlap`, named ``<column>@copy``): so
    each party keeps every feature of its own schema whose name is not a copy's
    (:func:`is_overlap_copy`); no ground-truth mask is read. Without ``overlap`` that is every
    feature. The schemas are the parties' public feature names, so selection sends no message.
    """

    name = "raw"
    summary = "Baseline: every original feature of every party, without the overlap copies (n_select ignored)."
    paper = "feast.md section 5.1 (Raw)"
    Params = RawParams
    Role = ColumnsOnlyRole
    selects_all = True

    def select(self, fed) -> list[tuple[str, int]]:
        out = [(q, i) for q, names in self.feature_names(fed).items()
               for i, f in enumerate(names) if not is_overlap_copy(f)]
        if not out:
            raise DataError(f"{self.name}: every feature of parties {list(fed.party_names)} is an overlap copy "
                            f"(named '<column>{COPY_SUFFIX}'), so there is no original feature to keep; "
                            "build the data with fewer copies (overlap) or rename the columns")
        return out


__all__ = ["CFEAST_ROUNDS", "SCORES", "CFeast", "MutualInfo", "RandomSelect", "Raw"]
