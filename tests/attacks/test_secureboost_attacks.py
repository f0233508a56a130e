"""A malicious label holder against a SecureBoost party: it sends only messages the protocol defines,
with parameters and plaintexts of its choosing, to real party roles.

The party cannot check the gradients it sums (real numbers under the label holder's key): the
label holder decrypts, per node, the sums of the values it encrypted over each of the party's bins,
and encrypting 1 for one row and 0 for the others reads that row's bin of every feature. That is
the open finding ``secureboost-gradients`` (:data:`verticalfs.trust.FINDINGS`): a party on the
deployment's default policy refuses ``secureboost`` and ``sbt-filter`` at ``Join`` (the attack
recovers nothing: no work is done); a party that lists the finding in ``allow_findings`` (a policy
choice, docs/methods/secureboost.md) gives exactly that disclosure, and no more: a row outside
the node (the instance space) contributes nothing; nodes and splits below its minimum rows, a
second split of a node, layouts below the mask floor and malformed shapes are refused before any
work. Each is run in-process (the permissive policy of an experiment) and against a
:class:`~verticalfs.deploy.party.DeployedParty` whose every message is encoded and decoded by the
real serde (:mod:`tests.attacks.harness`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import verticalfs
from tests.attacks.harness import Holder, default_policy, party, table
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
from verticalfs.transport.messages import Ack, At, Join

AT = At("train")
SPEC = SBTSpec(n_bins=8, key_bits=512, insecure=True)
FINDING = "secureboost-gradients"


@dataclass
class Target:
    """The attacked party: ``ask(msg, at, expect)`` reaches it, ``ready`` is its reply to the ``Join``,
    ``runtime.role`` its role (read only to check what the attack recovered)."""

    ask: Callable[..., Any]
    ready: SBTReady
    runtime: Any
    n: int

    @property
    def role(self) -> Any:
        return self.runtime.role


@pytest.fixture(scope="module")
def keys():
    return generate_keypair(512, insecure=True)


def _in_process() -> Target:
    """A party of an in-process run (the permissive policy: every finding allowed)."""
    data = verticalfs.build_data("breast_cancer", parties=2, seed=0)
    fed = Federation.in_process(data)
    fed.feature_names()
    p = data.parties[0].name
    ready = fed.join("secureboost", SPEC, expect=SBTReady)[p]
    return Target(lambda msg, at, expect: fed.proxy(p).request(msg, at, expect=expect), ready, fed.local_runtime(p),
                  len(data.labels.y["train"]))


def _deployed(tmp_path) -> Target:
    """A deployed party on its own file, on the deployment's default policy with the finding allowed;
    every message through the real serde."""
    rt = party(tmp_path, default_policy(allow_findings=[FINDING]))
    h = Holder(rt)
    h.align(table()["id"])
    ready = h.ask(Join(method="secureboost", spec=SPEC), expect=SBTReady)
    return Target(lambda msg, at, expect: h.ask(msg, at, expect=expect), ready, rt, rt.data.n_samples("train"))


@pytest.fixture(params=["in-process", "deployed-finding-allowed"])
def target(request, tmp_path) -> Target:
    return _in_process() if request.param == "in-process" else _deployed(tmp_path)


def start(t: Target, pub, priv, values, tree, rows_per_ct=1, hiding=40, precision=24):
    n = len(values)
    lay = GradientLayout.for_key(pub, 2, precision, n, rows_per_ct) if hiding >= 40 else None
    enc = encrypt_rows(priv, lay, values) if lay is not None else EncryptedArray.encrypt(priv, np.zeros((n, 1)), 0)
    d = len(t.ready.bin_nums)
    msg = TreeStart(tree=tree, public_key=pub.to_bytes(), insecure=True, values=2, precision=precision,
                    rows_per_ct=rows_per_ct, hiding=hiding, n_rows=n, rows=b"", features=pack_bits(np.ones(d, bool)),
                    gradients=enc.to_bytes())
    t.ask(msg, AT, Ack)
    return lay


def histogram(t: Target, node, tree):
    return t.ask(HistogramRequest(tree=tree, parents=np.zeros(0, dtype=np.int64), children=np.zeros(0, dtype=np.int64),
                                  lefts=[], nodes=np.asarray([node], dtype=np.int64),
                                  checks=np.zeros(0, dtype=np.int64)), AT, Histograms)


def decode(pub, priv, lay, rep, nums, skip, total):
    pk = EncryptedArray.from_bytes(pub, rep.data, (int(rep.packages[0]), lay.parts))
    return fill_skipped(decode_histogram(priv, lay, pk, nums, skip), nums, skip, total)


def test_crafted_one_hot_gradients_read_that_rows_bins_at_the_node_and_no_row_outside_it(target, keys):
    """The disclosure SecureBoost's histograms make whatever the label holder encrypts (the finding a
    party allows), and its boundary: a row outside the node's instance space contributes nothing."""
    t, (pub, priv) = target, keys
    rp, n = t.ready, t.n
    target_row = 7
    M = np.zeros((n, 2), dtype=np.int64)
    M[target_row] = [1, 1]
    lay = start(t, pub, priv, M, tree=0)
    rep = histogram(t, 0, 0)
    got = decode(pub, priv, lay, rep, np.asarray(rp.bin_nums), np.asarray(rp.skip), M.sum(0))
    role = t.role
    starts = np.r_[0, np.cumsum(rp.bin_nums)[:-1]]
    recovered = [int(np.flatnonzero(got[s:s + b, 0])[0]) for s, b in zip(starts, rp.bin_nums, strict=True)]
    assert recovered == role.codes[target_row].tolist()  # the row's bin of every feature: the finding
    # split the root, then ask for the child the target row is NOT in: nothing of it shows
    f, b = 0, int(role.codes[target_row, 0])
    b = b - 1 if b > 0 else b
    made = t.ask(SplitRequest(tree=0, node=0, feature=f, bin=b, left_child=1, right_child=2), AT, SplitMade)
    left = np.unpackbits(np.frombuffer(made.left, np.uint8), count=n, bitorder="little").astype(bool)
    other = 2 if left[target_row] else 1
    rep = histogram(t, other, 0)
    rows = np.flatnonzero(~left if other == 2 else left)
    got = decode(pub, priv, lay, rep, np.asarray(rp.bin_nums), np.asarray(rp.skip), M[rows].sum(0))
    assert not got.any()  # the target row is outside this node: every sum is 0


