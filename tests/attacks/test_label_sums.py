"""Attacks 3 and 4 of issue 50: a label holder that encrypts row markers instead of labels reads
every row's bin out of the sums a party computes over its ciphertexts.

Attack 3 (``fate-iv``): "labels" that encrypt ``2**k`` for row ``k``; each decrypted bin sum is the
set of its rows, in every column. Attack 4 (Algorithm 1 of FedSDG-FS, here through ``ms-gini``):
``[[A]]`` with a class slot set and a row marker above the class slots, which the party's masks
did not cover; the decrypted masked counts carry each bin's rows above the slots.

"Recovers nothing": the crafted ciphertexts are refused before any sum (no proof, or a proof that
does not verify); what an honest-format request returns is exactly the honest label sums per bin
(every bin of at least ``min_bin_rows`` rows), and the bits outside the class slots are masked.
The kept old path (the permissive policy, which verifies nothing, plus the old class-slot masks)
gives every row's bin exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.attacks.harness import SELECTION, Holder, default_policy, party, table
from tests.crypto.test_proofs import _cheat
from verticalfs.configuration import PartyPolicy
from verticalfs.crypto import EncryptedArray, generate_keypair
from verticalfs.exceptions import PolicyError, ProtocolError
from verticalfs.methods import labels_proof
from verticalfs.methods.fate.binning import quantile_bins, quantile_code_blocks
from verticalfs.methods.fate.messages import IVBinSums, IVLabels
from verticalfs.methods.fedsdg_fs import gini as G
from verticalfs.methods.fedsdg_fs.messages import GiniLabels, MaskedCounts
from verticalfs.transport.messages import Ack, Join


@pytest.fixture(scope="module")
def keys():
    return generate_keypair(512, insecure=True)


def _joined(tmp, method, policy=None):
    rt = party(tmp, policy)
    h = Holder(rt)
    h.align(table()["id"])
    h.ask(Join(method=method, spec=None))
    return rt, h


def _forged(pub, kind, enc, counts, **layout) -> labels_proof.LabelProof:
    """The attacker's best proof of crafted ciphertexts: every part simulated (no true branch
    exists), each part's challenges forced to add up to its hash."""
    cts = np.asarray(enc.ciphertexts(), dtype=object).reshape(enc.shape)
    digest = labels_proof.digest_of(enc.to_bytes())
    ctx = labels_proof._context(kind, digest, np.asarray(counts))
    blob = b""
    for c, allowed in labels_proof.statement(kind, pub, cts, np.asarray(counts), **layout):
        rows = allowed if isinstance(allowed[0], list) else [allowed] * len(c)
        blob += b"".join(_cheat_ctx(pub, ci, a, ctx) for ci, a in zip(c, rows, strict=True))
    return labels_proof.LabelProof(kind=kind, digest=digest, counts=np.asarray(counts, dtype=np.int64), proof=blob)


def _cheat_ctx(pub, c, allowed, ctx):
    from verticalfs.crypto import proofs

    orig = proofs._hash
    try:  # _cheat hashes without a context: bind it as the verifier will
        proofs._hash = lambda p, _c, *a: orig(p, ctx, *a)
        return _cheat(pub, c, allowed)
    finally:
        proofs._hash = orig


# ------------------------------------------------------------------------------------ attack 3
def _markers_iv(h, rt, pub, priv, n_bins, proof=None):
    n = rt.data.n_samples("train")
    enc = EncryptedArray.encrypt(priv, np.array([1 << k for k in range(n)], dtype=object), precision=0)
    if proof is not None:
        h.ask(proof(enc), SELECTION, expect=Ack)
    rep = h.ask(IVLabels(public_key=pub.to_bytes(), labels=enc.to_bytes(), shape=(n,), packing="packed",
                         slot_bits=500, capacity=1, n_bins=n_bins, insecure=True), SELECTION, expect=IVBinSums)
    bins = np.asarray(rep.bin_nums)
    sums = EncryptedArray.from_bytes(pub, rep.sums, (int(bins.sum()),)).decrypt_mantissas(priv)
    got = np.full((n, len(bins)), -1)
    start = 0
    for j, b in enumerate(bins):
        for k in range(b):
            v = int(sums[start + k])
            rows = [r for r in range(n) if v >> r & 1]
            got[rows, j] = k
        start += b
    return got


def test_old_path_iv_row_markers_give_every_rows_bin(tmp_path, keys):
    pub, priv = keys
    rt, h = _joined(tmp_path, "fate-iv", PartyPolicy.permissive())
    got = _markers_iv(h, rt, pub, priv, 1000)
    truth, _ = quantile_bins(rt.data.X("train").numpy(), 1000)
    assert (got == truth).all()  # every row's bin in every column: one-hot columns exactly, numbers as ranks


