"""Private set intersection of ids: exactly the overlap, on the ledger, nothing else revealed."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("private_set_intersection")

from verticalfs.exceptions import TransportError  # noqa: E402
from verticalfs.psi import PsiRequest, PsiServer, private_intersection  # noqa: E402


def test_known_overlap_exactly():
    rng = np.random.default_rng(0)
    holder = [f"cust-{i}" for i in rng.permutation(5000)]                 # ids 0..4999
    bank = [f"cust-{i}" for i in range(3000, 9000)]                       # 3000..8999
    telecom = [f"cust-{i}" for i in range(0, 10000, 2)]                   # the even ones
    out, ledger = private_intersection(holder, {"bank": bank, "telecom": telecom})
    expected = [h for h in holder if 3000 <= int(h[5:]) < 5000 and int(h[5:]) % 2 == 0]
    assert out == expected  # exactly the overlap, in the label holder's order
    recs = list(ledger.records())
    assert {r.phase for r in recs} == {"setup"} and len(recs) == 4  # a request and a reply per party
    assert all(r.payload > 0 for r in recs)


def test_no_raw_id_crosses():
    holder = [f"secret-{i}" for i in range(50)]
    from verticalfs.transport.serde import encode

    server = PsiServer([f"secret-{i}" for i in range(25, 80)])
    import private_set_intersection.python as psi

    client = psi.client.CreateWithNewKey(True)
    req = PsiRequest(request=client.CreateRequest(holder).SerializeToString(), n=len(holder))
    reply = server.reply(req)
    for blob in (encode(req).data, encode(reply).data):
        assert b"secret-" not in blob


def test_malformed_request_is_a_transport_error():
    with pytest.raises(TransportError, match="malformed PSI request"):
        PsiServer(["a", "b"]).reply(PsiRequest(request=b"\x00garbage\xff" * 3, n=2))


def test_empty_and_disjoint():
    out, _ = private_intersection(["1", "2"], {"p": ["3", "4"]})
    assert out == []


def test_cached_until_a_party_changes_its_ids(tmp_path):
    """PSI once: a second run on the same ids reuses every party's result (no PSI message); a party whose
    ids changed runs PSI again, the other is still reused, and the result is the new intersection."""
    from verticalfs.psi import PsiCache

    holder = [f"c{i}" for i in range(200)]
    bank, telecom = [f"c{i}" for i in range(50, 400)], [f"c{i}" for i in range(0, 300, 3)]
    keys = {"bank": b"b" * 32, "telecom": b"t" * 32}
    cache = PsiCache(tmp_path / "state")

    def kinds(ledger):
        return [r.kind for r in ledger.records()]

    first, led = private_intersection(holder, {"bank": bank, "telecom": telecom}, cache=cache, secrets_=keys)
    assert first == [h for h in holder if int(h[1:]) >= 50 and int(h[1:]) % 3 == 0]
    assert kinds(led).count("PsiRequest") == 2
    again, led = private_intersection(holder, {"bank": bank, "telecom": telecom}, cache=cache, secrets_=keys)
    assert again == first and "PsiRequest" not in kinds(led)  # only the digests crossed
    # the cache holds positions in the label holder's own ids of what PSI revealed, nothing of the parties'
    files = sorted((tmp_path / "state").iterdir())
    assert [f.name.split("-")[0] for f in files] == ["bank", "telecom"]
    for f, ids in zip(files, (bank, telecom), strict=True):
        assert np.load(f, allow_pickle=False).tolist() == [i for i, h in enumerate(holder) if h in set(ids)]
    assert all(oct(f.stat().st_mode & 0o777) == "0o600" for f in files)
    changed = [*bank[10:], "c6"]  # the bank's file changed: c6 now held, c50..c59 gone
    out, led = private_intersection(holder, {"bank": changed, "telecom": telecom}, cache=cache, secrets_=keys)
    assert out == [h for h in holder if h in set(changed) & set(telecom)]
    assert "c6" in out and "c51" not in out
    assert [r.receiver for r in led.records() if r.kind == "PsiRequest"] == ["bank"]
    # another peer set is another key: PSI again
    _, led = private_intersection(holder, {"bank": changed}, cache=cache, secrets_=keys)
    assert "PsiRequest" in kinds(led)


def test_a_party_without_digests_runs_psi_every_time(tmp_path):
    """A party of protocol 1.0 does not know IdsDigestRequest: PSI with it each run, never a stale cache."""
    from verticalfs.exceptions import ProtocolError
    from verticalfs.names import LABEL_HOLDER
    from verticalfs.psi import PsiCache, intersect_all
    from verticalfs.transport.inprocess import InProcessChannel
    from verticalfs.transport.ledger import Ledger
    from verticalfs.transport.node import Node, PartyProxy

    channel = InProcessChannel()
    ids = [f"c{i}" for i in range(10, 40)]

    def old_party(sender, msg, at, node):
        if isinstance(msg, PsiRequest):
            return PsiServer(ids).reply(msg)
        raise ProtocolError(f"party 'old' received {type(msg).__name__} from {sender!r} before any Join")

    channel.register(Node("old", channel, Ledger(), old_party))
    holder = Node(LABEL_HOLDER, channel, Ledger())
    channel.register(holder)
    cache = PsiCache(tmp_path)
    for _ in range(2):
        out = intersect_all([PartyProxy(holder, "old")], [f"c{i}" for i in range(30)], cache=cache)
        assert out.ids == [f"c{i}" for i in range(10, 30)] and out.cached == []
    assert [r.kind for r in holder.ledger.records()].count("PsiRequest") == 2
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