def test_the_party_refuses_small_nodes_second_splits_and_layouts_below_the_floor(target, keys):
    t, (pub, priv) = target, keys
    n = t.n
    M = np.ones((n, 2), dtype=np.int64)
    start(t, pub, priv, M, tree=1)
    order = np.argsort(t.role.codes[:, 0], kind="stable")
    with pytest.raises(PolicyError, match="min_rows_per_node"):
        # a partition (passed on from "another party") that isolates 5 rows, then their histogram
        left = np.zeros(n, dtype=bool)
        left[order[:5]] = True
        t.ask(HistogramRequest(tree=1, parents=np.asarray([0]), children=np.asarray([1, 2]), lefts=[pack_bits(left)],
                               nodes=np.asarray([1]), checks=np.zeros(0, dtype=np.int64)), AT, Histograms)
    # a node split twice (to read a second instance space of it): refused
    with pytest.raises(ProtocolError, match="split already"):
        t.ask(SplitRequest(tree=1, node=0, feature=0, bin=0, left_child=3, right_child=4), AT, SplitMade)
    # a layout whose garbage masks hide less than the floor: refused before any work
    with pytest.raises(ProtocolError, match="layout is refused"):
        start(t, pub, priv, M, tree=2, rows_per_ct=2, hiding=20)
    assert t.ready.min_rows_per_node == 16