def test_default_policy_iv_refuses_row_markers(tmp_path, keys):
    pub, priv = keys
    rt, h = _joined(tmp_path, "fate-iv")
    with pytest.raises(PolicyError, match="max_bins = 32"):
        _markers_iv(h, rt, pub, priv, 1000)
    with pytest.raises(PolicyError, match=r"without a LabelProof.*verify_labels = true"):
        _markers_iv(h, rt, pub, priv, 32)
    n = rt.data.n_samples("train")
    with pytest.raises(ProtocolError, match="refuses the encrypted labels"):
        _markers_iv(h, rt, pub, priv, 32, proof=lambda enc: _forged(pub, "iv", enc, [n - 20, 20]))


def test_default_policy_iv_gives_the_honest_sums_of_proven_labels(tmp_path, keys):
    pub, priv = keys
    rt, h = _joined(tmp_path, "fate-iv")
    n = rt.data.n_samples("train")
    y = np.random.default_rng(3).integers(0, 2, n)
    counts = np.bincount(y, minlength=2)
    b = labels_proof.iv_width(counts)
    codes = (y << b) + (1 - y)
    enc = EncryptedArray.encrypt(priv, codes, precision=0)
    h.ask(labels_proof.prove_labels(priv, "iv", enc, codes, counts), SELECTION, expect=Ack)
    slot = b + max(1, int(counts[1]).bit_length())
    rep = h.ask(IVLabels(public_key=pub.to_bytes(), labels=enc.to_bytes(), shape=(n,), packing="packed",
                         slot_bits=slot, capacity=1, n_bins=32, insecure=True), SELECTION, expect=IVBinSums)
    bins = np.asarray(rep.bin_nums)
    sums = np.asarray(EncryptedArray.from_bytes(pub, rep.sums, (int(bins.sum()),)).decrypt_mantissas(priv),
                      dtype=object)
    ev, ne = np.array([int(v) >> b for v in sums]), np.array([int(v) & ((1 << b) - 1) for v in sums])
    # exactly the honest label sums over the party's bins, each of at least min_bin_rows rows
    X = rt.data.X("train").numpy()
    nb, blocks = quantile_code_blocks(X, 32, min_rows=10)
    codes_ = np.concatenate([c for _, _, c in blocks])
    assert np.array_equal(nb, bins)
    start = 0
    for j, k in enumerate(bins):
        want_ev = np.bincount(codes_[y == 1, j], minlength=k)
        want_ne = np.bincount(codes_[y == 0, j], minlength=k)
        assert np.array_equal(ev[start:start + k], want_ev) and np.array_equal(ne[start:start + k], want_ne)
        start += k
    assert (ev + ne).min() >= 10


def test_default_policy_iv_refuses_a_class_of_few_rows(tmp_path, keys):
    """A proven labelling that singles out a row (one event) is refused: min_label_rows."""
    pub, priv = keys
    rt, h = _joined(tmp_path, "fate-iv")
    n = rt.data.n_samples("train")
    y = np.zeros(n, dtype=np.int64)
    y[7] = 1
    counts = np.bincount(y, minlength=2)
    b = labels_proof.iv_width(counts)
    codes = (y << b) + (1 - y)
    enc = EncryptedArray.encrypt(priv, codes, precision=0)
    h.ask(labels_proof.prove_labels(priv, "iv", enc, codes, counts), SELECTION, expect=Ack)
    with pytest.raises(PolicyError, match="min_label_rows = 10"):
        h.ask(IVLabels(public_key=pub.to_bytes(), labels=enc.to_bytes(), shape=(n,), packing="packed",
                       slot_bits=b + 1, capacity=1, n_bins=32, insecure=True), SELECTION)


# ------------------------------------------------------------------------------------ attack 4
def _old_mask_counts(counts, bits, layout, plain_bits=None):
    """The party's masks before issue 50: the class slots only."""
    r = G.random_masks(counts.shape[:-1] + (layout.classes,), bits)
    return counts.add_mantissas(layout.pack(r)), r


MASK_BITS, CLASSES, BINS = 49, 2, 10


def _markers_gini(h, rt, pub, priv, proof=False):
    n = rt.data.n_samples("train")
    lay = G.LabelLayout.for_key(pub, MASK_BITS, CLASSES)
    base = lay.slot_bits * CLASSES
    plain = np.array([1 + (1 << (base + k)) for k in range(n)], dtype=object).reshape(n, 1)
    A = EncryptedArray.encrypt(priv, plain, precision=0)
    if proof:
        h.ask(_forged(pub, "gini", A, [n - 20, 20], slot_bits=lay.slot_bits), SELECTION, expect=Ack)
    rep = h.ask(GiniLabels(public_key=pub.to_bytes(), labels=A.to_bytes(), shape=(n, 1), n_bins=BINS,
                           mask_bits=MASK_BITS, insecure=True, n_classes=CLASSES), SELECTION, expect=MaskedCounts)
    u = EncryptedArray.from_bytes(pub, rep.data, tuple(rep.shape)).decrypt_mantissas(priv).reshape(tuple(rep.shape))
    d = rt.data.n_features
    got = np.full((n, d), -1)
    for j in range(d):
        for b in range(BINS):
            v = int(u[j, b, 0]) >> base
            got[[r for r in range(n) if v >> r & 1], j] = b
    return got


