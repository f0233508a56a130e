"""The contract every registered method honours; new methods are picked up automatically."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import verticalfs
from verticalfs.exceptions import ConfigError
from verticalfs.federation import Federation
from verticalfs.methods import Method, available, create, get

EPOCHS = 3


def small_params(cls) -> dict:
    """Small values for the epoch-like parameters the method has; unknown ones keep defaults."""
    out = {}
    for f in dataclasses.fields(cls.Params):
        default = f.default if f.default is not dataclasses.MISSING else None
        if f.name == "epochs":
            out[f.name] = EPOCHS
        elif isinstance(default, int) and not isinstance(default, bool) and default > 1 and (
            "epoch" in f.name or f.name in ("t1", "t2", "rounds", "pretrain", "warmup", "iterations")
        ):
            out[f.name] = min(default, 2 if f.name in ("t2",) else 1)
        elif f.name == "hidden" and isinstance(default, tuple):
            out[f.name] = (16, 8)
    return out


def fit(name: str, data, seed: int = 0):
    cls = get(name)
    params = small_params(cls)
    try:
        method = create(name, seed=seed, **params)
    except ConfigError:  # the small values break a constraint between parameters
        method = create(name, seed=seed, **({"epochs": EPOCHS} if "epochs" in params else {}))
    fed = Federation(data)
    returned = method.fit(fed)
    return method, returned, fed


def comparable(history):
    return [{k: v for k, v in h.items() if isinstance(v, (int, float, str)) and v == v} for h in history]


@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=3, noise=0.5, seed=0)


@pytest.fixture(scope="module", params=available())
def fitted(request, data):
    """(name, method, value returned by fit, federation) for each registered method."""
    method, returned, fed = fit(request.param, data)
    return request.param, method, returned, fed


def test_registry_has_baselines():
    names = available()
    assert {"vfl", "central"} <= set(names)
    assert names == sorted(names)


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

    def test_bytes(self, fitted):
        _, method, _, fed = fitted
        if method.needs_pooled_data:
            assert fed.ledger.total_bytes == 0
        else:
            assert fed.ledger.total_bytes > 0

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
        if not method.needs_pooled_data:
            assert byts[-1] <= fed.ledger.total_bytes

    def test_metrics(self, fitted):
        _, method, _, _ = fitted
        assert 0.0 <= method.metrics_["accuracy"] <= 1.0

    def test_same_seed_same_result(self, fitted, data):
        name, method, _, fed = fitted
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
