"""Masks with a floor: every additive mask hides its value by at least 40 bits (hiding bits = mask
bits - bits of the largest masked magnitude), refused before any work when the parameters cannot
give it, checked again at each masked step, and reported as ``info_["mask_hiding_bits"]``."""

from __future__ import annotations

import numpy as np
import pytest

import verticalfs
from tests.crypto.test_packing import full_slots  # the key holder's full view of packed slots
from verticalfs.crypto import HIDING_FLOOR, EncryptedArray
from verticalfs.exceptions import ConfigError, CryptoError, ProtocolError
from verticalfs.federation import Federation
from verticalfs.methods import create
from verticalfs.methods.fedsdg_fs import gini as G
from verticalfs.methods.fedsdg_fs.secure import ClientCrypto, ServerCrypto, slot_bits_for

SMALL_KEY = {"key_bits": 768, "insecure": True}


@pytest.fixture(scope="module")
def wine():
    return verticalfs.build_data("wine", parties=2, seed=0)


# ----------------------------------------------------------------- refused before any work
@pytest.mark.parametrize("params, names", [
    ({"key_bits": 512, "precision": 12}, "key_bits"),  # 5 slots of 88 bits < 8 embedding components
    ({"key_bits": 768, "precision": 20}, "key_bits"),  # 7 slots of 104 bits
    ({"key_bits": 2048, "precision": 24}, "precision"),  # 2 * 24 + 16 bits: beyond int64 once unmasked
])
def test_fedsdg_fs_layout_without_the_floor_is_refused_before_any_work(wine, params, names):
    fed = Federation.in_process(wine)
    m = create("fedsdg-fs", seed=0, epochs=1, insecure=True, **params)
    with pytest.raises(ConfigError, match=names) as err:
        m.fit(fed)
    assert ("hiding >= 40 bits" if names == "key_bits" else "61 bits") in str(err.value)
    assert fed.ledger.total_bytes == 0  # not one message: no key made, no party joined


@pytest.mark.parametrize("method", ["fedsdg-fs", "ms-gini"])
def test_gini_masks_below_the_floor_are_refused_before_any_work(wine, method):
    fed = Federation.in_process(wine)
    n = len(wine.labels.y["train"])  # 142 rows: counts of 8 bits, 47-bit masks hide them by 39
    m = create(method, seed=0, mask_bits=39 + n.bit_length(), **SMALL_KEY)
    with pytest.raises(ConfigError, match=f"raise mask_bits to {40 + n.bit_length()}"):
        m.fit(fed)
    kinds = {r.kind for r in fed.ledger.records()}  # a filter asks the schemas first, then checks
    assert not kinds & {"Join", "GiniLabels", "MaskedCounts"}, kinds


def test_fate_lasso_key_too_short_for_the_floor_is_refused(wine):
    data = verticalfs.build_data("breast_cancer", parties=2, seed=0)
    fed = Federation.in_process(data)
    m = create("fate-lasso", seed=0, n_select=5, key_bits=512, insecure=True, residual_precision=300,
               feature_precision=160)
    with pytest.raises(ConfigError, match="key_bits"):
        m.fit(fed)
    assert not {r.kind for r in fed.ledger.records()} & {"Join", "LassoStart", "EncryptedResidual"}


# ----------------------------------------------------------------- checked at each masked step
@pytest.mark.parametrize("step", ["forward", "weight_gradient"])
def test_a_step_whose_values_outgrow_the_layout_is_refused_before_its_masks(step):
    """Values that still fit the slot beside the mask, but would be hidden by fewer than 40 bits:
    only the floor check stops them (remove it and this test fails)."""
    P, V = 12, 16
    client = ClientCrypto(k=3, e=2, key_bits=512, insecure=True, backend="python", randomness="full",
                          precision=P, noise_scale=0.1, rng=np.random.default_rng(0), value_bits=V)
    mask_bits = slot_bits_for(P, V) - 2
    assert client.layout.mask_bits == mask_bits == 86
    big = step == "forward"
    g = np.full((5, 2), 2.0 ** 22 if big else 1.0)  # forward: |z~| ~ 2**(22 + 12 + 12 + 1) = 2**47
    W = np.ones((3, 2))
    server = ServerCrypto(client.pub, W, P, V)
    cols, rows, bound = client.encrypt_embeddings(g, np.arange(2), train=True)
    if big:
        with pytest.raises(CryptoError, match="below the floor of 40.*value_bits"):
            server.masked_products(cols, np.arange(2), 5, bound)
        return
    masked = server.masked_products(cols, np.arange(2), 5, bound)
    client.remove_forward_noise(masked)
    server.st["rows"] = rows
    # weight gradient: n delta up to 2**35 per row -> |n dL/dw| ~ 2**(35 + 12 + 12 + 3) > 2**46
    with pytest.raises(CryptoError, match="below the floor of 40.*value_bits"):
        server.masked_weight_gradient(server.st.pop("rows"), np.full((5, 3), 2.0 ** 35 / 5))
    assert server.hiding_by_step["forward"] >= HIDING_FLOOR


