"""Attack 2 of issue 50: ``fate-lasso``'s party applies the weight update the label holder decrypts
for it without any check.

The label holder starts a run with ``alpha = 0`` and ``lr = 1``, sends encrypted zero residuals
(the party's masked gradient then decrypts to the party's mask ``R`` alone) and answers with
``R + delta``: the party computes ``g = delta 2**e / |B|`` and sets ``w = -g``, here the unit
vector of column ``j``; every later ``PartialPredictor`` is ``X_B w``, column ``j`` of the batch.

The party cannot check an update it cannot see, so the default policy refuses the method at
``Join``, naming the finding (``allow_findings``); "recovers nothing" is that refusal, before
any key or row is touched. The kept old path (the permissive policy, or a policy that lists the
finding) recovers the column exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.attacks.harness import SELECTION, Holder, default_policy, party, table
from verticalfs.codecs.integers import pack_uints
from verticalfs.configuration import PartyPolicy
from verticalfs.crypto import EncryptedArray, generate_keypair
from verticalfs.exceptions import PolicyError
from verticalfs.methods.fate.messages import (
    EncryptedResidual,
    GradientResult,
    LassoStart,
    MaskedGradient,
    PartialPredictor,
)
from verticalfs.training.batches import BatchPlan
from verticalfs.transport.messages import Join

B = 64


def _column(h: Holder, n: int, d: int, j: int) -> np.ndarray:
    pub, priv = generate_keypair(512, insecure=True)
    plan = BatchPlan(n, B, 0)
    h.ask(LassoStart(public_key=pub.to_bytes(), insecure=True, run=0, alpha=0.0, lr=1.0, batch_size=B,
                     shuffle_seed=0, feature_precision=16), SELECTION, expect=PartialPredictor)
    col = np.full(n, np.nan)
    wn = (pub.bits + 7) // 8
    steps = [(e, k) for e in range(2) for k in range(plan.n_batches)]
    for i, (e, k) in enumerate(steps[:-1]):
        rows = plan.rows(e, k)
        zero = EncryptedArray.encrypt(priv, np.zeros(len(rows)), precision=32)
        mg = h.ask(EncryptedResidual(epoch=e, batch=k, data=zero.to_bytes(), exponent=zero.exponent, bound_bits=0),
                   SELECTION, expect=MaskedGradient)
        R = priv.decrypt_residues(EncryptedArray.from_bytes(pub, mg.data, None, mg.exponent).ciphertexts())
        delta = [0] * d
        if i == 0:  # w = e_j: g = (sent - R) 2**exponent / |B| and w = -lr g
            delta[j] = -(len(rows) << -mg.exponent)
        sent = [(r + x) % pub.n for r, x in zip(R, delta, strict=True)]
        ne, nb = steps[i + 1]
        pp = h.ask(GradientResult(values=pack_uints(sent, wn), next_epoch=ne, next_batch=nb), SELECTION,
                   expect=PartialPredictor)
        col[plan.rows(ne, nb)] = pp.values
    return col


@pytest.mark.parametrize("policy", [PartyPolicy.permissive(), default_policy(allow_findings=["lasso-weight-update"])],
                         ids=["permissive", "finding-allowed"])
def test_old_path_lasso_update_gives_a_raw_column(tmp_path, policy):
    rt = party(tmp_path, policy)
    h = Holder(rt)
    h.align(table()["id"])
    h.ask(Join(method="fate-lasso", spec=None))
    n, d = rt.data.n_samples("train"), rt.data.n_features
    col = _column(h, n, d, j=0)
    truth = rt.data.X("train").numpy()[:, 0]
    assert not np.isnan(col).any()
    assert np.abs(col - truth).max() < 1e-6


def test_default_policy_refuses_fate_lasso_naming_the_finding(tmp_path):
    rt = party(tmp_path)
    h = Holder(rt)
    h.align(table()["id"])
    with pytest.raises(PolicyError) as e:
        h.ask(Join(method="fate-lasso", spec=None))
    text = str(e.value)
    assert "lasso-weight-update" in text and "allow_findings = []" in text and "\n" not in text, text
    assert rt.role is None
