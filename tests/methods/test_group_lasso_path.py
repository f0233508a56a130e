"""Group lasso's penalty path beyond three classes (issue 53): after ``epochs`` epochs at
``lambda_m``, stages at 1.5, 2, 3 and 4 times it, each followed by ``path_refit`` epochs without
penalty and kept if the validation accuracy stays within ``path_tol`` of the best stage's; the last
kept is the result, features pruned on a refused stage come back with the restore."""

from __future__ import annotations

import pytest

import verticalfs
from verticalfs.exceptions import ProtocolError
from verticalfs.federation import Federation
from verticalfs.methods import create
from verticalfs.methods.baselines.group_lasso import GroupLassoPenalty

SMALL = dict(epochs=2, batch_size=64, hidden=(16, 8), path_epochs=1, path_refit=1)


def test_two_classes_train_as_before():
    data = verticalfs.build_data("breast_cancer", parties=2, noise=0.5, seed=0)
    fed = Federation.in_process(data)
    m = create("group-lasso", seed=0, **SMALL).fit(fed)
    assert "lam_path" not in m.info_ and m.trainer_.epoch == 2 and m.info_["lambda_m"] == 0.5
    assert not [r for r in fed.ledger.records() if r.kind == "GroupLassoPenalty"]


def test_the_path_keeps_the_largest_penalty_the_validation_rows_accept(four):
    fed = Federation.in_process(four)
    m = create("group-lasso", seed=0, **SMALL).fit(fed)
    path = m.info_["lam_path"]
    stages = path["stages"]
    assert [s["lam"] / stages[0]["lam"] for s in stages] == [1.0, 1.5, 2.0, 3.0, 4.0]
    best, kept = stages[0]["val_accuracy"], 0
    for k, s in enumerate(stages[1:], 1):
        best = max(best, s["val_accuracy"])
        if s["val_accuracy"] >= best - path["tol"]:
            kept = k
    assert path["kept"] == kept and m.info_["lambda_m"] == stages[kept]["lam"]
    assert m.trainer_.epoch == 2 + 1 + 4 * (1 + 1)  # a refit epoch after each of 5 stages
    sent = [r for r in fed.ledger.records() if r.kind == "GroupLassoPenalty"]
    # per party: the refit's 0 after the first stage, then each stage's penalty and its refit's 0
    assert len(sent) == (1 + 2 * 4) * len(four.party_names) and all(r.phase == "train" for r in sent)
    last = m.trainer_.history[-1]
    assert last["phase"] == "selection"  # the kept stage's model (restored if a later one was refused)
    assert last["val_accuracy"] == pytest.approx(stages[kept]["val_accuracy"])


def test_a_stage_the_validation_rows_refuse_is_undone_features_included(four):
    """A penalty 1,000 times too strong zeroes every group: its stage is refused, and the model
    and the features of the stage before come back: exactly the run without the path."""
    kw = dict(SMALL, epochs=3, lam_path=(1000.0,), path_epochs=2, path_refit=0, path_tol=0.0)
    ref = create("group-lasso", seed=0, **{**kw, "lam_path": ()}).fit(Federation.in_process(four))
    m = create("group-lasso", seed=0, **kw).fit(Federation.in_process(four))
    stages = m.info_["lam_path"]["stages"]
    assert stages[1]["val_accuracy"] < stages[0]["val_accuracy"]
    assert m.info_["lam_path"]["kept"] == 0 and m.trainer_.epoch == 5
    assert m.metrics_ == ref.metrics_
    assert {p: v.tolist() for p, v in m.support_.items()} == {p: v.tolist() for p, v in ref.support_.items()}
    assert sum(int(v.sum()) for v in m.support_.values()) > 0


def test_a_party_refuses_a_penalty_that_is_not_a_finite_number(four):
    fed = Federation.in_process(four)
    create("group-lasso", seed=0, **{**SMALL, "lam_path": ()}).fit(fed)
    role = fed.local_runtime(four.party_names[0]).role
    for bad in (float("nan"), -1.0, float("inf"), 1e9):
        with pytest.raises(ProtocolError, match="GroupLassoPenalty lam"):
            role.on_penalty(GroupLassoPenalty(lam=bad), None)
