"""FEAST (feast.md section 4) and its baselines cfeast, mi, random, raw."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import verticalfs
from verticalfs.data.partition import add_overlap
from verticalfs.data.vertical import PartyBlock, VerticalDataset
from verticalfs.exceptions import ConfigError
from verticalfs.federation import Federation
from verticalfs.methods import create
from verticalfs.methods.feast.baselines import is_overlap_copy
from verticalfs.methods.feast.messages import FeastSetup, StatVariables
from verticalfs.methods.feast.statvar import (
    random_groups,
    statistical_variable,
    statistical_variables,
)
from verticalfs.names import LABEL_HOLDER as ACTIVE


def fit(name, data, trace=False, **params):
    fed = Federation.in_process(data, trace=trace)
    return create(name, seed=params.pop("seed", 0), **params).fit(fed), fed


def selected(m):
    return [tuple(s.split(":", 1)) for s in m.info_["selected"]]


def columns_of(data, sel, split="train"):
    return [data.party(p).X[split][:, data.party(p).feature_names.index(f)] for p, f in sel]


def real_data(name, **kw):
    """A data set by name; the ones not built in are read from ``$VERTICALFS_DATA`` (or
    ``<repo>/../shared/datasets``) and the test is skipped when that folder is missing."""
    if name == "breast_cancer":
        return verticalfs.build_data(name, **kw)
    path = Path(os.environ.get("VERTICALFS_DATA") or Path(__file__).resolve().parents[2].parent / "shared" / "datasets")
    if not path.is_dir():
        pytest.skip(f"real data sets not found at {path}; set VERTICALFS_DATA to run this test")
    return verticalfs.build_data(name, data_dir=path, **kw)


@pytest.fixture(scope="module")
def cancer():
    return verticalfs.build_data("breast_cancer", parties=3, seed=0)


# ----------------------------------------------------------------------- Figure 3
class TestStatisticalVariables:
    # feast.md Figure 3(a): UID 1..8, features F1..F5
    F = np.array([
        [4, 3, 8, 4, 1],
        [5, 3, 8, 5, 2],
        [6, 2, 7, 6, 1],
        [5, 2, 6, 7, 2],
        [5, 3, 8, 7, 2],
        [4, 3, 7, 6, 1],
        [5, 3, 7, 5, 2],
        [6, 2, 7, 4, 1],
    ])

    def test_figure_3(self):
        v1 = statistical_variable(self.F[:, [0, 1, 2]])  # G1 = {F1, F2, F3}
        v2 = statistical_variable(self.F[:, [3, 4]])  # G2 = {F4, F5}
        np.testing.assert_array_equal(v1, [0, 1, 2, 3, 1, 4, 5, 2])  # Figure 3(c), V1
        np.testing.assert_array_equal(v2, [0, 1, 2, 3, 3, 2, 1, 0])  # Figure 3(c), V2
        V = statistical_variables(self.F, [np.array([0, 1, 2]), np.array([3, 4])])
        assert V.dtype == np.uint8
        np.testing.assert_array_equal(V.T, [v1, v2])
        # the merged table of G1 has the 6 distinct combinations of Figure 3(b)
        assert len(np.unique(v1)) == 6 and len(np.unique(v2)) == 4

    def test_random_groups(self):
        groups = random_groups(5, 3, np.random.default_rng(0))
        assert [len(g) for g in groups] == [3, 2]
        assert sorted(np.concatenate(groups).tolist()) == [0, 1, 2, 3, 4]
        assert [len(g) for g in random_groups(7, 3, np.random.default_rng(0))] == [3, 3, 1]


# ------------------------------------------------------------------ equivalences
def test_feast_with_one_party_equals_mi():
    """One party: every top-N feature is in that party, so round 1 (MI) selects all N."""
    data = verticalfs.build_data("breast_cancer", parties=1, seed=0)
    feast, _ = fit("feast", data, n_select=8)
    mi, _ = fit("mi", data, n_select=8)
    assert len(feast.info_["rounds"]) == 1
    assert selected(feast) == selected(mi)


@pytest.mark.parametrize("dataset", ["breast_cancer", "physionet2012"])
def test_feast_with_one_party_equals_cfeast_by_party(dataset):
    """One party: FEAST's round structure (which cfeast keeps with rounds="parties") selects the
    party's top N by I(Y; F_i) in round 1, so both select the same features in the same order; the
    greedy reading of CFEAST conditions each pick on the previous ones and selects others."""
    data = real_data(dataset, parties=1, seed=0)
    feast, _ = fit("feast", data, n_select=10)
    cfeast, _ = fit("cfeast", data, n_select=10, rounds="parties")
    assert feast.info_["sample_size"] == cfeast.info_["sample_size"]
    assert len(cfeast.info_["rounds"]) == 1
    assert selected(feast) == selected(cfeast)
    assert feast.info_["rounds"] == cfeast.info_["rounds"]
    greedy, _ = fit("cfeast", data, n_select=10)
    assert selected(greedy) != selected(cfeast)
    assert "rounds" not in greedy.info_  # the default reading is unchanged


@pytest.mark.parametrize("dataset, parties, params", [
    ("breast_cancer", 3, {}),
    ("breast_cancer", 4, {"overlap": 4, "tail_delete": 20.0}),  # overlap and tail deletion at work
    ("physionet2012", 4, {}),
])
def test_feast_with_m1_equals_cfeast_by_party(dataset, parties, params):
    """m = 1: each statistical variable V_j is one selected feature F_j with its bins renumbered by
    first appearance, a bijection of codes, so every SU value and hence every score is cfeast's with
    V_j = F_j (up to the order of floating-point sums), over several parties. Both need the same
    sample: cfeast's m only sets L' = min(L, B^(m+1)|Y|), so it gets m = 1 too."""
    params = dict(params, estimator="plugin")  # the paper's: the permutations of "adjusted" differ by order
    data = real_data(dataset, parties=parties, overlap=params.pop("overlap", 0), seed=0)
    kw = dict(n_select=12, m=1, **params)
    feast, _ = fit("feast", data, **kw)
    cfeast, _ = fit("cfeast", data, rounds="parties", **kw)
    assert feast.info_["sample_size"] == cfeast.info_["sample_size"] == min(2 * 8 ** 2, data.n_samples("train"))
    assert len(feast.info_["rounds"]) >= 3  # several rounds conditioned on the selected features
    assert selected(feast) == selected(cfeast)
    # same party, N^t, window, overlap and tail deletions in every round
    assert feast.info_["rounds"] == cfeast.info_["rounds"]
    if "tail_delete" in params:
        assert sum(r["tail_deleted"] for r in cfeast.info_["rounds"]) > 0
        assert sum(sum(r["overlap_deleted"].values()) for r in cfeast.info_["rounds"]) > 0
    # merging m = 3 features per statistical variable changes FEAST's scores: it departs from cfeast
    f3, _ = fit("feast", data, n_select=12, **params)
    c3, _ = fit("cfeast", data, n_select=12, rounds="parties", **params)
    assert selected(f3) != selected(c3)


def test_cfeast_rounds_param(cancer):
    with pytest.raises(ConfigError, match="rounds"):
        fit("cfeast", cancer, rounds="all")
    with pytest.raises(ConfigError, match="rounds='parties'"):
        fit("cfeast", cancer, tail_delete=10.0)
    with pytest.warns(UserWarning, match=r"cfeast: .* after 5 of n_select=9"):
        m, fed = fit("cfeast", cancer, n_select=9, rounds="parties", n_hat=2)  # 2 + 2 + 1 from 3 parties
    assert fed.ledger.total_bytes == 0
    assert all(r["window"] <= 2 for r in m.info_["rounds"])


def test_feast_with_one_feature_per_party_equals_cfeast():
    """One feature per party (m irrelevant, V_j = the selected feature relabelled): FEAST's rounds pick
    exactly cfeast's greedy sequence (same sample, same bins, same scores)."""
    data = verticalfs.build_data("breast_cancer", parties=30, partition_strategy="contiguous", seed=0)
    assert all(p.n_features == 1 for p in data.parties)
    feast, _ = fit("feast", data, n_select=7, overlap_delete=False)
    cfeast, _ = fit("cfeast", data, n_select=7, overlap_delete=False)
    assert selected(feast) == selected(cfeast)
    mi, _ = fit("mi", data, n_select=7)
    assert selected(feast) != selected(mi)  # the conditioning matters on this data


