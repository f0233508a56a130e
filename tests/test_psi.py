"""Private set intersection of ids: exactly the overlap, on the ledger, nothing else revealed."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("private_set_intersection")  # the deploy extra: both engines

from verticalfs.exceptions import TransportError  # noqa: E402
from verticalfs.psi import PsiRequest, PsiServer, private_intersection  # noqa: E402


@pytest.mark.parametrize("engine,k", [("openmined", 5), ("ristretto255", 1)])
def test_known_overlap_exactly(engine, k):
    if engine == "ristretto255":
        pytest.importorskip("rbcl")
    rng = np.random.default_rng(0)
    holder = [f"cust-{i}" for i in rng.permutation(1000 * k)]                     # ids 0..1000k-1
    bank = [f"cust-{i}" for i in range(600 * k, 1800 * k)]                        # 600k..1800k-1
    telecom = [f"cust-{i}" for i in range(0, 2000 * k, 2)]                        # the even ones
    out, ledger = private_intersection(holder, {"bank": bank, "telecom": telecom}, engine=engine)
    expected = [h for h in holder if 600 * k <= int(h[5:]) < 1000 * k and int(h[5:]) % 2 == 0]
    assert out == expected  # exactly the overlap, in the label holder's order
    recs = list(ledger.records())
    # a request and a reply per party (ristretto255: an open and one chunk, each answered)
    assert {r.phase for r in recs} == {"setup"} and len(recs) == (4 if engine == "openmined" else 8)
    assert all(r.payload > 0 for r in recs if r.kind not in ("PsiOpen", "PsiOpened"))  # those are counts


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
    """PSI once (openmined-psi here; the cache is the same for either engine): a second run on the
    same ids reuses every party's result (no PSI message); a party whose ids changed runs PSI again,
    the other is still reused, and the result is the new intersection."""
    from verticalfs.psi import PsiCache

    holder = [f"c{i}" for i in range(200)]
    bank, telecom = [f"c{i}" for i in range(50, 400)], [f"c{i}" for i in range(0, 300, 3)]
    keys = {"bank": b"b" * 32, "telecom": b"t" * 32}
    cache = PsiCache(tmp_path / "state")

    def kinds(ledger):
        return [r.kind for r in ledger.records()]

    first, led = private_intersection(holder, {"bank": bank, "telecom": telecom}, cache=cache, secrets_=keys,
                                   engine="openmined")
    assert first == [h for h in holder if int(h[1:]) >= 50 and int(h[1:]) % 3 == 0]
    assert kinds(led).count("PsiRequest") == 2
    again, led = private_intersection(holder, {"bank": bank, "telecom": telecom}, cache=cache, secrets_=keys,
                                   engine="openmined")
    assert again == first and "PsiRequest" not in kinds(led)  # only the digests crossed
    # the cache holds positions in the label holder's own ids of what PSI revealed, nothing of the parties'
    files = sorted((tmp_path / "state").iterdir())
    assert [f.name.split("-")[0] for f in files] == ["bank", "telecom"]
    for f, ids in zip(files, (bank, telecom), strict=True):
        assert np.load(f, allow_pickle=False).tolist() == [i for i, h in enumerate(holder) if h in set(ids)]
    assert all(oct(f.stat().st_mode & 0o777) == "0o600" for f in files)
    changed = [*bank[10:], "c6"]  # the bank's file changed: c6 now held, c50..c59 gone
    out, led = private_intersection(holder, {"bank": changed, "telecom": telecom}, cache=cache, secrets_=keys,
                                   engine="openmined")
    assert out == [h for h in holder if h in set(changed) & set(telecom)]
    assert "c6" in out and "c51" not in out
    assert [r.receiver for r in led.records() if r.kind == "PsiRequest"] == ["bank"]
    # another peer set is another key: PSI again
    _, led = private_intersection(holder, {"bank": changed}, cache=cache, secrets_=keys,
                                   engine="openmined")
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
        out = intersect_all([PartyProxy(holder, "old")], [f"c{i}" for i in range(30)], cache=cache,
                            engine="openmined")  # a party of protocol 1.0 knows openmined-psi only
        assert out.ids == [f"c{i}" for i in range(10, 30)] and out.cached == []
    assert [r.kind for r in holder.ledger.records()].count("PsiRequest") == 2
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


# ------------------------------------------------------------------ ristretto255 (libsodium)
def _both():
    from verticalfs.psi import installed

    return [e for e in ("ristretto255", "openmined") if installed(e)]


@pytest.mark.parametrize("holder,party", [
    ([], []), ([], ["a"]), (["a"], []),                                    # empty sides
    (["a", "b"], ["c", "d"]),                                               # disjoint
    ([f"u{i}" for i in range(23)], [f"u{i}" for i in range(10, 40)] * 2),  # the party's duplicates
    ([str(i) for i in range(50)], [str(i) for i in range(0, 50, 3)]),       # several chunks, a short last one
    (["é", "日本", "a b"], ["日本", "a b", "x"]),                             # text beyond ASCII
])
def test_both_engines_give_the_same_intersection(holder, party):
    engines = _both()
    if len(engines) < 2:
        pytest.skip("needs rbcl and openmined-psi")
    expected = [h for h in holder if h in set(party)]
    outs = {e: private_intersection(holder, {"p": party}, engine=e, chunk=7)[0] for e in engines}
    assert outs == {e: expected for e in engines}


def test_the_label_holders_duplicates_each_find_their_match():
    pytest.importorskip("rbcl")
    from verticalfs.psi import PsiParty, intersect_with

    class Direct:
        name = "p"

        def __init__(self, party):
            self.party = party

        def request(self, msg, at, expect=None):
            return self.party.reply(msg)

    idx = intersect_with(Direct(PsiParty(["x", "y", "y"])), ["y", "z", "y", "x"], engine="ristretto255", chunk=3)
    assert idx.tolist() == [0, 2, 3]


def test_ristretto_streams_chunks_on_the_ledger_and_no_raw_id_crosses():
    pytest.importorskip("rbcl")
    from verticalfs.transport.serde import encode

    holder = [f"secret-{i}" for i in range(50)]
    out, ledger = private_intersection(holder, {"bank": [f"secret-{i}" for i in range(25, 80)]},
                                       engine="ristretto255", chunk=20)
    assert out == holder[25:]
    recs = list(ledger.records())
    # open + 4 chunk rounds (50 of the holder's ids, 55 of the party's, 20 a chunk), a reply each
    assert [r.kind for r in recs] == ["PsiOpen", "PsiOpened"] + ["PsiChunk", "PsiChunkReply"] * 3
    assert {r.phase for r in recs} == {"setup"}
    assert sum(r.payload for r in recs) == (50 * 2 + 55) * 32  # every blinded element, counted exactly
    from verticalfs.psi import PsiChunk, PsiOpen, PsiParty

    party = PsiParty([f"secret-{i}" for i in range(25, 80)])
    party.reply(PsiOpen(group="ristretto255", n=3, chunk=10))
    from verticalfs.psi import blind_ids

    req = PsiChunk(index=0, points=blind_ids(b"\x05" + b"\x00" * 31, holder[:3]))
    reply = party.reply(req)
    for blob in (encode(req).data, encode(reply).data):
        assert b"secret-" not in blob


def test_the_party_sends_its_ids_in_a_random_order():
    """Where a matching id sits in the party's file must not reach the label holder: the party's
    blinded ids go out in a uniform random order (OS entropy), a new one per intersection."""
    pytest.importorskip("rbcl")
    from verticalfs.psi import PsiOpen, StreamServer

    ids = [str(i) for i in range(1000)]
    a = StreamServer(ids, PsiOpen(group="ristretto255", n=0, chunk=10))
    b = StreamServer(ids, PsiOpen(group="ristretto255", n=0, chunk=10))
    for s in (a, b):
        s.close()
        assert sorted(s._order.tolist()) == list(range(1000))
    assert a._order.tolist() != list(range(1000)) and a._order.tolist() != b._order.tolist()


def test_the_party_checks_the_label_holders_chunks():
    pytest.importorskip("rbcl")
    import rbcl

    from verticalfs.psi import PsiChunk, PsiOpen, PsiParty, blind_ids

    key = rbcl.crypto_core_ristretto255_scalar_random()
    good = blind_ids(key, ["a", "b", "c"])

    def opened(n=3, chunk=2):
        p = PsiParty(["a", "b"])
        p.reply(PsiOpen(group="ristretto255", n=n, chunk=chunk))
        return p

    with pytest.raises(TransportError, match="before PsiOpen"):
        PsiParty(["a"]).reply(PsiChunk(index=0, points=good[:32]))
    with pytest.raises(TransportError, match="group 'p256' is not supported"):
        PsiParty(["a"]).reply(PsiOpen(group="p256", n=1, chunk=1))
    with pytest.raises(TransportError, match=r"PsiOpen.n is -1, not a count"):
        PsiParty(["a"]).reply(PsiOpen(group="ristretto255", n=-1, chunk=1))
    with pytest.raises(TransportError, match="33 bytes is not a sequence of 32-byte group elements"):
        opened().reply(PsiChunk(index=0, points=good[:33]))
    with pytest.raises(TransportError, match="3 elements where at most 2 are due"):  # over the chunk size
        opened().reply(PsiChunk(index=0, points=good))
    with pytest.raises(TransportError, match="2 elements where at most 1 are due"):  # over its declared count
        opened(n=1).reply(PsiChunk(index=0, points=good[:64]))
    with pytest.raises(TransportError, match="chunk 1 arrived where chunk 0 is due"):
        opened().reply(PsiChunk(index=1, points=good[:32]))
    for bad in (b"\xff" * 32, b"\x00" * 32, b"\x01" + b"\x00" * 31):  # non-canonical, the identity, not a point
        with pytest.raises(TransportError, match=r"malformed PSI chunk 0: element 1 is not a valid ristretto255"):
            opened().reply(PsiChunk(index=0, points=good[:32] + bad))
    p = opened()
    r = p.reply(PsiChunk(index=0, points=good[:64]))
    assert len(r.points) == 64 and len(r.own) == 64
    r = p.reply(PsiChunk(index=1, points=good[64:]))
    assert len(r.points) == 32 and r.own == b""


def test_the_label_holder_checks_the_partys_replies():
    pytest.importorskip("rbcl")
    from verticalfs.psi import PsiChunkReply, PsiOpened, PsiParty, intersect_with

    class Tamper:
        """A party whose replies one function rewrites."""

        name = "mallory"

        def __init__(self, fix):
            self.party, self.fix = PsiParty(["a", "b", "c"]), fix

        def request(self, msg, at, expect=None):
            return self.fix(self.party.reply(msg))

    def run(fix):
        return intersect_with(Tamper(fix), ["a", "b", "z"], engine="ristretto255", chunk=4)

    assert run(lambda r: r).tolist() == [0, 1]
    cases = [
        (lambda r: PsiOpened(n=-3, chunk=r.chunk) if isinstance(r, PsiOpened) else r, r"PsiOpened.n is -3"),
        (lambda r: PsiOpened(n=r.n, chunk=99) if isinstance(r, PsiOpened) else r, r"PsiOpened.chunk is 99"),
        (lambda r: PsiChunkReply(points=r.points[:-32], own=r.own) if isinstance(r, PsiChunkReply) else r,
         "reply 0 has 2 elements for 3 sent"),
        (lambda r: PsiChunkReply(points=r.points, own=r.own[:-32]) if isinstance(r, PsiChunkReply) else r,
         "carries 2 of its ids where 3 are due"),
        (lambda r: PsiChunkReply(points=r.points, own=r.own[:-1]) if isinstance(r, PsiChunkReply) else r,
         "is not a sequence of 32-byte group elements"),
        (lambda r: PsiChunkReply(points=r.points, own=b"\xff" * 96) if isinstance(r, PsiChunkReply) else r,
         "'mallory' sent a malformed PSI reply: element 0 is not a valid ristretto255"),
    ]
    for fix, match in cases:
        with pytest.raises(TransportError, match=match):
            run(fix)


def test_the_engine_setting(monkeypatch):
    import sys

    from verticalfs.exceptions import ConfigError
    from verticalfs.psi import resolve_engine

    with pytest.raises(ConfigError, match=r"unknown PSI engine 'fast'; choose one of \['ristretto255', 'openmined'\]"):
        resolve_engine("fast")
    if "rbcl" in _both():
        assert resolve_engine() == resolve_engine("auto") == "ristretto255"
    monkeypatch.setitem(sys.modules, "rbcl", None)  # as if rbcl were not installed
    with pytest.raises(ConfigError, match=r"'ristretto255' is not installed: pip install rbcl"):
        resolve_engine("ristretto255")
    assert resolve_engine("auto") == "openmined"


def test_the_deployment_files_psi_engine(tmp_path):
    from verticalfs.deploy.config import Deployment
    from verticalfs.exceptions import ConfigError

    conf = {"label_party": "bank", "label_column": "y", "insecure": True,
            "parties": {"bank": {"address": "127.0.0.1:1", "file": "b.csv"},
                        "telecom": {"address": "127.0.0.1:2", "file": "t.csv"}}}
    assert Deployment.from_dict(conf, tmp_path / "d.toml").psi_engine == "auto"
    assert Deployment.from_dict({**conf, "psi_engine": "openmined"}, tmp_path / "d.toml").psi_engine == "openmined"
    with pytest.raises(ConfigError, match=r"psi_engine = \"fastest\""):
        Deployment.from_dict({**conf, "psi_engine": "fastest"}, tmp_path / "d.toml")


def test_the_ristretto_engine_leaves_no_copy_of_libsodium_in_the_temporary_directory(tmp_path):
    """rbcl writes its bundled libsodium to a new temporary file on every import and never removes it
    (2.8 MB a process); the engine removes it once loaded. A fresh process with its own TMPDIR imports
    the engine, runs one ristretto255 hash-to-group, and leaves the directory empty; imported
    directly, rbcl leaves its file (the fix is ours, not rbcl's)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("rbcl")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    ours = tmp_path / "ours"
    ours.mkdir()
    code = ("from verticalfs.psi import _rbcl, resolve_engine; "
            "assert resolve_engine('ristretto255') == 'ristretto255'; rb = _rbcl(); "
            "p = rb.crypto_core_ristretto255_from_hash(bytes(64)); assert len(p) == 32")
    subprocess.run([sys.executable, "-c", code], env={**env, "TMPDIR": str(ours)}, check=True, timeout=60)
    assert list(ours.iterdir()) == []
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    subprocess.run([sys.executable, "-c", "import rbcl"], env={**env, "TMPDIR": str(theirs)}, check=True, timeout=60)
    assert [p.suffix for p in theirs.iterdir()] == [".so"] or os.name != "posix"
