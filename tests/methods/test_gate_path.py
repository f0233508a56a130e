"""The gates' penalty path beyond three classes (issue 53): after the training at the penalty of
issue 40, stages at 4, 16 and 64 times it, each kept if the validation accuracy stays within
``path_tol`` of the best stage's; the last kept is the result."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import verticalfs
from verticalfs.federation import Federation
from verticalfs.methods import create

SMALL = dict(epochs=2, batch_size=64, hidden=(16, 8), path_epochs=1)


def test_two_classes_train_as_before(four):
    data = verticalfs.build_data("breast_cancer", parties=2, noise=0.5, seed=0)
    m = create("original-gate", seed=0, **SMALL).fit(Federation.in_process(data))
    assert "lam_path" not in m.info_ and m.trainer_.epoch == 2


def test_the_path_keeps_the_largest_penalty_the_validation_rows_accept(four):
    fed = Federation.in_process(four)
    m = create("original-gate", seed=0, **SMALL).fit(fed)
    path = m.info_["lam_path"]
    stages = path["stages"]
    assert [round(s["lam"] / stages[0]["lam"]) for s in stages] == [1, 4, 16, 64]
    assert stages[0]["lam"] == pytest.approx(0.1 * 3 / 4)  # issue 40's rule before the path
    best, kept = stages[0]["val_accuracy"], 0
    for k, s in enumerate(stages[1:], 1):
        best = max(best, s["val_accuracy"])
        if s["val_accuracy"] >= best - path["tol"]:
            kept = k
    assert path["kept"] == kept and m.info_["lam"] == stages[kept]["lam"]
    assert m.trainer_.epoch == 2 + 3  # 3 stages of path_epochs = 1
    sent = [r for r in fed.ledger.records() if r.kind == "GatePenalty"]
    assert len(sent) == 3 * len(four.party_names) and all(r.phase == "train" for r in sent)


@pytest.fixture(scope="module")
def digits():
    return verticalfs.build_data("digits", parties=2, noise=0.5, seed=0)


# Adam moves a gate's mean by at most its rate (0.03) a step: a refused stage needs steps, not only
# a large penalty, to close the gates; digits' 1,257 training rows give 20 steps an epoch at 64 rows
REFUSED = dict(epochs=5, batch_size=64, hidden=(16, 8), lam_path=(1000.0,), path_epochs=3, path_tol=0.0)


@pytest.mark.slow
def test_a_stage_the_validation_rows_refuse_is_undone(digits):
    """A penalty 1,000 times too strong closes the gates: its stage is refused and the model of
    the last accepted stage restored, exactly the model without the path."""
    ref = create("original-gate", seed=0, **{**REFUSED, "lam_path": ()}).fit(Federation.in_process(digits))
    m = create("original-gate", seed=0, **REFUSED).fit(Federation.in_process(digits))
    stages = m.info_["lam_path"]["stages"]
    assert stages[1]["val_accuracy"] < stages[0]["val_accuracy"]  # the gates closing: refused
    assert m.info_["lam_path"]["kept"] == 0 and m.trainer_.epoch == 8
    assert m.metrics_ == ref.metrics_
    assert {p: v.tolist() for p, v in m.support_.items()} == {p: v.tolist() for p, v in ref.support_.items()}


@pytest.mark.slow
def test_a_secure_run_restores_its_hidden_weights_with_the_parties_noise(digits):
    """Secure training keeps W~ = w + eps_acc at the label holder and eps_acc at each party: a
    restored stage brings both back, so the secure model stays the plaintext one."""
    kw = dict(REFUSED, epochs=4, path_epochs=8, key_bits=768, insecure=True, precision=18, value_bits=10,
              limit_batches=4)
    runs = {}
    for secure in (False, True):
        fed = Federation.in_process(digits)
        runs[secure] = (create("fedsdg-fs", seed=0, secure=secure, **kw).fit(fed), fed)
    (mp, fp), (ms, fs) = runs[False], runs[True]
    assert mp.info_["lam_path"]["kept"] == ms.info_["lam_path"]["kept"] == 0  # restored
    assert [s["val_accuracy"] for s in mp.info_["lam_path"]["stages"]] == pytest.approx(
        [s["val_accuracy"] for s in ms.info_["lam_path"]["stages"]])
    start = 0
    for p in digits.party_names:
        a, b = fp.local_runtime(p).role.model.state_dict(), fs.local_runtime(p).role.model.state_dict()
        for k in a:
            # 2e-4 apart without the path too (fixed point over 4 epochs): the restore adds nothing
            torch.testing.assert_close(a[k], b[k], atol=5e-4, rtol=1e-3, msg=f"{p} {k}")
        e = mp.trainer_.embedding_dims[p]
        w_plain = mp.trainer_.top.input_layer.weight.detach().numpy()[:, start:start + e]
        eps = fs.local_runtime(p).role.crypto.eps / 2.0 ** 18
        np.testing.assert_allclose(ms.trainer_.true_weights(p, eps), w_plain, atol=5e-4)
        start += e
