"""SecureBoost: lossless against the central reference (the same splits and predictions), its
parties' checks, the saved model, and sbt-filter's selection."""

from __future__ import annotations

import numpy as np
import pytest

import verticalfs
from verticalfs.exceptions import ConfigError, PolicyError, ProtocolError, VerticalFSWarning
from verticalfs.federation import Federation
from verticalfs.methods import create
from verticalfs.methods.secureboost import SecureBoostParams
from verticalfs.methods.secureboost import boosting as B
from verticalfs.methods.secureboost.messages import SplitRequest
from verticalfs.methods.secureboost.reference import CentralGBDT
from verticalfs.methods.secureboost.tree import Tree
from verticalfs.transport.messages import At

KEY = {"key_bits": 512, "insecure": True}


def run(data, **params):
    m = create("secureboost", seed=3, **KEY, **params)
    fed = Federation.in_process(data)
    m.fit(fed)
    return m, fed


def reference(data, m, **kw):
    p = SecureBoostParams(**{k: v for k, v in vars(m.params).items()})
    X = {q.name: q.X["train"] for q in data.parties}
    ref = CentralGBDT(p, data.labels.task, data.labels.n_classes, seed=3, min_rows_per_bin=16, min_rows_per_node=16,
                      **kw)
    ref.fit(X, data.labels.y["train"], {q.name: q.X["val"] for q in data.parties}, data.labels.y["val"])
    return ref


def assert_same_trees(m, ref, parties):
    trees = [Tree.from_dict(d) for d in m.booster_.trees]
    assert len(trees) == len(ref.trees)
    for t, r in zip(trees, ref.trees, strict=True):
        got = {i: (parties[t.party[i]], t.feature[i], t.bin[i]) for i in range(t.n_nodes) if t.party[i] >= 0}
        want = {i: (parties[s[0]], s[1], s[2]) for i, s in r.split.items()}
        assert got == want
        for i in r.split:
            assert t.gain[i] == pytest.approx(r.gain[i], rel=1e-12)


@pytest.fixture(scope="module")
def cancer():
    return verticalfs.build_data("breast_cancer", parties=3, noise=0.5, seed=0)


@pytest.mark.parametrize("extra", [
    pytest.param({"rows_per_ciphertext": 1}, id="one-row"),
    pytest.param({"rows_per_ciphertext": 2, "subsample": 0.8, "colsample_bytree": 0.7, "reg_alpha": 0.05},
                 id="two-rows-sampled", marks=pytest.mark.slow),
])
def test_binary_is_lossless(cancer, extra):
    """The same splits (party, feature, bin) at the same nodes, the same gains and predictions to
    1e-6 (they are equal: the same integers reach the same float formula)."""
    m, _ = run(cancer, n_estimators=3, max_depth=3, n_bins=16, early_stopping_rounds=2, **extra)
    assert m.info_["layout"]["rows_per_ciphertext"] == extra["rows_per_ciphertext"]
    ref = reference(cancer, m)
    assert_same_trees(m, ref, [q.name for q in cancer.parties])
    X = {q.name: q.X["test"] for q in cancer.parties}
    np.testing.assert_allclose(m.booster_.margins["test"], ref.predict_margins(X), rtol=0, atol=1e-6)
    assert sum(len(r.split) for r in ref.trees) >= 6  # trees that split, not stumps


def test_multiclass_is_lossless():
    data = verticalfs.build_data("wine", parties=2, seed=1)
    m, _ = run(data, n_estimators=3, max_depth=2, n_bins=8, rows_per_ciphertext=0)
    assert m.booster_.K == 3
    ref = reference(data, m)
    assert_same_trees(m, ref, [q.name for q in data.parties])
    X = {q.name: q.X["test"] for q in data.parties}
    np.testing.assert_allclose(m.booster_.margins["test"], ref.predict_margins(X), rtol=0, atol=1e-6)
    assert m.metrics_["accuracy"] > 0.8


def test_a_party_refuses_splits_below_its_minimum_rows(cancer):
    m, fed = run(cancer, n_estimators=1, max_depth=1, n_bins=8)
    rt = fed.local_runtime(cancer.parties[0].name)
    role = rt.role
    with pytest.raises(ProtocolError, match="before its TreeStart"):
        role.on_split(SplitRequest(tree=0, node=0, feature=0, bin=0, left_child=1, right_child=2), None)
    assert role.min_rows_per_node == 16 and all(int(c) >= 16 for c in np.bincount(role.codes[:, 0].astype(int)))