# -------------------------------------------------------------- overlap deletion
def hand_made(n=600, seed=0):
    """Party A: f (most informative); party B: an exact copy of f, and g (less informative,
    independent of f, useful given f)."""
    rng = np.random.default_rng(seed)
    f = rng.integers(0, 8, n).astype(float)
    g = rng.integers(0, 8, n).astype(float)
    noise = rng.random(n)
    y = (f + 0.5 * g + 3 * noise >= 7).astype(np.int64)  # I(Y;f) = 0.57 > I(Y;g) = 0.06 bits
    blocks = [
        PartyBlock("A", pd.DataFrame({"f": f, "a_noise": rng.random(n)})),
        PartyBlock("B", pd.DataFrame({"f_copy": f, "g": g, "b_noise": rng.random(n)})),
    ]
    vds = VerticalDataset(name="handmade", blocks=blocks, y=y, task="binary", ids=np.arange(n))
    return vds.prepare(seed=seed)


def test_identical_copy_is_deleted_as_overlapping():
    data = hand_made()
    m, fed = fit("feast", data, n_select=2)
    # round 1: f (A) and its copy (B) tie on MI; A comes first, B is scored against V = {f} next
    assert selected(m) == [("A", "f"), ("B", "g")]
    st = fed.local_runtime("B").role.state
    assert st.deleted_overlap == [data.party("B").feature_names.index("f_copy")]
    assert m.info_["rounds"][1]["overlap_deleted"] == {"B": 1}
    # without the deletion the copy is kept as a candidate (score 0)
    m2, fed2 = fit("feast", data, n_select=2, overlap_delete=False)
    assert fed2.local_runtime("B").role.state.deleted_overlap == []
    assert selected(m2) == [("A", "f"), ("B", "g")]


