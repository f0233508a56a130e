"""FEAST's messages and the feature parties' handlers (feast.md section 4, Figure 2).

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

from verticalfs.exceptions import ProtocolError
from verticalfs.methods.feast.party import FeastPartyState, discretize_party
from verticalfs.methods.feast.statvar import random_groups, statistical_variables
from verticalfs.parties import PassiveParty, passive_handler
from verticalfs.selection.info import column_mutual_info
from verticalfs.selection.messages import party_columns
from verticalfs.training.history import derive_seed
from verticalfs.transport.messages import message


@message
class FeastSetup:
    """Active -> party, one-way: the sample (``rows`` into the training split, ``None`` = all
    training rows in order) with its ``labels``; the party bins its own columns."""

    rows: np.ndarray | None
    labels: np.ndarray
    bins: int
    discretizer: str
    supervised_bins: bool
    seed: int


@message
class ScoreRequest:
    """Active -> candidate party: score the remaining candidates; report the best ``top`` (-1 = all)."""

    round: int
    top: int
    score: str = "su"
    overlap_delete: bool = True
    overlap_ratio: float = 0.1


@message
class FeatureScores:
    """Candidate -> active: candidate indices and their scores, best first; ``n_deleted`` overlapping
    features were deleted locally this round."""

    indices: np.ndarray
    scores: np.ndarray
    n_deleted: int = 0


@message
class ShareSelected:
    """Active -> the party selected last round, one-way: its selected feature ``indices``; it merges
    them into ``V^t`` (groups of at most ``m``) and sends :class:`StatVariables` to ``receivers``."""

    indices: np.ndarray
    m: int
    round: int
    receivers: tuple


@message
class StatVariables:
    """Selected party -> candidate party, one-way: ``V^t`` as GIDs ``(rows, groups)``."""

    values: np.ndarray


@message
class DropCandidates:
    """Active -> party, one-way: delete these tail features from the candidates (section 4.4)."""

    indices: np.ndarray


@message
class LabelScoresRequest:
    """Active -> party (the ``mi`` baseline): labels of ``rows`` (``None`` = all training rows),
    binning settings; reply the party's ``top`` features by ``I(Y; F_i)``."""

    rows: np.ndarray | None
    labels: np.ndarray
    bins: int
    discretizer: str
    supervised_bins: bool
    top: int


def _state(party: PassiveParty) -> FeastPartyState:
    st = party.state.get("feast")
    if st is None:
        raise ProtocolError(f"party {party.name!r} received a FEAST message before FeastSetup")
    return st


def _rows(rows) -> np.ndarray | None:
    return None if rows is None else np.asarray(rows, dtype=np.int64)


@passive_handler(FeastSetup)
def _on_setup(party: PassiveParty, sender: str, msg: FeastSetup) -> None:
    X = party_columns(party, "train")
    codes = discretize_party(X, _rows(msg.rows), np.asarray(msg.labels), msg.discretizer, msg.bins,
                             msg.supervised_bins, party.name)
    party.state["feast"] = FeastPartyState(codes, msg.labels, seed=derive_seed(msg.seed, "feast-groups", party.name))
    return None


@passive_handler(ScoreRequest)
def _on_score(party: PassiveParty, sender: str, msg: ScoreRequest) -> FeatureScores:
    idx, s, n_del = _state(party).score(msg.score, msg.overlap_delete, msg.overlap_ratio)
    if msg.top >= 0:
        idx, s = idx[: msg.top], s[: msg.top]
    return FeatureScores(indices=idx.astype(np.int32), scores=s.astype(np.float64), n_deleted=n_del)


@passive_handler(ShareSelected)
def _on_share_selected(party: PassiveParty, sender: str, msg: ShareSelected) -> None:
    st = _state(party)
    idx = np.asarray(msg.indices, dtype=np.int64)
    st.select(idx)
    if not msg.receivers:
        return None
    if party.send_to is None:
        raise ProtocolError(f"party {party.name!r} cannot send party-to-party messages on this channel; "
                            "FEAST's statistical variables go from the selected party to the candidates")
    rng = np.random.default_rng([st.seed, int(msg.round)])
    V = statistical_variables(st.codes[:, idx], random_groups(len(idx), int(msg.m), rng))
    for r in msg.receivers:
        party.send_to(str(r), StatVariables(values=V))
    return None


@passive_handler(StatVariables)
def _on_stat_variables(party: PassiveParty, sender: str, msg: StatVariables) -> None:
    _state(party).receive(msg.values)
    return None


@passive_handler(DropCandidates)
def _on_drop(party: PassiveParty, sender: str, msg: DropCandidates) -> None:
    _state(party).drop(msg.indices)
    return None


@passive_handler(LabelScoresRequest)
def _on_label_scores(party: PassiveParty, sender: str, msg: LabelScoresRequest) -> FeatureScores:
    X = party_columns(party, "train")
    labels = np.asarray(msg.labels)
    codes = discretize_party(X, _rows(msg.rows), labels, msg.discretizer, msg.bins, msg.supervised_bins,
                             party.name)
    s = column_mutual_info(codes, labels)
    order = np.lexsort((np.arange(len(s)), -s))
    if msg.top >= 0:
        order = order[: msg.top]
    return FeatureScores(indices=order.astype(np.int32), scores=s[order].astype(np.float64))