def test_parameters_are_checked_before_any_work(cancer):
    fed = Federation.in_process(cancer)
    with pytest.raises(ConfigError, match="rl_trees"):
        create("secureboost", rl_trees=1, **KEY).fit(fed)
    with pytest.raises(ConfigError, match="max_depth"):
        create("secureboost", max_depth=0, **KEY).fit(fed)
    with pytest.raises(ConfigError, match="packing"):
        create("secureboost", packing="bytes", **KEY).fit(fed)
    assert PolicyError  # (the policy refusals are tested in tests/attacks)


def test_packing_for_fewest_ciphertexts_picks_the_m_of_fewest_and_counts_them(cancer):
    """``packing = "ciphertexts"``: the layout of fewest ciphertexts by the count the tree's own
    figures confirm (one full tree: every party returns the modelled histograms)."""
    from verticalfs.histogram.gradients import GradientLayout
    from verticalfs.methods.secureboost.method import tree_ciphertexts

    m, fed = run(cancer, n_estimators=1, max_depth=2, n_bins=8, packing="ciphertexts")
    b = m.booster_
    fig = b.figures["trees"][0]
    n = fig["rows"]
    counts = {}
    for k in range(1, GradientLayout.max_rows(b.pub, 2, 24, n) + 1):
        counts[k] = b.ciphertexts(GradientLayout.for_key(b.pub, 2, 24, n, k), n, b.parties)
    chosen = fig["layout"]["rows_per_ciphertext"]
    assert len(counts) > 1 and counts[chosen] == min(counts.values())
    hpp = fig["histograms"] / len(b.parties)
    lay = GradientLayout.for_key(b.pub, 2, 24, n, chosen)
    assert tree_ciphertexts(lay, n, b.bin_nums, hpp) == fig["ciphertexts"] + fig["returned_ciphertexts"]


def test_gain_and_leaf_formulas():
    G, H = np.asarray([2.0]), np.asarray([4.0])
    assert B.split_gain(np.asarray([[1.0]]), np.asarray([[2.0]]), G, H, 1.0, 0.0, 0.0)[0] == pytest.approx(
        0.5 * (1 / 3 + 1 / 3 - 4 / 5))
    v = B.leaf_values(np.asarray([[1.0], [1.0]]), np.asarray([[1.0], [1.0]]), np.asarray([0, 0]), 1, 1.0, 0.5, 0.3)
    assert v[0, 0] == pytest.approx(-0.3 * 1.5 / 3)
    assert At("train").phase == "train"


@pytest.mark.slow
def test_resume_after_a_tree_ends_as_uninterrupted(cancer, tmp_path):
    """Checkpoints after every tree (every party's lookup table, the label holder's trees, margins and
    key): a run stopped during its third tree and resumed ends as an uninterrupted one."""
    from verticalfs.methods.secureboost.method import Booster

    params = {"n_estimators": 3, "max_depth": 2, "n_bins": 8, **KEY}
    full = verticalfs.run("secureboost", cancer, seed=0, params=params)
    orig, seen = Booster.stop, {"n": 0}

    def stop(self, entry):  # the third tree is grown, not yet checkpointed: a crash there
        seen["n"] += 1
        if seen["n"] == 3:
            raise KeyboardInterrupt
        return orig(self, entry)

    Booster.stop = stop
    try:
        with pytest.raises(KeyboardInterrupt):
            verticalfs.run("secureboost", cancer, seed=0, params=params, checkpoint_dir=tmp_path)
    finally:
        Booster.stop = orig
    res = verticalfs.run("secureboost", cancer, seed=0, params=params, checkpoint_dir=tmp_path, resume=True)
    assert res.info["resumed_from"]["epoch"] == 2
    assert res.metrics == full.metrics
    assert [h["roc_auc"] for h in res.history] == [h["roc_auc"] for h in full.history]
    phases = {k: v for k, v in res.communication["by_phase"].items() if k != "checkpoint"}
    assert phases == full.communication["by_phase"]


@pytest.mark.slow
def test_pipelines_select_then_boost_and_boost_then_train(cancer):
    small = {"n_estimators": 2, "max_depth": 2, "n_bins": 8, **KEY}
    a = verticalfs.run("sbt-filter+vfl", cancer, seed=0,
                       params={"sbt-filter.n_select": 8, **{f"sbt-filter.{k}": v for k, v in small.items()},
                               "vfl.epochs": 3})
    assert a.selection["n_kept"] == 8 and a.metrics["roc_auc"] > 0.9
    b = verticalfs.run("feast+secureboost", cancer, seed=0,
                       params={"feast.n_select": 8, **{f"secureboost.{k}": v for k, v in small.items()}})
    assert b.selection["n_kept"] == 8 and b.metrics["roc_auc"] > 0.9
    assert b.communication["by_kind"]["TreeStart"] > 0