def test_old_path_algorithm1_row_markers_give_every_rows_bin(tmp_path, keys, monkeypatch):
    monkeypatch.setattr(G, "mask_counts", _old_mask_counts)
    pub, priv = keys
    rt, h = _joined(tmp_path, "ms-gini", PartyPolicy.permissive())
    got = _markers_gini(h, rt, pub, priv)
    assert (got == G.bin_codes(rt.data.X("train").numpy(), BINS)).all()


def test_default_policy_algorithm1_refuses_row_markers(tmp_path, keys):
    pub, priv = keys
    rt, h = _joined(tmp_path, "ms-gini")
    with pytest.raises(PolicyError, match="verify_labels"):
        _markers_gini(h, rt, pub, priv)
    with pytest.raises(ProtocolError, match="refuses the encrypted labels"):
        _markers_gini(h, rt, pub, priv, proof=True)


def test_default_policy_algorithm1_masks_the_whole_plaintext(tmp_path, keys):
    """Proven one-hot labels: the decrypted masked counts carry the party's masks in every slot and
    above the slots (no zero left where a marker could show)."""
    pub, priv = keys
    rt, h = _joined(tmp_path, "ms-gini", default_policy())
    n = rt.data.n_samples("train")
    y = np.random.default_rng(5).integers(0, CLASSES, n)
    lay = G.LabelLayout.for_key(pub, MASK_BITS, CLASSES)
    A = G.encrypt_labels(priv, y, lay)
    plain = (np.ones(n, dtype=object) << (lay.slot_bits * y).astype(object)).reshape(n, 1)
    h.ask(labels_proof.prove_labels(priv, "gini", A, plain, np.bincount(y), slot_bits=lay.slot_bits), SELECTION,
          expect=Ack)
    rep = h.ask(GiniLabels(public_key=pub.to_bytes(), labels=A.to_bytes(), shape=(n, 1), n_bins=BINS,
                           mask_bits=MASK_BITS, insecure=True, n_classes=CLASSES), SELECTION, expect=MaskedCounts)
    u = EncryptedArray.from_bytes(pub, rep.data, tuple(rep.shape)).decrypt_mantissas(priv).ravel()
    base = lay.slot_bits * CLASSES
    above = np.array([int(v) >> base for v in u])
    assert (above != 0).all()
    # the spare slots and the top bits are spread over their whole range
    top = np.array([int(v) >> (lay.slot_bits * lay.slots) for v in u])
    assert len(np.unique(top)) > len(top) // 2


# ------------------------------------------------------------------------- attack 4, SFFS
def _markers_sffs(h, rt, pub, priv, proof=False, rows=3, width=140):
    """SFFS's ``[[A]]`` with row markers ``2**(width (k + 1))`` for rows ``k < rows`` in class 0: the
    masked class sums then carry those rows' values of every column above the masks."""
    from verticalfs.methods.fedsdg_fs.baselines import SFFS_PRECISION, FLabels, MaskedClassSums

    n = rt.data.n_samples("train")
    A = np.zeros((n, 2), dtype=object)
    A[:, 1] = 1
    A[:10, 0], A[:10, 1] = 1, 0  # class 0: ten rows (min_label_rows), the first ones marked
    for k in range(rows):
        A[k, 0] = 1 << (width * (k + 1))
    enc = EncryptedArray.encrypt(priv, A, precision=0)
    sizes = np.array([10, n - 10], dtype=np.int64)
    if proof:
        h.ask(_forged(pub, "onehot", enc, sizes), SELECTION, expect=Ack)
    rep = h.ask(FLabels(public_key=pub.to_bytes(), labels=enc.to_bytes(), shape=(n, 2), class_sizes=sizes,
                        mask_bits=48, insecure=True), SELECTION, expect=MaskedClassSums)
    d = rt.data.n_features
    u = EncryptedArray.from_bytes(pub, rep.data, (2, d)).decrypt_mantissas(priv).reshape(2, d)
    got = np.zeros((rows, d))
    for j in range(d):
        v = int(u[0, j])
        for k in range(rows):  # each slot signed: a negative mask borrows one unit from the slots above
            slot = (v >> (width * (k + 1))) & ((1 << width) - 1)
            got[k, j] = (slot - (1 << width) if slot >> (width - 1) else slot) / 2 ** SFFS_PRECISION
    return got


def test_old_path_sffs_row_markers_give_raw_values(tmp_path, keys):
    pub, priv = keys
    rt, h = _joined(tmp_path, "sffs", PartyPolicy.permissive())
    got = _markers_sffs(h, rt, pub, priv)
    truth = rt.data.X("train").numpy()[:3]
    assert np.abs(got - truth).max() <= 2.0 ** -23  # the rows' raw (prepared) values, to 24 bits


def test_default_policy_sffs_refuses_row_markers(tmp_path, keys):
    pub, priv = keys
    rt, h = _joined(tmp_path, "sffs")
    with pytest.raises(PolicyError, match="verify_labels"):
        _markers_sffs(h, rt, pub, priv)
    with pytest.raises(ProtocolError, match="refuses the encrypted labels"):
        _markers_sffs(h, rt, pub, priv, proof=True)
