"""Privacy of the protocol: inspect every message of a short run and the parties' state.

Passive parties never send their raw feature columns; no message to a passive party carries the
labels; each party object holds only its own data.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import verticalfs
from verticalfs.data.vertical import ACTIVE, SPLITS, LabelData
from verticalfs.federation import Federation
from verticalfs.methods import create
from verticalfs.transport import Embeddings


def arrays_in(value, depth=0):
    """Every numeric array reachable in a message field or an object's attributes."""
    if depth > 6:
        return
    if isinstance(value, torch.nn.Module) or isinstance(value, torch.optim.Optimizer):
        return
    if isinstance(value, torch.Tensor):
        yield value.detach().cpu().numpy()
    elif isinstance(value, np.ndarray):
        if value.dtype.kind in "fiub":
            yield value
    elif isinstance(value, (list, tuple)):
        if value and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            yield np.asarray(value)
        for v in value:
            yield from arrays_in(v, depth + 1)
    elif isinstance(value, dict):
        for v in value.values():
            yield from arrays_in(v, depth + 1)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from arrays_in(getattr(value, f.name), depth + 1)
    elif hasattr(value, "__dict__") and not isinstance(value, type) and not callable(value):
        for v in vars(value).values():
            yield from arrays_in(v, depth + 1)


def columns(a: np.ndarray):
    """A 1-D array is one column; a 2-D array its columns (and its rows, in case it is transposed)."""
    a = np.asarray(a)
    if a.ndim == 1:
        yield a
    elif a.ndim == 2:
        yield from a.T
        yield from a


def carries_column(a: np.ndarray, ref: np.ndarray) -> bool:
    """True if a column of ``a`` equals (allclose) any column of the 2-D ``ref``."""
    a = np.asarray(a)
    if a.size == 0 or a.dtype.kind not in "fiub":
        return False
    for col in columns(a):
        if col.shape[0] != ref.shape[0]:
            continue
        col = col.astype(np.float64)
        for j in range(ref.shape[1]):
            if np.allclose(col, ref[:, j], rtol=1e-5, atol=1e-6):
                return True
    return False


def carries_labels(a: np.ndarray, y: np.ndarray) -> bool:
    return carries_column(a, np.asarray(y, dtype=np.float64).reshape(-1, 1))


@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=3, noise=0.5, seed=0)


@pytest.fixture(scope="module")
def traced(data):
    fed = Federation(data, trace=True)
    method = create("vfl", seed=0, epochs=2, batch_size=64, hidden=(16,))
    method.fit(fed)
    return fed


class TestCheckers:
    """The checkers themselves catch a leak (so a passing privacy test means something)."""

    def test_detects_feature_column(self, data):
        X = data.parties[0].X["train"]
        leak = np.concatenate([np.zeros((len(X), 2), np.float32), X[:, [3]]], 1)
        assert carries_column(leak, X)
        assert carries_column(X[:, 5], X)
        assert carries_column(X[:20].T.copy(), X[:20])
        assert not carries_column(np.random.default_rng(0).random((len(X), 8)), X)

    def test_detects_labels(self, data):
        y = data.labels.y["train"]
        assert carries_labels(np.stack([np.ones(len(y)), y], 1), y)
        assert carries_labels(list(map(int, y)), y)  # a plain list is inspected too
        assert not carries_labels(np.ones(len(y)), y)


class TestMessages:
    def test_trace_kept_every_message(self, traced):
        msgs = traced.channel.messages
        assert len(msgs) == len(traced.ledger)
        kinds = {type(m).__name__ for _, _, m in msgs}
        assert {"ModelSpec", "Ready", "EmbedRequest", "Embeddings", "Gradients", "SupportRequest",
                "SupportReport"} <= kinds

    def test_no_raw_features_leave_a_passive_party(self, traced, data):
        n_checked = 0
        for sender, receiver, msg in traced.channel.messages:
            if sender == ACTIVE:
                continue
            assert receiver == ACTIVE
            X = data.party(sender).X
            for a in arrays_in(msg):
                if a.dtype.kind != "f":
                    continue
                for s in SPLITS:
                    assert not carries_column(a, X[s].astype(np.float64)), (
                        f"{type(msg).__name__} from {sender} carries a raw feature column of split {s}")
                n_checked += 1
        assert n_checked > 0

    def test_embeddings_have_embedding_width(self, traced, data):
        for sender, _, msg in traced.channel.messages:
            if isinstance(msg, Embeddings):
                assert msg.values.shape[1] == 8
                assert msg.values.shape[1] != data.party(sender).n_features

    def test_no_labels_reach_a_passive_party(self, traced, data):
        n_checked = 0
        for sender, receiver, msg in traced.channel.messages:
            if receiver == ACTIVE:
                continue
            assert sender == ACTIVE
            for a in arrays_in(msg):
                for s in SPLITS:
                    assert not carries_labels(a, data.labels.y[s]), (
                        f"{type(msg).__name__} to {receiver} carries the {s} labels")
                n_checked += 1
        assert n_checked > 0


class TestPartyState:
    def test_passive_parties_hold_only_their_columns(self, traced, data):
        for p in data.parties:
            party = traced._parties[p.name]
            for s in SPLITS:
                assert tuple(party._X_all[s].shape) == (data.n_samples(s), p.n_features)
                np.testing.assert_array_equal(party.X(s).numpy(), p.X[s])
            others = [q for q in data.parties if q.name != p.name]
            for a in arrays_in(party):
                for q in others:
                    for s in SPLITS:
                        assert not carries_column(a, q.X[s].astype(np.float64)), (
                            f"party {p.name} holds a column of party {q.name}")

    def test_passive_parties_hold_no_labels(self, traced, data):
        for name, party in traced._parties.items():
            for attr, value in vars(party).items():
                assert not isinstance(value, LabelData), f"{name}.{attr} is the label data"
                assert attr not in ("y", "labels")
            for a in arrays_in(party):
                for s in SPLITS:
                    assert not carries_labels(a, data.labels.y[s]), f"party {name} holds the {s} labels"

    def test_active_party_holds_no_features(self, traced, data):
        server = traced.server
        assert not hasattr(server, "X") and not hasattr(server, "_X")
        for a in arrays_in(server):
            for p in data.parties:
                for s in SPLITS:
                    assert not carries_column(a, p.X[s].astype(np.float64)), (
                        f"the active party holds a feature column of {p.name}")
        # ... but it does hold the labels
        np.testing.assert_array_equal(server.y["train"].numpy(), data.labels.y["train"])
