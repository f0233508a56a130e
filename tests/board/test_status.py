"""The parties' StatusQuery, and the board's deployment status read through it: over gRPC, with the
label holder's identity, from a party serving its own file (no party file is read by the board)."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("grpc")

from verticalfs.board.deployment import DeploymentStatus  # noqa: E402
from verticalfs.deploy.config import Deployment  # noqa: E402
from verticalfs.deploy.holder import serve_party  # noqa: E402
from verticalfs.deploy.party import StatusQuery, StatusReport  # noqa: E402
from verticalfs.exceptions import ProtocolError  # noqa: E402
from verticalfs.federation import SETUP  # noqa: E402
from verticalfs.transport.messages import At  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def site(tmp_path) -> Path:
    rng = np.random.default_rng(0)
    ids = [f"c{i:03d}" for i in range(40)]
    pd.DataFrame({"id": ids, "a": rng.normal(size=40), "y": rng.integers(0, 2, 40)}).to_csv(tmp_path / "bank.csv",
                                                                                          index=False)
    pd.DataFrame({"id": ids[:30], "b": rng.normal(size=30)}).to_csv(tmp_path / "telecom.csv", index=False)
    (tmp_path / "deployment.toml").write_text(
        'label_party = "bank"\nlabel_column = "y"\ninsecure = true\nconnect_timeout = 2\n'
        f'[parties.bank]\naddress = "127.0.0.1:{_port()}"\nfile = "bank.csv"\n'
        f'[parties.telecom]\naddress = "127.0.0.1:{_port()}"\nfile = "telecom.csv"\n'
        '[parties.telecom.policy]\nmin_key_bits = 3072\nmax_sessions = 2\n')
    return tmp_path


def test_status_of_a_serving_party_and_of_one_not_listening(site, monkeypatch):
    import verticalfs.board.deployment as board_deployment

    monkeypatch.setattr(board_deployment, "CONNECT_TIMEOUT", 0.5)  # the party not listening: no need to wait
    dep = Deployment.load(site / "deployment.toml")
    telecom = serve_party(dep, "telecom").start()
    try:
        st = DeploymentStatus(site / "deployment.toml")
        out = {p["name"]: p for p in st.status()["parties"]}
        t = out["telecom"]
        assert t["reachable"] and t["error"] is None
        assert t["policy"]["min_key_bits"] == 3072 and t["policy"]["release_columns"] is False
        assert t["status"]["rows_in_file"] == 30 and t["status"]["max_sessions"] == 2
        assert t["status"]["sessions"] == [] and t["status"]["models"] == []  # its own query's session is over
        assert telecom.sessions == {}  # the board's session ended with the answer: no place kept
        b = out["bank"]  # the label party's block is served only while a run is
        assert not b["reachable"] and "not reachable within 0.5 s" in b["error"] and "bank" in b["error"]
        # a run in progress holds a session: the board lists it
        from verticalfs.deploy.party import PolicyQuery, PolicyReport
        from verticalfs.names import LABEL_HOLDER
        from verticalfs.transport.ledger import Ledger
        from verticalfs.transport.messages import Ack, EndSession
        from verticalfs.transport.node import Node, PartyProxy

        ch = dep.channel(LABEL_HOLDER, session="run-1")
        proxy = PartyProxy(Node(LABEL_HOLDER, ch, Ledger()), "telecom")
        proxy.request(PolicyQuery(), SETUP, expect=PolicyReport)
        st._cache = None
        t = {p["name"]: p for p in st.status()["parties"]}["telecom"]
        assert [s["id"] for s in t["status"]["sessions"]] == ["run-1"]
        # full: the refusal names the session (the party is up, and busy)
        ch2 = dep.channel(LABEL_HOLDER, session="run-2")
        PartyProxy(Node(LABEL_HOLDER, ch2, Ledger()), "telecom").request(PolicyQuery(), SETUP, expect=PolicyReport)
        st._cache = None
        t = {p["name"]: p for p in st.status()["parties"]}["telecom"]
        assert t["reachable"] and "busy" in t["error"] and "run-1" in t["error"]
        proxy.request(EndSession(), SETUP, expect=Ack)
        ch.close()
        ch2.close()
    finally:
        telecom.stop()


def test_status_is_told_only_to_the_label_holder(site):
    dep = Deployment.load(site / "deployment.toml")
    party = serve_party(dep, "telecom")
    rt = party.runtime
    with pytest.raises(ProtocolError, match="accepts StatusQuery only from the label holder"):
        rt.handle("bank", StatusQuery(), At("setup"), None)
    rep = rt.handle("active", StatusQuery(), At("setup"), None)
    assert isinstance(rep, StatusReport) and rep.rows_in_file == 30
    party.stop()
