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