def test_rl_trees_tell_the_other_parties_nothing(cancer):
    """RL-SecureBoost: the first tree is built on the label holder's own party alone; no other party
    receives anything of it; the trees equal the reference's with the same rule."""
    own = cancer.parties[0].name
    m, fed = run(cancer, n_estimators=2, max_depth=2, n_bins=8, rl_trees=1, label_party=own)
    first = [r for r in fed.ledger.records() if r.round == 0 and r.phase == "train"]
    assert first and {r.receiver for r in first if r.sender == "active"} == {own}
    assert {p for p in Tree.from_dict(m.booster_.trees[0]).party if p >= 0} == {0}
    ref = reference(cancer, m, own_party=own)
    assert_same_trees(m, ref, [q.name for q in cancer.parties])


@pytest.mark.parametrize("extra", [pytest.param({"rows_per_ciphertext": 1}, id="one-row"),
                                   pytest.param({"rows_per_ciphertext": 2, "subsample": 0.8}, id="two-rows-sampled")])
def test_hide_own_splits_is_lossless_and_tells_the_other_parties_no_instance_space_of_them(cancer, extra):
    """hide_own_splits: the same trees as the central reference (and as without the option), while
    no other party applies a partition of the label holder's own splits or of any node below one:
    it sums the per-node gradients over the anchor it knows instead."""
    from verticalfs.methods.secureboost import role as R

    own = cancer.parties[0].name
    applied: list[tuple[str, int]] = []
    orig = R.SBTRole._add_children

    def spy(self, st, parent, left, a, b):
        applied.append((self.name, int(st["id"]), int(parent)))
        return orig(self, st, parent, left, a, b)

    R.SBTRole._add_children = spy
    try:
        m, fed = run(cancer, n_estimators=3, max_depth=3, n_bins=16, label_party=own, hide_own_splits=True, **extra)
    finally:
        R.SBTRole._add_children = orig
    ref = reference(cancer, m)
    names = [q.name for q in cancer.parties]
    assert_same_trees(m, ref, names)
    X = {q.name: q.X["test"] for q in cancer.parties}
    np.testing.assert_allclose(m.booster_.margins["test"], ref.predict_margins(X), rtol=0, atol=1e-6)
    plain, _ = run(cancer, n_estimators=3, max_depth=3, n_bins=16, label_party=own, **extra)
    assert plain.booster_.trees == m.booster_.trees
    # the nodes each party knows: below a split of the label holder's own party, none but its own
    hidden_below = 0
    for t, d in enumerate(m.booster_.trees):
        tree = Tree.from_dict(d)
        concealed: set[int] = set()
        for i in range(tree.n_nodes):  # parents come before their children
            if tree.party[i] < 0:
                continue
            if i in concealed or names[tree.party[i]] == own:
                concealed |= {int(tree.left[i]), int(tree.right[i])}
                if i in concealed and names[tree.party[i]] != own:
                    hidden_below += 1
        others = {p for q, tt, p in applied if q != own and tt == t}
        assert not (others & (concealed | {i for i in range(tree.n_nodes) if names[tree.party[i]] == own
                                           and tree.party[i] >= 0})), (t, others)
    assert any(names[p] == own for d in m.booster_.trees for p in Tree.from_dict(d).party if p >= 0)
    assert hidden_below > 0  # another party split a node it did not know (the anchor's split)
    sent = {(r.receiver, r.kind) for r in fed.ledger.records() if r.sender == "active"}
    assert {(q, "HiddenHistogramRequest") for q in names[1:]} <= sent
    assert (own, "HiddenHistogramRequest") not in sent and (own, "HiddenSplitRequest") not in sent


def test_sbt_filter_auto_searches_only_the_features_the_trees_split_on(cancer):
    """``n_select="auto"`` (issue 53): the features no tree split on tie at importance 0 and would be
    taken in party and column order, so the search's grid stops at the features split on; an
    explicit N still keeps N features."""
    small = {"n_estimators": 2, "max_depth": 2, "n_bins": 8, **KEY}
    m = create("sbt-filter", seed=0, **small).fit(Federation.in_process(cancer))
    splits = m.booster_.importance_splits
    used = sum(int((v > 0).sum()) for v in splits.values())
    a = m.info_["auto"]
    assert 0 < used <= 6 and m.n_ranked_ == used == m.info_["features_split_on"]  # 2 trees of depth 2: <= 6 splits
    assert a["grid"][-1] == used and all(n <= used for n in a["grid"])
    assert all(splits[q][i] > 0 for q, i in m.selected_)
    with pytest.warns(VerticalFSWarning, match=rf"trees split on {used} features; the other {12 - used} of "
                                                r"n_select=12 tie at importance 0"):
        fixed = create("sbt-filter", seed=0, n_select=12, **small).fit(Federation.in_process(cancer))
    assert len(fixed.selected_) == 12 and "auto" not in fixed.info_