def test_stops_early_when_every_party_was_selected():
    data = hand_made()  # 5 features; the copy of f is deleted in round 2, so only 4 can be selected
    with pytest.warns(UserWarning, match="4 of n_select=5"):
        m, _ = fit("feast", data, n_select=5)
    assert m.info_["n_selected"] == 4 and len(m.info_["rounds"]) == 2
    assert ("B", "f_copy") not in selected(m)


def test_feast_selects_no_duplicates_with_overlapping_columns():
    data = verticalfs.build_data("breast_cancer", parties=3, overlap=6, seed=0)
    n = 12

    def n_duplicate_pairs(m):
        cols = columns_of(data, selected(m))
        return sum(np.array_equal(a, b) for i, a in enumerate(cols) for b in cols[i + 1:])

    feast, _ = fit("feast", data, n_select=n)
    mi, _ = fit("mi", data, n_select=n)
    assert n_duplicate_pairs(mi) > 0  # the baseline falls for the copies (feast.md section 5.2) ...
    assert n_duplicate_pairs(feast) == 0  # ... FEAST does not


# ----------------------------------------------------------------- the protocol
def test_labels_and_statistical_variables_on_the_ledger(cancer):
    m, fed = fit("feast", cancer, trace=True, n_select=10)
    frame = fed.ledger.to_frame()
    setup = frame[frame.kind == "FeastSetup"]
    assert set(setup.receiver) == set(cancer.party_names) and (setup.sender == ACTIVE).all()
    assert (setup.phase == "selection").all()
    L = m.info_["sample_size"]
    assert L == cancer.n_samples("train")  # B^(m+1)|Y| = 8192 > L: all training rows
    assert (setup.payload >= L).all()  # one byte per label at least
    # the labels really are in the message
    y = cancer.labels.y["train"]
    msgs = [msg for s, r, msg in fed.channel.decoded() if isinstance(msg, FeastSetup)]
    assert all(msg.rows is None and np.array_equal(msg.labels, y) for msg in msgs)
    # statistical variables go party to party, in phase selection
    sv = frame[frame.kind == "StatVariables"]
    assert len(sv) > 0 and (sv.phase == "selection").all()
    assert not (sv.sender == ACTIVE).any() and not (sv.receiver == ACTIVE).any()
    assert fed.ledger.summary()["by_direction"]["peer"] == int(sv.bytes.sum())
    # ... and carry merged group ids, not feature values
    for _, _, msg in fed.channel.decoded():
        if isinstance(msg, StatVariables):
            assert msg.values.dtype.kind == "u"
            assert msg.values.shape[1] <= 4  # ceil(|S^k| / m) groups
    assert m.info_["selection_bytes"] == fed.ledger.bytes_where(phase="selection")
    assert sum(r["n_selected"] for r in m.info_["rounds"]) == 10
    assert len({r["party"] for r in m.info_["rounds"]}) == len(m.info_["rounds"])  # each party at most once


def test_sample_size_rule_in_the_protocol(cancer):
    m, fed = fit("feast", cancer, trace=True, n_select=4, bins=2, m=2)
    assert m.info_["sample_size"] == 2 ** 3 * 2
    msg = next(msg for _, _, msg in fed.channel.decoded() if isinstance(msg, FeastSetup))
    assert len(msg.rows) == 16 and len(msg.labels) == 16
    np.testing.assert_array_equal(msg.labels, cancer.labels.y["train"][msg.rows])
    m2, _ = fit("feast", cancer, n_select=4, sample_size=100)
    assert m2.info_["sample_size"] == 100


