"""FEAST's messages (feast.md section 4, Figure 2); the feature parties' side is :mod:`.role`.

All are sent in phase ``selection``:

==========================  ===================  ==============================================
message                     direction            content
==========================  ===================  ==============================================
:class:`FeastSetup`         active -> party      sampled row indices (or all rows), their labels,
                                                 the binning settings (one-way)
:class:`ScoreRequest`       active -> candidate  "score your candidates" (round, how many to report)
:class:`FeatureScores`      candidate -> active  indices and scores of the candidates, best first
:class:`ShareSelected`      active -> selected   the party's features selected last round and the
                                                 candidate parties to send ``V^t`` to (one-way)
:class:`StatVariables`      selected -> cand.    ``V^t``: GIDs of the merged groups (party to party)
:class:`DropCandidates`     active -> party      tail deletion (one-way)
:class:`LabelScoresRequest` active -> party      the ``mi`` baseline: labels once, top MI scores back
==========================  ===================  ==============================================

**Labels leave the label holder**: :class:`FeastSetup` (and :class:`LabelScoresRequest`) carry the
labels of the sampled rows to every feature party, as the paper's protocol does (section 4.1:
"p_0 conducts the sampling and passes the sampled IDs and labels to other parties").
"""

from __future__ import annotations

import numpy as np

from verticalfs.transport.messages import message


@message("feast.FeastSetup")
class FeastSetup:
    """Active -> party, one-way: the sample (``rows`` into the training split, ``None`` = all
    training rows in order) with its ``labels``; the party bins its own columns."""

    rows: np.ndarray | None
    labels: np.ndarray
    bins: int
    discretizer: str
    supervised_bins: bool
    seed: int


@message("feast.ScoreRequest")
class ScoreRequest:
    """Active -> candidate party: score the remaining candidates; report the best ``top`` (-1 = all);
    ``estimator`` of the mutual information: ``plugin`` (the paper's) or ``adjusted`` (issue 53)."""

    round: int
    top: int
    score: str = "su"
    overlap_delete: bool = True
    overlap_ratio: float = 0.1
    estimator: str = "plugin"


@message("feast.FeatureScores")
class FeatureScores:
    """Candidate -> active: candidate indices and their scores, best first; ``n_deleted`` overlapping
    features were deleted locally this round."""

    indices: np.ndarray
    scores: np.ndarray
    n_deleted: int = 0


@message("feast.ShareSelected")
class ShareSelected:
    """Active -> the party selected last round, one-way: its selected feature ``indices``; it merges
    them into ``V^t`` (groups of at most ``m``) and sends :class:`StatVariables` to ``receivers``."""

    indices: np.ndarray
    m: int
    round: int
    receivers: tuple


@message("feast.StatVariables")
class StatVariables:
    """Selected party -> candidate party, one-way: ``V^t`` as GIDs ``(rows, groups)``."""

    values: np.ndarray


@message("feast.DropCandidates")
class DropCandidates:
    """Active -> party, one-way: delete these tail features from the candidates (section 4.4)."""

    indices: np.ndarray


@message("feast.LabelScoresRequest")
class LabelScoresRequest:
    """Active -> party (the ``mi`` baseline): labels of ``rows`` (``None`` = all training rows),
    binning settings; reply the party's ``top`` features by ``I(Y; F_i)``, estimated by ``estimator``
    (``plugin`` or ``adjusted``: its permutations drawn from ``seed`` and the party's name, so the
    label holder could compute them; an adjusted score is a mean over 8 permutations of labels it
    chose, less than what 8 requests with those permuted labels, which it may send, would tell it)."""

    rows: np.ndarray | None
    labels: np.ndarray
    bins: int
    discretizer: str
    supervised_bins: bool
    top: int
    estimator: str = "plugin"
    seed: int = 0
