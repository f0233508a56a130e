"""A malicious label holder against a SecureBoost party: it sends only messages the protocol defines,
with parameters and plaintexts of its choosing, to real party roles (in-process).

What the party cannot stop, and the docs say so (docs/methods/secureboost.md, "What each side
learns"): the label holder decrypts, per node, the sums of the values it encrypted over each of the
party's bins; encrypting 1 for one row and 0 for the others reads that row's bin of every feature
(SecureBoost's semi-honest model). What the party does stop is tested here: a row outside the node
(the instance space) contributes nothing; nodes and splits below its minimum rows, a second split of
a node, layouts below the mask floor and malformed shapes are refused before any work.
"""

from __future__ import annotations

import numpy as np
import pytest

import verticalfs
from verticalfs.crypto import EncryptedArray, generate_keypair
from verticalfs.exceptions import PolicyError, ProtocolError
from verticalfs.federation import Federation
from verticalfs.histogram.gradients import GradientLayout, decode_histogram, encrypt_rows, fill_skipped
from verticalfs.methods.secureboost.messages import (
    HistogramRequest,
    Histograms,
    SBTReady,
    SBTSpec,
    SplitMade,
    SplitRequest,
    TreeStart,
    pack_bits,
)
from verticalfs.transport.messages import Ack, At

AT = At("train")


@pytest.fixture(scope="module")
def site():
    data = verticalfs.build_data("breast_cancer", parties=2, seed=0)
    fed = Federation.in_process(data)
    fed.feature_names()
    ready = fed.join("secureboost", SBTSpec(n_bins=8, key_bits=512, insecure=True), expect=SBTReady)
    pub, priv = generate_keypair(512, insecure=True)
    return data, fed, ready, pub, priv


def start(fed, party, pub, priv, values, tree, rows_per_ct=1, hiding=40, precision=24):
    n = len(values)
    lay = GradientLayout.for_key(pub, 2, precision, n, rows_per_ct) if hiding >= 40 else None
    enc = encrypt_rows(priv, lay, values) if lay is not None else EncryptedArray.encrypt(priv, np.zeros((n, 1)), 0)
    d = len(fed.feature_names()[party])
    msg = TreeStart(tree=tree, public_key=pub.to_bytes(), insecure=True, values=2, precision=precision,
                    rows_per_ct=rows_per_ct, hiding=hiding, n_rows=n, rows=b"", features=pack_bits(np.ones(d, bool)),
                    gradients=enc.to_bytes())
    fed.proxy(party).request(msg, AT, expect=Ack)
    return lay


def histogram(fed, party, node, tree):
    return fed.proxy(party).request(HistogramRequest(tree=tree, parents=np.zeros(0, dtype=np.int64),
                                                     children=np.zeros(0, dtype=np.int64), lefts=[],
                                                     nodes=np.asarray([node], dtype=np.int64),
                                                     checks=np.zeros(0, dtype=np.int64)), AT, expect=Histograms)


def decode(pub, priv, lay, rep, nums, skip, total):
    pk = EncryptedArray.from_bytes(pub, rep.data, (int(rep.packages[0]), lay.parts))
    return fill_skipped(decode_histogram(priv, lay, pk, nums), nums, skip, total)


def test_crafted_one_hot_gradients_read_that_rows_bins_at_the_node_and_no_row_outside_it(site):
    """The disclosure SecureBoost's histograms make whatever the label holder encrypts (documented), and
    its boundary: a row outside the node's instance space contributes nothing."""
    data, fed, ready, pub, priv = site
    party = data.parties[0].name
    rp = ready[party]
    n = len(data.labels.y["train"])
    target = 7
    M = np.zeros((n, 2), dtype=np.int64)
    M[target] = [1, 1]
    lay = start(fed, party, pub, priv, M, tree=0)
    rep = histogram(fed, party, 0, 0)
    got = decode(pub, priv, lay, rep, np.asarray(rp.bin_nums), np.asarray(rp.skip), M.sum(0))
    role = fed.local_runtime(party).role
    starts = np.r_[0, np.cumsum(rp.bin_nums)[:-1]]
    recovered = [int(np.flatnonzero(got[s:s + b, 0])[0]) for s, b in zip(starts, rp.bin_nums, strict=True)]
    assert recovered == role.codes[target].tolist()  # the row's bin of every feature: SecureBoost's disclosure
    # split the root, then ask for the child the target row is NOT in: nothing of it shows
    f, b = 0, int(role.codes[target, 0])
    b = b - 1 if b > 0 else b
    made = fed.proxy(party).request(SplitRequest(tree=0, node=0, feature=f, bin=b, left_child=1, right_child=2), AT,
                                    expect=SplitMade)
    left = np.unpackbits(np.frombuffer(made.left, np.uint8), count=n, bitorder="little").astype(bool)
    other = 2 if left[target] else 1
    rep = histogram(fed, party, other, 0)
    rows = np.flatnonzero(~left if other == 2 else left)
    got = decode(pub, priv, lay, rep, np.asarray(rp.bin_nums), np.asarray(rp.skip), M[rows].sum(0))
    assert not got.any()  # the target row is outside this node: every sum is 0


def test_the_party_refuses_small_nodes_second_splits_and_layouts_below_the_floor(site):
    data, fed, ready, pub, priv = site
    party = data.parties[1].name
    rp = ready[party]
    n = len(data.labels.y["train"])
    M = np.ones((n, 2), dtype=np.int64)
    start(fed, party, pub, priv, M, tree=1)
    role = fed.local_runtime(party).role
    order = np.argsort(role.codes[:, 0], kind="stable")
    with pytest.raises(PolicyError, match="min_rows_per_node"):
        # a partition (passed on from "another party") that isolates 5 rows, then their histogram
        left = np.zeros(n, dtype=bool)
        left[order[:5]] = True
        fed.proxy(party).request(HistogramRequest(tree=1, parents=np.asarray([0]), children=np.asarray([1, 2]),
                                                  lefts=[pack_bits(left)], nodes=np.asarray([1]),
                                                  checks=np.zeros(0, dtype=np.int64)), AT, expect=Histograms)
    # a node split twice (to read a second instance space of it): refused
    with pytest.raises(ProtocolError, match="split already"):
        fed.proxy(party).request(SplitRequest(tree=1, node=0, feature=0, bin=0, left_child=3, right_child=4), AT,
                                 expect=SplitMade)
    # a layout whose garbage masks hide less than the floor: refused before any work
    with pytest.raises(ProtocolError, match="layout is refused"):
        start(fed, party, pub, priv, M, tree=2, rows_per_ct=2, hiding=20)
    assert rp.min_rows_per_node == 16
