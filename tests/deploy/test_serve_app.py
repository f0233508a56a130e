"""serve-model's HTTP layer in this process, over a stand-in model (the real deployment, with party
processes, is tests/deploy/test_predict.py): readiness and its reasons, answering 503 at once while
a party is away, healing, the body limit before parsing, the metrics and the Server-Timing header."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from verticalfs.deploy.predict import Scores  # noqa: E402
from verticalfs.deploy.serve import create_app  # noqa: E402
from verticalfs.exceptions import TransportError  # noqa: E402


class Model:
    """What the endpoint uses of a DeployedModel; ``fail`` makes scoring fail naming a party, ``down``
    makes setting it up again fail."""

    name, manifest, parties, classes, task = "m", {"method": "vfl"}, ["telecom", "insurer"], ["no", "yes"], "binary"
    channel = None

    def __init__(self) -> None:
        self.known = np.array(["a", "b", "c"])
        self.fail: Exception | None = None
        self.down = False
        self.reopened: list[str] = []
        self.scored = 0
        self.timing: dict[str, float] = {}

    def score(self, ids, split="predict") -> Scores:
        if self.fail is not None:
            raise self.fail
        self.scored += 1
        self.timing = {"stage": 0.001, "infer": 0.002, "rtt.telecom.stage": 0.0005}
        ids = np.asarray(ids, dtype=str)
        hit = np.isin(ids, self.known)
        p = np.tile([[0.25, 0.75]], (int(hit.sum()), 1))
        return Scores(ids=ids[hit], probabilities=p, prediction=np.array(["yes"] * int(hit.sum()), dtype=object),
                      unknown=ids[~hit].tolist())

    def reopen(self, party: str) -> None:
        self.reopened.append(party)
        if self.down:
            raise TransportError(f"party {party!r} at 127.0.0.1:1 is gone or unreachable (UNAVAILABLE: refused)")
        self.fail = None


def _gone(party: str) -> TransportError:
    exc = TransportError(f"party {party!r} at 127.0.0.1:1 is gone or unreachable (UNAVAILABLE: Socket closed)")
    exc.party = party
    return exc


def test_ready_names_the_party_away_and_the_endpoint_heals():
    model = Model()
    with TestClient(create_app(model, heal_s=0.05)) as client:
        r = client.post("/predict", json={"ids": ["a", "zz"]})
        assert r.status_code == 200 and r.json()["unknown"] == ["zz"]
        assert r.json()["predictions"] == [{"id": "a", "prediction": "yes", "probabilities": {"no": 0.25, "yes": 0.75}}]
        timing = r.headers["server-timing"]
        assert "stage;dur=1.000" in timing and "rtt-telecom-stage;dur=0.500" in timing and "total;dur=" in timing
        assert client.get("/ready").json()["ready"] is True
        model.fail, model.down = _gone("insurer"), True
        r = client.post("/predict", json={"ids": ["a"]})
        assert r.status_code == 503 and "party 'insurer'" in r.json()["detail"]
        rep = client.get("/ready")
        assert rep.status_code == 503
        body = rep.json()
        assert body["ready"] is False and body["parties"]["telecom"]["ready"] is True
        assert "insurer" in body["parties"]["insurer"]["reason"] and body["parties"]["insurer"]["since"] > 0
        before = model.scored
        r = client.post("/predict", json={"ids": ["a"]})  # answered at once, the model not asked
        assert r.status_code == 503 and "party 'insurer' is not ready" in r.json()["detail"]
        assert r.headers["retry-after"] == "1" and model.scored == before
        assert client.get("/health").status_code == 200  # liveness: the process answers
        model.down = False  # the party is back: the healer sets it up again
        t0 = time.monotonic()
        while client.get("/ready").status_code != 200:
            assert time.monotonic() - t0 < 10
            time.sleep(0.05)
        assert "insurer" in model.reopened and client.post("/predict", json={"ids": ["b"]}).status_code == 200
        text = client.get("/metrics").text
    assert 'verticalfs_party_errors_total{party="insurer"} 1.0' in text
    assert 'verticalfs_requests_total{endpoint="/predict",status="503"} 2.0' in text
    assert 'verticalfs_requests_total{endpoint="/predict",status="200"} 2.0' in text
    assert 'verticalfs_predict_seconds_count 4.0' in text and 'verticalfs_party_ready{party="insurer"} 1.0' in text


def test_a_body_over_the_limit_is_refused_from_its_length():
    model = Model()
    with TestClient(create_app(model, max_body_mb=1)) as client:
        big = b'{"ids": [' + b",".join(b'"c%07d"' % i for i in range(200_000)) + b"]}"  # 2.2 MB
        r = client.post("/predict", content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413 and f"request body of {len(big)} bytes is over the limit of 1048576" in r.text
        assert model.scored == 0
        assert client.post("/predict", json={"ids": ["a"]}).status_code == 200