def test_tail_deletion_prunes_candidates(cancer):
    m, fed = fit("feast", cancer, n_select=10, tail_delete=20.0)
    frame = fed.ledger.to_frame()
    assert (frame.kind == "DropCandidates").sum() > 0
    assert sum(r["tail_deleted"] for r in m.info_["rounds"]) > 0
    dropped = {p: set(fed.local_runtime(p).role.state.deleted_tail) for p in cancer.party_names}
    for p, f in selected(m):
        assert cancer.party(p).feature_names.index(f) not in dropped[p]


@pytest.mark.parametrize("method", ["mdlp", "chimerge"])
def test_supervised_discretizer_refused_at_a_passive_party(cancer, method):
    with pytest.raises(ConfigError, match=r"party 'party1'.*only the label holder.*supervised_bins=True"):
        fit("feast", cancer, discretizer=method)
    with pytest.raises(ConfigError, match="party 'party1'"):
        fit("mi", cancer, discretizer=method)
    m, _ = fit("feast", cancer, discretizer=method, supervised_bins=True, n_select=5)
    assert len(selected(m)) == 5
    c, _ = fit("cfeast", cancer, discretizer=method, n_select=5)  # pooled with the labels: allowed
    assert len(selected(c)) == 5


def test_score_ablations_and_params(cancer):
    for score in ("su", "su-noalpha", "cmi"):
        m, _ = fit("feast", cancer, n_select=6, score=score)
        assert len(selected(m)) == 6
    with pytest.raises(ConfigError, match="score"):
        fit("feast", cancer, score="gini")
    with pytest.raises(ConfigError, match="tail_delete"):
        fit("feast", cancer, tail_delete=100.0)


@pytest.mark.slow  # two FEAST selections of 48 on digits (the fast suite's digits-feast case checks the default)
def test_estimator_ranks_the_noise_columns_last():
    """Issue 53: the plug-in CMI of a Gaussian noise column (all B bins filled) given a statistical
    variable of hundreds of values is large, a pixel column's (few values) small: on digits with
    50 % noise columns FEAST's paper estimator puts noise columns among the 48 it keeps; the
    default ``adjusted`` estimator (plug-in less its permutation mean) keeps none of them."""
    data = verticalfs.build_data("digits", parties=3, noise=0.5, seed=0)

    def noise_kept(m):
        return sum(bool(data.ground_truth[p][data.party(p).feature_names.index(f)]) for p, f in selected(m))

    adjusted, _ = fit("feast", data, n_select=48)
    assert adjusted.params.estimator == "adjusted"
    plugin, _ = fit("feast", data, n_select=48, estimator="plugin")
    assert len(selected(adjusted)) == len(selected(plugin)) == 48
    assert noise_kept(adjusted) == 0
    assert noise_kept(plugin) >= 6  # 12 of the 31 when measured (2026-11-28)


def test_estimator_param_and_a_party_checks_it(cancer):
    from verticalfs.exceptions import ProtocolError
    from verticalfs.methods.feast.messages import LabelScoresRequest, ScoreRequest

    for name in ("feast", "cfeast", "mi"):
        with pytest.raises(ConfigError, match="estimator"):
            fit(name, cancer, estimator="miller-madow")
        m, _ = fit(name, cancer, n_select=5, estimator="adjusted")
        assert len(selected(m)) == 5
    # a party decodes the estimator from the label holder's message: an unknown one is refused
    m, fed = fit("feast", cancer, n_select=5)
    role = fed.local_runtime("party1").role
    with pytest.raises(ProtocolError, match="estimator"):
        role.on_score(ScoreRequest(round=2, top=-1, estimator="exact"), None)
    m, fed = fit("mi", cancer, n_select=5)
    role = fed.local_runtime("party1").role
    with pytest.raises(ProtocolError, match="estimator"):
        role.on_label_scores(LabelScoresRequest(rows=None, labels=np.zeros(3, np.uint8), bins=8,
                                                discretizer="equal-frequency", supervised_bins=False, top=1,
                                                estimator="exact"), None)


def test_n_hat_window(cancer):
    # at most 2 per round and each of the 3 parties selected once: at most 6 of the 9
    with pytest.warns(UserWarning, match="stopped early"):
        m, _ = fit("feast", cancer, n_select=9, n_hat=2)
    assert all(r["window"] <= 2 and r["n_selected"] <= 2 for r in m.info_["rounds"])
    assert len(selected(m)) <= 6


