"""SEFS over the federation: the copula gates carry the features' correlation, the self-supervised
phase learns to reconstruct, the selection keeps the features with pi > 0.5 for real."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import verticalfs
from verticalfs.federation import Federation
from verticalfs.methods import create
from verticalfs.methods.baselines.sefs import copula_factor


def test_copula_gates_follow_the_correlation():
    rng = np.random.default_rng(0)
    a = rng.normal(size=2000)
    X = np.stack([a, a + 0.1 * rng.normal(size=2000), rng.normal(size=2000)], 1)
    L = copula_factor(X)
    g = torch.randn(20000, 3, generator=torch.Generator().manual_seed(0)) @ L.T
    m = (0.5 * (1 + torch.erf(g / 2 ** 0.5)) < 0.5).float().numpy()
    c = np.corrcoef(m.T)
    assert c[0, 1] > 0.8 and abs(c[0, 2]) < 0.05 and abs(m.mean() - 0.5) < 0.02


def test_copula_factor_of_wide_or_constant_columns_is_finite():
    X = np.random.default_rng(1).normal(size=(5, 40))
    X[:, 3] = 2.0
    L = copula_factor(X)
    assert L.shape == (40, 40) and torch.all(torch.isfinite(L))


@pytest.mark.slow  # 1,500 steps (about 8 s on 2 idle cores); SEFS runs fast in the contract and privacy tests
def test_selection_and_pretraining():
    data = verticalfs.build_data("breast_cancer", parties=2, noise=1.0, seed=0)
    fed = Federation.in_process(data)
    m = create("sefs", seed=0, ss_steps=300, steps=1500)
    m.fit(fed)
    assert set(m.info_["pretrain_loss"]) == set(data.party_names)
    assert fed.ledger.bytes_where(phase="pretrain") > 0
    for p in data.parties:
        role = fed.local_runtime(p.name).role
        assert np.all(role.pi().detach().numpy() > 0.5)  # what is left is what pi selects
        assert role.model.input_layer.weight.shape[1] == m.get_support(p.name).sum()
    kept_noise = sum(int((m.get_support(p.name) & np.array(["_noise" in f for f in p.feature_names])).sum())
                     for p in data.parties)
    kept = sum(int(m.get_support(p.name).sum()) for p in data.parties)
    assert kept > 0 and kept_noise / kept < 0.25  # half of the columns are noise
    assert m.metrics_["accuracy"] > 0.65  # above the majority class (0.63) after 1,500 steps
