"""Privacy audit of every registered method: inspect every message of a short run and every party.

For each method (its ``test_params``, on breast cancer with injected noise, three feature parties)
the in-process channel keeps the bytes of every message. The audit decodes them with serde (which
decodes run-length codes and every other codec) and reads ``bytes`` fields in every plausible way
(run-length codes, float32/float16/int8/uint8 arrays, big-endian integers of ciphertext width), then
checks:

- no message carries a raw feature column, except the kinds the method declares in
  ``disclosures["columns_to_label_holder"]`` (the filter methods' evaluation gathers the selected
  columns at the label holder);
- no message to a feature party carries the labels, except the kinds declared in
  ``disclosures["labels_to_parties"]`` (FEAST and ``mi`` send labels by design, and say so);
- each party holds only its own columns, no labels unless a declared disclosure gave it some;
- the label holder holds no feature column unless a declared disclosure gave it some.

The detectors are tested on planted leaks, so a passing audit means something.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import verticalfs
from verticalfs.codecs import rle_decode
from verticalfs.data.vertical import SPLITS, LabelData
from verticalfs.federation import Federation
from verticalfs.methods import available, get
from verticalfs.names import LABEL_HOLDER


# ------------------------------------------------------------------------------------ detectors
def arrays_in(value, depth=0, seen=None):
    """Every numeric array reachable in a message field or an object's attributes."""
    seen = set() if seen is None else seen
    if depth > 8 or id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, (torch.optim.Optimizer, Federation)):
        return  # a federation built in-process keeps the pooled data for instrumentation
    if isinstance(value, torch.nn.Module):
        for t in value.state_dict().values():
            yield t.detach().cpu().numpy()
        return
    if isinstance(value, torch.Tensor):
        yield value.detach().cpu().numpy()
    elif isinstance(value, np.ndarray):
        if value.dtype.kind in "fiub":
            yield value
        elif value.dtype == object and value.size and all(isinstance(v, (int, np.integer)) for v in value.flat):
            try:
                yield value.astype(np.float64)
            except OverflowError:
                pass
    elif isinstance(value, (bytes, bytearray)):
        yield from interpretations(bytes(value))
    elif isinstance(value, (list, tuple)):
        if value and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            yield np.asarray(value, dtype=np.float64)
        for v in value:
            yield from arrays_in(v, depth + 1, seen)
    elif isinstance(value, dict):
        for v in value.values():
            yield from arrays_in(v, depth + 1, seen)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from arrays_in(getattr(value, f.name), depth + 1, seen)
    elif hasattr(value, "__dict__") and not isinstance(value, type) and not callable(value):
        for v in vars(value).values():
            yield from arrays_in(v, depth + 1, seen)


def interpretations(b: bytes):
    """A ``bytes`` payload read in every plausible way: a run-length code, arrays of the common
    dtypes, and big-endian integers of ciphertext width (a plaintext label in a ciphertext slot
    would show as a small integer)."""
    if not b:
        return
    try:
        values, _ = rle_decode(b)
        yield values
    except Exception:  # not a run-length code
        pass
    for dt in ("<f4", "<f2", "<f8", "|i1", "|u1", "<i8"):
        size = np.dtype(dt).itemsize
        if len(b) % size == 0:
            with np.errstate(all="ignore"):
                yield np.frombuffer(b, dtype=dt).astype(np.float64)
    for w in (64, 128, 256, 512):
        if len(b) % w == 0 and len(b) // w > 1:
            ints = [int.from_bytes(b[i:i + w], "big") for i in range(0, len(b), w)]
            if all(v < 2**53 for v in ints):
                yield np.asarray(ints, dtype=np.float64)


def columns(a: np.ndarray):
    """A 1-D array is one column; a 2-D array its columns (and its rows, in case it is transposed)."""
    a = np.asarray(a)
    if a.ndim == 1:
        yield a
    elif a.ndim == 2:
        yield from a.T
        yield from a


def carries_column(a: np.ndarray, ref: np.ndarray) -> bool:
    """True if a column of ``a`` equals (allclose) any column of the 2-D ``ref`` (constant
    reference columns, which carry no information, are ignored)."""
    a = np.asarray(a)
    if a.size == 0 or a.dtype.kind not in "fiub":
        return False
    informative = [j for j in range(ref.shape[1]) if np.ptp(ref[:, j]) > 0]
    for col in columns(a):
        if col.shape[0] != ref.shape[0]:
            continue
        col = col.astype(np.float64)
        if not np.all(np.isfinite(col)):
            continue
        for j in informative:
            if np.allclose(col, ref[:, j], rtol=1e-5, atol=1e-6):
                return True
    return False


def carries_labels(a: np.ndarray, y: np.ndarray) -> bool:
    return carries_column(a, np.asarray(y, dtype=np.float64).reshape(-1, 1))


# ------------------------------------------------------------------------------------- the runs
@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=3, noise=0.5, seed=0)