# ------------------------------------------------------------------- baselines
def test_mi_protocol_and_ranking(cancer):
    m, fed = fit("mi", cancer, trace=True, n_select=5)
    frame = fed.ledger.to_frame()
    assert set(frame[frame.phase == "selection"].kind) == {"LabelScoresRequest", "FeatureScores"}
    assert (frame[frame.kind == "LabelScoresRequest"].sender == ACTIVE).all()
    # the global top 5 by MI: compare with scores computed here from the same bins
    from verticalfs.selection.discretize import discretize
    from verticalfs.selection.info import column_mutual_info
    y = cancer.labels.y["train"]
    allmi = [(float(s), p.name, j) for p in cancer.parties
             for j, s in enumerate(column_mutual_info(discretize(p.X["train"]), y))]
    top = sorted(allmi, key=lambda t: -t[0])[:5]
    assert sorted(selected(m)) == sorted((p, cancer.party(p).feature_names[j]) for _, p, j in top)


def test_random_and_raw(cancer):
    r1, fed = fit("random", cancer, n_select=7, seed=3)
    r2, _ = fit("random", cancer, n_select=7, seed=3)
    r3, _ = fit("random", cancer, n_select=7, seed=4)
    assert selected(r1) == selected(r2) != selected(r3)
    assert len(set(selected(r1))) == 7 and r1.info_["selection_bytes"] == 0
    raw, _ = fit("raw", cancer, n_select=3)
    assert sum(m.sum() for m in raw.get_support().values()) == sum(p.n_features for p in cancer.parties)


def test_raw_keeps_the_original_features_without_the_copies():
    """feast.md section 5.1: Raw is "the original feature set, which does not contain overlapping
    features"; each party drops the columns its schema names as copies."""
    plain = verticalfs.build_data("breast_cancer", parties=3, seed=0)
    data = verticalfs.build_data("breast_cancer", parties=3, overlap=5, seed=0)
    raw, fed = fit("raw", data, n_select=3)
    kept = selected(raw)
    assert kept == [(p.name, f) for p in plain.parties for f in p.feature_names]
    dropped = [(p.name, f) for p in data.parties for f in p.feature_names if (p.name, f) not in kept]
    assert len(dropped) == 15 and all(f.endswith("@copy") for _, f in dropped)
    for p, f in dropped:  # each is a copy of a column another party holds
        src = [q.name for q in data.parties if q.name != p and f[: -len("@copy")] in q.feature_names]
        assert len(src) == 1
        (a,), (b,) = columns_of(data, [(p, f)]), columns_of(data, [(src[0], f[: -len("@copy")])])
        np.testing.assert_array_equal(a, b)
    assert raw.info_["selection_bytes"] == 0 and raw.info_["n_selected"] == 30


def test_raw_drops_categorical_copies_and_renamed_copies():
    # A and B both hold a column "x"; C receives copies of all three columns of A and B: "x@copy",
    # "x@copy'" (renamed on the clash) and the categorical "color@copy", one-hot as "color@copy=<k>"
    n = 120
    rng = np.random.default_rng(0)
    blocks = [
        PartyBlock("A", pd.DataFrame({"x": rng.random(n), "color": rng.choice(["red", "blue"], n)}), ["color"]),
        PartyBlock("B", pd.DataFrame({"x": rng.random(n)})),
        PartyBlock("C", pd.DataFrame({"z": rng.random(n)})),
    ]
    vds = VerticalDataset(name="copies", blocks=blocks, y=rng.integers(0, 2, n), task="binary", ids=np.arange(n))
    data = add_overlap(vds, [0, 0, 3], seed=0).prepare(seed=0)
    assert sorted(data.party("C").feature_names) == sorted(
        ["z", "x@copy", "x@copy'", "color@copy=blue", "color@copy=red"])
    raw, _ = fit("raw", data)
    assert selected(raw) == [("A", "x"), ("A", "color=blue"), ("A", "color=red"), ("B", "x"), ("C", "z")]
    assert [is_overlap_copy(f) for f in ("x@copy", "x@copy''", "color@copy=a=b", "x", "x@copyright",
                                         "copy", "x@copy_2")] == [True, True, True, False, False, False, False]


def test_cfeast_sends_nothing(cancer):
    m, fed = fit("cfeast", cancer, n_select=6)
    assert fed.ledger.total_bytes == 0 and len(selected(m)) == 6