# ----------------------------------------------------------------- reported in the result
def test_fedsdg_fs_secure_reports_its_masks_hiding_and_the_party_sees_wide_masks(wine):
    fed = Federation.in_process(wine, trace=True)
    m = create("fedsdg-fs", seed=0, epochs=1, batch_size=64, hidden=(8,), prune=False, **SMALL_KEY)
    m.fit(fed)
    by_step = m.info_["mask_hiding_bits_by_step"]
    assert set(by_step) == {"gini", "forward", "weight_gradient"}
    assert m.info_["mask_hiding_bits"] == min(by_step.values()) >= HIDING_FLOOR
    assert by_step["gini"] == 64 - len(wine.labels.y["train"]).bit_length()
    # the key holder's own view of what came back: value + mask, as wide as the layout says
    seen = 0
    for _, receiver, msg in fed.channel.decoded():
        if type(msg).__name__ not in ("MaskedProducts", "MaskedWeightGradient"):
            continue
        crypto = fed.local_runtime(receiver).role.crypto
        packing, mask_bits = crypto.packing, crypto.layout.mask_bits
        cts = EncryptedArray.from_bytes(crypto.pub, msg.data)
        slots = full_slots(packing, cts.decrypt_mantissas(crypto.priv).ravel().tolist(),
                           cts.size * packing.slots)
        top = max(abs(v) for v in slots).bit_length()
        assert mask_bits - 6 <= top <= mask_bits + 1, (type(msg).__name__, top, mask_bits)
        seen += 1
    assert seen >= 2
    # every masked value was below 2**(mask_bits - hiding) (the servers' bounds)
    for srv in m.trainer_.server.values():
        assert min(srv.hiding_by_step.values()) >= HIDING_FLOOR


@pytest.mark.parametrize("method, params", [
    ("ms-gini", {"key_bits": 512, "insecure": True}),
    ("sffs", {"key_bits": 512, "insecure": True}),
    ("fate-lasso", {"n_select": 5, "key_bits": 512, "insecure": True, "epochs": 1, "rounds": 1}),
])
def test_filters_report_their_masks_hiding(method, params):
    data = verticalfs.build_data("breast_cancer", parties=2, seed=0, test_size=0.7)
    m = create(method, seed=0, **params)
    m.fit(Federation.in_process(data))
    h = m.info_["mask_hiding_bits"]
    assert isinstance(h, int) and h >= HIDING_FLOOR
    assert h == min(m.info_["mask_hiding_bits_by_step"].values())
    if method == "ms-gini":
        assert h == 64 - len(data.labels.y["train"]).bit_length()


# ----------------------------------------------------------------- each party checks its own floor
def test_a_gini_party_refuses_masks_below_the_floor(wine):
    """The label holder's check bypassed: the party itself refuses narrow masks, naming mask_bits."""
    from verticalfs.crypto import generate_keypair
    from verticalfs.methods.fedsdg_fs.messages import GiniLabels, MaskedCounts
    from verticalfs.transport.messages import At

    fed = Federation.in_process(wine, trace=True)
    m = create("ms-gini", seed=0, key_bits=512, insecure=True)
    m.join_parties(fed)
    pub, priv = generate_keypair(512, insecure=True)
    y = np.asarray(wine.labels.y["train"], dtype=np.int64)
    n = len(y)
    for mask_bits, ok in ((39 + n.bit_length(), False), (40 + n.bit_length(), True)):
        A = G.encrypt_labels(priv, y, G.LabelLayout.for_key(pub, mask_bits, 3))
        msg = GiniLabels(public_key=pub.to_bytes(), labels=A.to_bytes(), shape=tuple(A.shape), n_bins=10,
                         mask_bits=mask_bits, insecure=True, n_classes=3)
        if ok:
            fed.proxy("party1").request(msg, At("selection"), expect=MaskedCounts)
        else:
            with pytest.raises(ProtocolError, match=f"raise mask_bits to {40 + n.bit_length()}"):
                fed.proxy("party1").request(msg, At("selection"), expect=MaskedCounts)


def test_an_sffs_party_refuses_masks_that_cannot_hide_its_class_sums(wine):
    fed = Federation.in_process(wine)
    # mask_bits 16 passes the label holder's range check; 64-bit masks (16 + bits(142) + 40) cannot
    # hide class sums of 142 standardised values at 2**-24 (about 2**34) by 40 bits
    m = create("sffs", seed=0, key_bits=512, insecure=True, mask_bits=16)
    with pytest.raises(ProtocolError, match="below the floor of 40; raise mask_bits") as err:
        m.fit(fed)
    assert "party" in str(err.value)
    assert "MaskedClassSums" not in {r.kind for r in fed.ledger.records()}


def test_a_party_whose_components_all_closed_gets_an_empty_gradient():
    """Algorithm 3 with no open component: the server sends no ciphertext back, and the party
    must not try to decrypt one (it raised 'from_bytes: 0 ciphertexts cannot have shape')."""
    P, V = 12, 16
    client = ClientCrypto(k=3, e=2, key_bits=512, insecure=True, backend="python", randomness="full",
                          precision=P, noise_scale=0.1, rng=np.random.default_rng(0), value_bits=V)
    server = ServerCrypto(client.pub, np.ones((3, 2)), P, V)
    none = np.zeros(0, dtype=np.int64)
    cols, rows, bound = client.encrypt_embeddings(np.zeros((5, 0)), none, train=True)
    client.remove_forward_noise(server.masked_products(cols, none, 5, bound))
    data = server.masked_weight_gradient(rows, np.full((5, 3), 0.1))
    v, eps, R, eps_bound = client.noisy_weight_gradient(data, 0.1)
    grad = server.update_and_embedding_gradient(v, eps, R, eps_bound, 0.1)
    assert grad == b""
    out = client.embedding_gradient(grad, R)
    assert out.shape == (5, 0)
