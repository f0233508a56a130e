"""ICAFS's DP-SGD (issue 36 item 4): the noise comes from the operating system's entropy, never from
the run's seed; the real rows' batches are Poisson samples, as the accountant assumes; the result
states the guarantee and what it does not cover."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import verticalfs
from verticalfs.exceptions import ConfigError
from verticalfs.federation import Federation
from verticalfs.methods import create, get
from verticalfs.methods.icafs import dp
from verticalfs.training.batches import BatchPlan

# no synthesis (no-fs): the DP-SGD path alone, in a few seconds
KW = {**get("icafs").test_params, "epochs": 1, "refit_epochs": 0, "variant": "no-fs"}


@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=2, noise=1.0, seed=0)


def encoders(data, **params):
    """Train ICAFS; every party's encoder weights, concatenated, and the fitted method."""
    fed = Federation.in_process(data)
    m = create("icafs", seed=0, **{**KW, **params})
    m.fit(fed)
    w = torch.cat([p.detach().flatten() for q in data.party_names
                   for p in fed.local_runtime(q).role.model.parameters()])
    return w, m, fed


def test_same_seed_gives_different_noise_only_with_dp(data):
    a, _, _ = encoders(data, dp_epsilon=5.0)
    b, _, _ = encoders(data, dp_epsilon=5.0)
    assert not torch.allclose(a, b)  # the noise differs between two runs of the same seed
    c, _, _ = encoders(data)
    d, _, _ = encoders(data)
    assert torch.equal(c, d)  # without DP the same seed gives the same encoders


def test_noise_is_keyed_by_os_entropy_not_by_the_seed(data, monkeypatch):
    """With the entropy source pinned, two DP runs are identical (the noise key is the only
    randomness that is not the seed's) and another key changes them: the noise is a function of
    the key alone, and the key comes from ``secrets`` (os.urandom)."""
    monkeypatch.setattr(dp, "noise_seed", lambda: 1234)
    a, _, _ = encoders(data, dp_epsilon=5.0)
    b, _, _ = encoders(data, dp_epsilon=5.0)
    assert torch.equal(a, b)
    monkeypatch.setattr(dp, "noise_seed", lambda: 4321)
    c, _, _ = encoders(data, dp_epsilon=5.0)
    assert not torch.allclose(a, c)
    monkeypatch.undo()
    monkeypatch.setattr(dp.secrets, "randbits", lambda k: 77)
    assert dp.noise_seed() == 77
    assert torch.equal(torch.randn(5, generator=dp.noise_generator()),
                       torch.randn(5, generator=torch.Generator().manual_seed(77)))


def test_result_states_the_guarantee(data):
    from opacus.accountants import RDPAccountant

    _, m, fed = encoders(data, dp_epsilon=5.0)
    info = m.info_["dp"]
    json.dumps(info)
    n = len(data.labels.y["train"])
    assert info["epsilon"] == 5.0 and info["delta"] == 1e-5 and info["clip"] == 1.0
    assert info["noise_source"] == "os-entropy"
    assert info["sample_rate"] == pytest.approx(64 / n)
    assert info["steps"] == math.ceil(n / 64)
    assert "Poisson" in info["sampling"] and "encoder" in info["trained"]
    assert "not (epsilon, delta)-DP" in info["protects"]
    acc = RDPAccountant()
    acc.history = [(info["noise_multiplier"], info["sample_rate"], info["steps"])]
    assert acc.get_epsilon(delta=info["delta"] - info["delta_empty_batches"]) == pytest.approx(5.0, abs=0.05)
    acc.history = [(info["noise_multiplier"] / math.sqrt(2), info["sample_rate"], info["steps"])]
    assert info["epsilon_all_parties"] == pytest.approx(acc.get_epsilon(delta=1e-5), rel=1e-3)
    text = " ".join(info["not_covered"])
    for item in ("embeddings of real training rows", "top model", "labels"):
        assert item in text
    assert "stage 1" not in text  # no-fs has no synthesis ...
    full = dp.guarantee(dataclass_params(dp_epsilon=5.0), n, 2, info["noise_multiplier"], info["steps"])
    text = " ".join(full["not_covered"])  # ... icafs has, and it is named
    for item in ("stage 1", "critic features of real rows", "steps on synthetic rows", "selection"):
        assert item in text
    # what the parties did is what is stated: Opacus's DP optimizer with that noise and clip,
    # secure-mode noise, a generator that is not the seed's
    role = fed.local_runtime(data.party_names[0]).role
    assert role.dp_optimizer.noise_multiplier == info["noise_multiplier"]
    assert role.dp_optimizer.max_grad_norm == info["clip"] and role.dp_optimizer.secure_mode
    assert create("icafs", seed=0, **KW).fit(Federation.in_process(data)).info_.get("dp") is None


def dataclass_params(**kw):
    from verticalfs.methods.icafs import ICAFSParams

    return ICAFSParams(**{**KW, "variant": "icafs", **kw})


def test_real_batches_are_poisson_samples_both_sides_agree(data):
    _, m, fed = encoders(data, dp_epsilon=5.0)
    plan = m.trainer_.plan
    assert isinstance(plan, dp.PoissonPlan)
    for q in data.party_names:
        party = fed.local_runtime(q).role.plan
        assert isinstance(party, dp.PoissonPlan) and party.shuffle_seed == plan.shuffle_seed
        assert np.array_equal(party.rows(1, 3), plan.rows(1, 3))
    sizes = np.array([len(plan.rows(e, b)) for e in range(200) for b in range(plan.n_batches)])
    assert len(set(sizes)) > 10  # variable batches ...
    assert sizes.mean() == pytest.approx(64, rel=0.03)  # ... of expected size q n
    _, m, fed = encoders(data)
    assert type(m.trainer_.plan) is BatchPlan  # without DP: the shuffled batches, as before


def test_poisson_plan_includes_each_row_independently():
    plan = dp.PoissonPlan(50, 10, 3)
    hits = np.zeros(50)
    for b in range(4000):
        hits[plan.rows(0, b)] += 1
    assert np.abs(hits / 4000 - 0.2).max() < 0.04
    assert not np.array_equal(plan.rows(0, 0), plan.rows(1, 0))


def test_batches_too_small_for_poisson_sampling_refused(data):
    with pytest.raises(ConfigError, match="batch_size"):
        create("icafs", seed=0, dp_epsilon=5.0, **{**KW, "batch_size": 2}).fit(Federation.in_process(data))


def test_an_empty_poisson_batch_is_skipped(data, monkeypatch):
    """A batch that samples no row takes no step (its probability is charged to delta) instead of
    a loss over no rows."""
    rows = dp.PoissonPlan.rows
    monkeypatch.setattr(dp.PoissonPlan, "rows",
                        lambda self, e, b: np.zeros(0, dtype=np.int64) if b == 0 else rows(self, e, b))
    _, m, _ = encoders(data, dp_epsilon=5.0)
    assert np.isfinite(m.history_[-1]["train_loss"])
