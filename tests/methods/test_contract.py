"""The contract every registered method honours; new methods are picked up automatically.

Each method runs with the small settings it declares itself (``test_params``), on breast cancer
with injected noise features and three feature parties.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import verticalfs
from verticalfs.exceptions import ConfigError
from verticalfs.federation import Federation
from verticalfs.methods import Method, available, create, get
from verticalfs.party import Role


def fit(name: str, data, seed: int = 0):
    cls = get(name)
    method = create(name, seed=seed, **cls.test_params)
    fed = Federation.in_process(data)
    returned = method.fit(fed)
    return method, returned, fed


def comparable(history):
    return [{k: v for k, v in h.items() if isinstance(v, (int, float, str)) and v == v} for h in history]


@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=3, noise=0.5, seed=0)


# One xdist group per method: its tests share one fit (a module fixture), which a second worker
# running some of them would repeat.
@pytest.fixture(scope="module", params=[pytest.param(n, id=n, marks=pytest.mark.xdist_group(f"contract-{n}"))
                                        for n in available()])
def fitted(request, data):
    """(name, method, value returned by fit, federation) for each registered method."""
    method, returned, fed = fit(request.param, data)
    return request.param, method, returned, fed


def test_registry_has_baselines():
    names = available()
    assert {"vfl", "central"} <= set(names)
    assert names == sorted(names)


@pytest.mark.parametrize("name", available())
def test_declares_its_parts(name):
    """Every method declares its own small settings, its party role and its codec policy."""
    cls = get(name)
    assert "test_params" in {k for c in cls.__mro__ if issubclass(c, Method) for k in vars(c)}
    fields = {f.name for f in dataclasses.fields(cls.Params)}
    assert set(cls.test_params) <= fields, f"{name}: test_params names unknown parameters"
    assert cls.codec_policy in ("channel", "fixed", "none")
    if cls.needs_pooled_data:
        return
    assert cls.Role is not None and issubclass(cls.Role, Role), f"{name} runs at the parties without a role"


class TestContract:
    def test_is_a_method(self, fitted):
        name, method, _, _ = fitted
        assert isinstance(method, Method)
        assert method.name == name
        assert dataclasses.is_dataclass(method.Params)

    def test_fit_returns_self(self, fitted):
        _, method, returned, _ = fitted
        assert returned is method

    def test_support_per_party(self, fitted, data):
        _, method, _, _ = fitted
        sup = method.get_support()
        assert set(sup) == set(data.party_names)
        for p in data.parties:
            m = sup[p.name]
            assert isinstance(m, np.ndarray) and m.dtype == bool
            assert m.shape == (p.n_features,)
            np.testing.assert_array_equal(method.get_support(p.name, indices=True), np.flatnonzero(m))

    def test_support_agrees_with_the_parties(self, fitted):
        """What the label holder reports as kept is what each party really still uses."""
        _, method, _, fed = fitted
        if method.needs_pooled_data:
            return
        observed = fed.observe_support()
        for p, mask in method.get_support().items():
            np.testing.assert_array_equal(mask, observed[p])

    def test_bytes(self, fitted):
        _, method, _, fed = fitted
        if method.needs_pooled_data:
            assert fed.ledger.total_bytes == 0
        else:
            assert fed.ledger.total_bytes > 0
            assert fed.ledger.bytes_where(phase="setup") > 0  # schemas and Join are metered

    def test_history_entries(self, fitted):
        _, method, _, fed = fitted
        h = method.history_
        assert len(h) >= 1
        for entry in h:
            assert "epoch" in entry and "bytes" in entry
            assert isinstance(entry["bytes"], int) and entry["bytes"] >= 0
        epochs = [e["epoch"] for e in h]
        assert epochs == sorted(epochs)
        byts = [e["bytes"] for e in h]
        assert byts == sorted(byts)  # cumulative
        assert byts[-1] <= fed.ledger.total_bytes

    def test_metrics(self, fitted):
        _, method, _, _ = fitted
        assert 0.0 <= method.metrics_["accuracy"] <= 1.0
        assert 0.0 <= method.metrics_["roc_auc"] <= 1.0

    def test_same_seed_same_result(self, fitted, data):
        """Also after other code has used torch's and numpy's global generators."""
        name, method, _, fed = fitted
        torch.manual_seed(12345)
        np.random.seed(54321)
        torch.rand(7)
        again, _, fed2 = fit(name, data, seed=0)
        assert comparable(again.history_) == comparable(method.history_)
        for p, m in method.get_support().items():
            np.testing.assert_array_equal(again.get_support(p), m)
        assert fed2.ledger.total_bytes == fed.ledger.total_bytes

    def test_unknown_param_rejected(self, fitted):
        name = fitted[0]
        with pytest.raises(ConfigError, match="no_such_param"):
            create(name, no_such_param=1)

    def test_get_support_before_fit(self, fitted):
        with pytest.raises(ConfigError):
            create(fitted[0]).get_support()

    def test_codec_policy(self, fitted):
        name, method, _, _ = fitted
        if method.codec_policy == "channel":
            assert create(name, codec="float16").codec == "float16"
        else:
            with pytest.raises(ConfigError, match="--codec"):
                create(name, codec="float16")