@pytest.fixture(scope="module", params=available())
def audited(request, data):
    """(method class, fitted method, federation with every message traced)."""
    cls = get(request.param)
    fed = Federation.in_process(data, trace=True)
    m = cls(seed=0, **cls.test_params)
    m.fit(fed)
    return cls, m, fed


def feature_refs(data, party: str | None = None):
    """(party, split, 2-D float64 columns) of every party (or one)."""
    for p in data.parties:
        if party is None or p.name == party:
            for s in SPLITS:
                yield p.name, s, p.X[s].astype(np.float64)


class TestDetectors:
    """The detectors catch planted leaks (so a passing audit means something)."""

    def test_feature_column(self, data):
        X = data.parties[0].X["train"]
        leak = np.concatenate([np.zeros((len(X), 2), np.float32), X[:, [3]]], 1)
        assert carries_column(leak, X)
        assert carries_column(X[:, 5], X)
        assert carries_column(X[:20].T.copy(), X[:20])
        assert not carries_column(np.random.default_rng(0).random((len(X), 8)), X)

    def test_labels(self, data):
        y = data.labels.y["train"]
        assert carries_labels(np.stack([np.ones(len(y)), y], 1), y)
        assert any(carries_labels(a, y) for a in arrays_in(list(map(int, y))))
        assert not carries_labels(np.ones(len(y)), y)

    def test_bytes_payloads_are_read(self, data):
        from verticalfs.codecs import rle_encode

        X = data.parties[0].X["train"]
        y = data.labels.y["train"]
        assert any(carries_column(a, X) for a in arrays_in(X[:, 2].astype("<f4").tobytes()))
        assert any(carries_column(a, X) for a in arrays_in(rle_encode(X[:, :3], bits=32)))
        assert any(carries_labels(a, y) for a in arrays_in(y.astype(np.uint8).tobytes()))
        assert any(carries_labels(a, y) for a in arrays_in(b"".join(int(v).to_bytes(128, "big") for v in y)))


class TestAudit:
    def test_every_message_was_kept(self, audited):
        cls, m, fed = audited
        assert len(fed.channel.messages) == len(fed.ledger), cls.name
        if cls.needs_pooled_data:
            assert len(fed.ledger) == 0
        else:
            assert len(fed.ledger) > 0

    def test_no_raw_feature_column_crosses(self, audited, data):
        cls, m, fed = audited
        allowed = set(m.disclosures.get("columns_to_label_holder", ()))
        n_checked = 0
        for sender, receiver, msg in fed.channel.decoded():
            if type(msg).__name__ in allowed and receiver == LABEL_HOLDER:
                continue
            for a in arrays_in(msg):
                for p, s, X in feature_refs(data):
                    assert not carries_column(a, X), (
                        f"{cls.name}: {type(msg).__name__} from {sender} to {receiver} carries a raw column "
                        f"of {p} ({s})")
                n_checked += 1
        assert n_checked > 0 or cls.needs_pooled_data

    def test_labels_reach_parties_only_where_declared(self, audited, data):
        cls, m, fed = audited
        allowed = set(m.disclosures.get("labels_to_parties", ()))
        seen_declared = False
        for _sender, receiver, msg in fed.channel.decoded():
            if receiver == LABEL_HOLDER:
                continue
            leaks = any(carries_labels(a, data.labels.y[s]) for a in arrays_in(msg) for s in SPLITS)
            if type(msg).__name__ in allowed:
                seen_declared |= leaks
                continue
            assert not leaks, f"{cls.name}: {type(msg).__name__} to {receiver} carries labels"
        if allowed:  # a declared disclosure is real (the audit would notice if it stopped being one)
            assert seen_declared, f"{cls.name} declares labels to parties in {allowed} but none was seen"

    def test_parties_hold_only_their_own_columns(self, audited, data):
        cls, m, fed = audited
        if cls.needs_pooled_data:
            return
        labels_shared = bool(m.disclosures.get("labels_to_parties"))
        for p in data.parties:
            rt = fed.local_runtime(p.name)
            for s in SPLITS:
                np.testing.assert_array_equal(rt.data.X_all(s).numpy(), p.X[s])
            for a in arrays_in(rt.role):
                for q, _s, X in feature_refs(data):
                    if q != p.name:
                        assert not carries_column(a, X), f"{cls.name}: party {p.name} holds a column of {q}"
                if not labels_shared:
                    for s in SPLITS:
                        assert not carries_labels(a, data.labels.y[s]), f"{cls.name}: {p.name} holds labels"
            for attr, value in vars(rt.role).items():
                assert not isinstance(value, LabelData), f"{p.name}.role.{attr} is the label data"

    def test_label_holder_holds_no_feature_column(self, audited, data):
        cls, m, fed = audited
        if cls.needs_pooled_data or m.disclosures.get("columns_to_label_holder"):
            return  # central/cfeast pool by definition; filter methods gather their selection
        holder = {k: v for k, v in vars(m).items() if k != "callbacks"}
        for a in arrays_in(holder):
            for q, _s, X in feature_refs(data):
                assert not carries_column(a, X), f"{cls.name}: the label holder holds a column of {q}"
