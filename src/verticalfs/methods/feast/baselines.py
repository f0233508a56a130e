"""FEAST's baselines (feast.md section 5.1): ``cfeast``, ``mi``, ``random`` and ``raw``.

The two FATE baselines (``fate-iv``, ``fate-lasso``) live in ``methods/fate``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from verticalfs.data.vertical import ACTIVE
from verticalfs.exceptions import ProtocolError
from verticalfs.methods.feast.messages import FeatureScores, LabelScoresRequest
from verticalfs.methods.feast.method import check_binning, draw_sample, rank_and_pick
from verticalfs.methods.feast.party import SCORES, ZERO, discretize_party
from verticalfs.methods.registry import register
from verticalfs.selection.base import FilterMethod, FilterParams
from verticalfs.selection.info import column_mutual_info, normalised_cmi
from verticalfs.training.history import derive_seed


@dataclass
class CFeastParams(FilterParams):
    """Centralised FEAST (feast.md section 5.1, "CFEAST").

    Parameters
    ----------
    n_select : int
        N, features to select (default 10).
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
    """

    bins: int = 8
    discretizer: str = "equal-frequency"
    m: int = 3
    sample_size: int = 0
    overlap_delete: bool = True
    overlap_ratio: float = 0.1
    score: str = "su"


@register
class CFeast(FilterMethod):
    """``cfeast``: FEAST on pooled data, one feature per step (the public implementation's
    ``featureSelectionInSingleParty``): the first pick maximises ``I(Y; F_i)``, each later pick
    maximises equation 13 with the selected features themselves in place of the statistical
    variables, ``(1/|S|) sum_{F_j in S} SU(Y; F_i | F_j)``.

    Not federated: it reads the pooled data (``needs_pooled_data``), so it sends no bytes during
    selection (nor to evaluate: the columns are already pooled).
    """

    name = "cfeast"
    summary = "Reference: FEAST's normalised CMI criterion on pooled data, greedy one feature at a time."
    paper = "feast.md section 5.1 (CFEAST)"
    Params = CFeastParams
    needs_pooled_data = True

    def select(self, fed) -> list[tuple[str, int]]:
        p = self.params
        check_binning(self.name, p)
        data = fed.pooled_data()
        _, rows, labels = draw_sample(self, fed, int(p.m))
        self.info_["sample_size"] = int(len(rows))
        labels = labels.astype(np.int64)
        blocks, owner = [], []
        for part in data.parties:
            codes = discretize_party(part.X["train"], rows, labels, p.discretizer, int(p.bins), True, part.name)
            blocks.append(codes)
            owner += [(part.name, j) for j in range(codes.shape[1])]
        C = np.concatenate(blocks, 1)
        d = C.shape[1]
        cand = np.ones(d, dtype=bool)
        total = np.zeros(d)
        low = np.full(d, np.inf)
        picked: list[int] = []
        first = column_mutual_info(C, labels)
        score = first
        for step in range(int(p.n_select)):
            idx = np.flatnonzero(cand)
            if step > 0:
                j = picked[-1]
                su = normalised_cmi(C[:, idx], labels, C[:, j], p.score)
                total[idx] += su
                low[idx] = np.minimum(low[idx], su)
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

    def gather(self, fed, selected):
        """Pooled data: the columns are read directly (no messages)."""
        data = fed.pooled_data()
        X = {}
        for s in ("train", "val", "test"):
            cols = [data.party(q).X[s][:, [i]] for q, i in selected]
            X[s] = np.concatenate(cols, 1) if cols else np.zeros((data.n_samples(s), 0), np.float32)
        y = {s: np.asarray(data.labels.y[s]) for s in ("train", "val", "test")}
        return X, y


@dataclass
class MIParams(FilterParams):
    """Top-N features by mutual information with the label (feast.md section 5.1, "MI").

    Parameters
    ----------
    n_select : int
        N, features to select (default 10).
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
    """

    bins: int = 8
    discretizer: str = "equal-frequency"
    supervised_bins: bool = False
    sample_size: int = -1


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

    def select(self, fed) -> list[tuple[str, int]]:
        p = self.params
        check_binning(self.name, p)
        sent_rows, rows, labels = draw_sample(self, fed, 3)
        self.info_["sample_size"] = int(len(rows))
        reports = {}
        for q in fed.party_names:
            rep = fed.channel.request(ACTIVE, q, LabelScoresRequest(
                rows=sent_rows, labels=labels, bins=int(p.bins), discretizer=p.discretizer,
                supervised_bins=bool(p.supervised_bins), top=int(p.n_select)))
            if not isinstance(rep, FeatureScores):
                raise ProtocolError(f"party {q!r} answered LabelScoresRequest with {type(rep).__name__}")
            reports[q] = (np.asarray(rep.indices, dtype=np.int64), np.asarray(rep.scores, dtype=np.float64))
        _, _, ranking = rank_and_pick(reports, list(fed.party_names), int(p.n_select))
        return [(q, i) for q, i, _ in ranking[: int(p.n_select)]]


@dataclass
class RandomParams(FilterParams):
    """Random selection (feast.md section 5.1, "Random").

    Parameters
    ----------
    n_select : int
        N, features to select (default 10).
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
        left = {q: list(range(len(n))) for q, n in fed.feature_names().items()}
        out = []
        for _ in range(int(self.params.n_select)):
            parties = [q for q in fed.party_names if left[q]]
            q = parties[int(rng.integers(len(parties)))]
            i = left[q].pop(int(rng.integers(len(left[q]))))
            out.append((q, i))
        return out


@dataclass
class RawParams(FilterParams):
    """All features (feast.md section 5.1, "Raw").

    Parameters
    ----------
    n_select : int
        Ignored: every feature is kept.
    classifier : str
        lr, svm, rf, xgboost or mlp.
    """


@register
class Raw(FilterMethod):
    """``raw``: no selection; the classifier is trained on every prepared feature of every party.

    The paper's Raw uses the original features without the injected overlapping copies; here it
    is every feature the parties hold (with ``overlap`` that includes the copies, which add no
    information to the classifier).
    """

    name = "raw"
    summary = "Baseline: every feature of every party (n_select ignored)."
    paper = "feast.md section 5.1 (Raw)"
    Params = RawParams
    selects_all = True

    def select(self, fed) -> list[tuple[str, int]]:
        return [(q, i) for q, n in fed.feature_names().items() for i in range(len(n))]


__all__ = ["SCORES", "CFeast", "MutualInfo", "RandomSelect", "Raw"]