@pytest.mark.parametrize("method", ["secureboost", "sbt-filter"])
def test_the_default_policy_refuses_secureboost_naming_the_finding(tmp_path, keys, method):
    """Under the deployment's default policy the attack above recovers nothing: the ``Join`` is
    refused before any work (no bins made, no role), naming the finding and ``allow_findings``, and
    the attack's first message finds no role to sum anything."""
    pub, priv = keys
    rt = party(tmp_path)
    h = Holder(rt)
    h.align(table()["id"])
    with pytest.raises(PolicyError) as e:
        h.ask(Join(method=method, spec=SBTSpec(n_bins=8, key_bits=512, insecure=True,
                                              selection=method == "sbt-filter")), expect=SBTReady)
    text = str(e.value)
    assert FINDING in text and "allow_findings = []" in text and f"'{method}'" in text and "\n" not in text, text
    assert rt.role is None
    n = rt.data.n_samples("train")
    M = np.zeros((n, 2), dtype=np.int64)
    M[7] = [1, 1]
    lay = GradientLayout.for_key(pub, 2, 24, n, 1)
    msg = TreeStart(tree=0, public_key=pub.to_bytes(), insecure=True, values=2, precision=24, rows_per_ct=1,
                    hiding=40, n_rows=n, rows=b"", features=pack_bits(np.ones(len(rt.data.kept), bool)),
                    gradients=encrypt_rows(priv, lay, M).to_bytes())
    with pytest.raises(ProtocolError):
        h.ask(msg, AT, expect=Ack)
    assert rt.role is None


def test_hidden_nodes_only_in_a_run_that_hides_and_one_split_each(target, keys):
    """``hide_own_splits``'s messages: refused in a run that did not join with it; in one that did, a
    split at a hidden node (its side for every row of the anchor) only once per hidden node the party
    summed under that anchor, and no more hidden nodes a request than the anchor's rows allow."""
    from verticalfs.methods.secureboost.messages import HiddenHistogramRequest, HiddenSplitRequest

    t, (pub, priv) = target, keys
    n = t.n
    start(t, pub, priv, np.ones((n, 2), dtype=np.int64), tree=3)

    def hidden(values=3, rows=n):
        lay = GradientLayout.for_key(pub, values, 24, rows, 1)
        return HiddenHistogramRequest(tree=3, anchor=0, values=values, precision=24,
                                      gradients=encrypt_rows(priv, lay, np.ones((rows, values), np.int64)).to_bytes())

    with pytest.raises(ProtocolError, match="did not join with hide_own_splits"):
        t.ask(hidden(), AT, Histograms)
    with pytest.raises(ProtocolError, match="did not join with hide_own_splits"):
        t.ask(HiddenSplitRequest(tree=3, anchor=0, feature=0, bin=0), AT, SplitMade)
    t.role.hidden_ok = True  # as a Join with hide_own_splits = true sets it
    with pytest.raises(ProtocolError, match="beyond the hidden nodes"):
        t.ask(HiddenSplitRequest(tree=3, anchor=0, feature=0, bin=0), AT, SplitMade)
    most = n // t.ready.min_rows_per_node
    with pytest.raises(ProtocolError, match="is not 1 to"):
        t.ask(hidden(values=3 * (most + 1)), AT, Histograms)
    t.ask(hidden(values=3 * 2), AT, Histograms)  # two hidden nodes: two splits, not a third
    for f in (0, 1):
        made = t.ask(HiddenSplitRequest(tree=3, anchor=0, feature=f, bin=0), AT, SplitMade)
        left = np.unpackbits(np.frombuffer(made.left, np.uint8), count=n, bitorder="little").astype(bool)
        assert np.array_equal(left, t.role.codes[:, f] <= 0)  # its side for every row of the anchor
    with pytest.raises(ProtocolError, match="beyond the hidden nodes"):
        t.ask(HiddenSplitRequest(tree=3, anchor=0, feature=2, bin=0), AT, SplitMade)
