"""The byte ledger: exact bytes of standard VFL (the acceptance test) and the bandwidth model."""

from __future__ import annotations

import numpy as np
import pytest

import verticalfs
from verticalfs.federation import Federation
from verticalfs.training import SplitTrainer, TrainConfig
from verticalfs.training.batches import n_batches
from verticalfs.transport import (
    TENSOR_MESSAGE_OVERHEAD,
    EmbedRequest,
    Ledger,
    estimate_wall_time,
)
from verticalfs.transport.serde import encode

EMB = 8
BATCH = 64


@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=3, seed=0)


@pytest.fixture(scope="module")
def one_epoch(data):
    """One epoch of standard VFL with float32 payloads; the trainer and its federation."""
    fed = Federation.in_process(data)
    cfg = TrainConfig(epochs=1, batch_size=BATCH, embedding_dim=EMB, hidden=(16,))
    trainer = SplitTrainer(fed, "vfl", cfg, seed=0)
    trainer.setup()
    trainer.fit()
    return trainer, fed


def request_size(split="train", batch=0, train=True) -> int:
    """Exact size of an EmbedRequest, from the serialiser (it carries no payload)."""
    enc = encode(EmbedRequest(split, 0, batch, train))
    assert enc.payload == 0
    return enc.size


class TestStandardVFLBytes:
    """less-vfl.md: one epoch sends 2 x N_train x sum(embedding sizes) x 4 bytes of payload plus a
    small documented header per message."""

    def test_train_payload_is_exact(self, one_epoch, data):
        _, fed = one_epoch
        n = data.n_samples("train")
        assert fed.ledger.payload_where(phase="train") == 2 * n * (3 * EMB) * 4

    def test_train_overhead_is_documented_header_per_message(self, one_epoch, data):
        _, fed = one_epoch
        n, P = data.n_samples("train"), len(data.parties)
        nb = n_batches(n, BATCH)
        assert nb > 1
        per_batch_party = request_size() + 2 * TENSOR_MESSAGE_OVERHEAD
        train_bytes = fed.ledger.bytes_where(phase="train")
        payload = fed.ledger.payload_where(phase="train")
        assert train_bytes - payload == nb * P * per_batch_party
        assert TENSOR_MESSAGE_OVERHEAD == 34
        assert request_size() == 22 + (1 + 4 + len("train")) + 9 + 9 + 2

    def test_message_counts_and_kinds(self, one_epoch, data):
        _, fed = one_epoch
        n, P = data.n_samples("train"), len(data.parties)
        nb = n_batches(n, BATCH)
        train = [r for r in fed.ledger.records() if r.phase == "train"]
        kinds = [r.kind for r in train]
        assert len(train) == 3 * nb * P
        assert kinds.count("EmbedRequest") == kinds.count("Embeddings") == kinds.count("Gradients") == nb * P
        for r in train:
            if r.kind == "Embeddings":
                assert r.receiver == "active" and r.overhead == TENSOR_MESSAGE_OVERHEAD
                assert r.payload % (EMB * 4) == 0
            else:
                assert r.sender == "active"
        assert sorted({r.step for r in train}) == list(range(nb))
        assert {r.round for r in train} == {0}

    def test_per_party_figures(self, one_epoch, data):
        _, fed = one_epoch
        n = data.n_samples("train")
        nb = n_batches(n, BATCH)
        by = fed.ledger.by("phase", "sender", "receiver")
        for p in data.party_names:
            up = by[("train", p, "active")]
            down = by[("train", "active", p)]
            assert up == n * EMB * 4 + nb * TENSOR_MESSAGE_OVERHEAD
            assert down == n * EMB * 4 + nb * (TENSOR_MESSAGE_OVERHEAD + request_size())
            assert fed.ledger.payload_where(phase="train", sender=p) == n * EMB * 4

    def test_eval_bytes(self, one_epoch, data):
        _, fed = one_epoch
        P = len(data.parties)
        expected = sum(P * (request_size(s, -1, False) + TENSOR_MESSAGE_OVERHEAD + data.n_samples(s) * EMB * 4)
                       for s in ("test", "val"))
        assert fed.ledger.bytes_where(phase="eval") == expected

    def test_history_bytes_exclude_eval(self, one_epoch):
        trainer, fed = one_epoch
        led = fed.ledger
        entry = trainer.history[-1]
        assert entry["bytes_total"] == led.total_bytes
        assert entry["bytes"] == led.total_bytes - led.bytes_where(phase="eval")
        assert entry["bytes"] == led.bytes_where(phase="setup") + led.bytes_where(phase="train")

    def test_summary(self, one_epoch, data):
        _, fed = one_epoch
        led = fed.ledger
        s = led.summary()
        assert set(s) == {"total_bytes", "payload_bytes", "overhead_bytes", "messages", "by_phase",
                          "by_party", "by_direction", "by_kind"}
        assert s["total_bytes"] == led.total_bytes == s["payload_bytes"] + s["overhead_bytes"]
        assert s["messages"] == len(led)
        assert sum(s["by_phase"].values()) == s["total_bytes"]
        assert set(s["by_phase"]) == {"setup", "train", "eval"}
        assert set(s["by_party"]) == set(data.party_names)
        assert sum(s["by_party"].values()) == s["total_bytes"]
        assert s["by_direction"]["up"] + s["by_direction"]["down"] == s["total_bytes"]
        up = sum(r.bytes for r in led.records() if r.receiver == "active")
        assert s["by_direction"]["up"] == up
        assert set(s["by_kind"]) == {"HelloRequest", "Hello", "Join", "Ready", "EmbedRequest", "Embeddings",
                                     "Gradients"}
        assert sum(s["by_kind"].values()) == s["total_bytes"]

    def test_frame_matches_records(self, one_epoch):
        _, fed = one_epoch
        df = fed.ledger.to_frame()
        assert len(df) == len(fed.ledger)
        assert int(df["bytes"].sum()) == fed.ledger.total_bytes

    def test_compute_time_recorded_per_party(self, one_epoch, data):
        _, fed = one_epoch
        comp = fed.ledger.compute_seconds()
        for p in [*data.party_names, "active"]:
            assert comp[(p, "train", 0)] > 0

    def test_run_api_reports_same_figures(self, data):
        res = verticalfs.run("vfl", data, seed=0, params={"epochs": 1, "batch_size": BATCH,
                                                          "embedding_dim": EMB, "hidden": (16,)})
        n = data.n_samples("train")
        assert res.federation.ledger.payload_where(phase="train") == 2 * n * 3 * EMB * 4
        assert res.communication["by_phase"]["train"] == res.federation.ledger.bytes_where(phase="train")
        assert res.communication["by_phase"]["report"] > 0  # SupportRequest/SupportReport
        assert len(res.estimates) == 2

    @pytest.mark.parametrize("codec,per_value,extra", [("float16", 2, 0), ("int8", 1, 4)])
    def test_smaller_codecs(self, data, codec, per_value, extra):
        fed = Federation.in_process(data)
        cfg = TrainConfig(epochs=1, batch_size=BATCH, embedding_dim=EMB, hidden=(16,))
        trainer = SplitTrainer(fed, "vfl", cfg, seed=0, codec=codec)
        trainer.setup()
        trainer.train_epoch()
        n, P = data.n_samples("train"), len(data.parties)
        nb = n_batches(n, BATCH)
        assert fed.ledger.payload_where(phase="train") == 2 * (n * P * EMB * per_value + nb * P * extra)


class TestLedger:
    @pytest.fixture
    def led(self):
        led = Ledger()
        led.record("a", "active", "train", "Embeddings", 0, 0, 100, 30)
        led.record("active", "a", "train", "Gradients", 0, 0, 100, 30)
        led.record("b", "active", "eval", "Embeddings", 1, 0, 50, 30)
        led.record("a", "b", "other", "X", 1, 0, 5, 1)
        return led

    def test_totals(self, led):
        assert led.total_bytes == 130 + 130 + 80 + 6
        assert led.bytes_where(phase="train") == 260
        assert led.bytes_where(phase="train", sender="a") == 130
        assert led.bytes_where(phase="nope") == 0
        assert led.payload_where(phase="eval") == 50
        assert led.by("kind") == {"Embeddings": 210, "Gradients": 130, "X": 6}
        assert led.by("phase", "round") == {("train", 0): 260, ("eval", 1): 80, ("other", 1): 6}

    def test_summary_directions(self, led):
        s = led.summary()
        assert s["by_direction"] == {"up": 210, "down": 130, "peer": 6}
        assert s["by_party"] == {"a": 260 + 6, "b": 80}
        assert s["payload_bytes"] == 255 and s["overhead_bytes"] == 91

    def test_records_are_typed(self, led):
        r = next(iter(led.records()))
        assert (r.sender, r.receiver, r.kind, r.bytes) == ("a", "active", "Embeddings", 130)


class TestBandwidthModel:
    """sparsevfl.md section 4.4: tau = T_0 + max_m (T_m + 8 S_m / B) per synchronous round."""

    @pytest.fixture
    def led(self):
        led = Ledger()
        # round 0: party a is slow to compute, b sends a lot
        led.record("a", "active", "train", "Embeddings", 0, 0, 900, 100)  # S_a = 1000 + 500
        led.record("active", "a", "train", "Gradients", 0, 0, 450, 50)
        led.record("b", "active", "train", "Embeddings", 0, 0, 1_000_000, 0)  # S_b = 1e6
        led.add_compute("active", "train", 0, 0.5)
        led.add_compute("a", "train", 0, 1.0)
        led.add_compute("b", "train", 0, 0.2)
        # round 1: only party a talks
        led.record("a", "active", "train", "Embeddings", 1, 0, 2000, 0)
        led.add_compute("active", "train", 1, 0.1)
        led.add_compute("a", "train", 1, 0.3)
        led.add_compute("b", "train", 1, 0.05)
        # an eval round
        led.record("b", "active", "eval", "Embeddings", 1, 0, 4000, 0)
        led.add_compute("b", "eval", 1, 0.01)
        return led

    @staticmethod
    def formula(T0, T, S, B, lat=0.0, n=None):
        n = n or {m: 0 for m in T}
        return T0 + max(T[m] + 8 * S.get(m, 0) / B + lat * n.get(m, 0) for m in T)

    def test_formula(self, led):
        B = 1e6  # 1 Mbit/s
        r0 = self.formula(0.5, {"a": 1.0, "b": 0.2}, {"a": 1500, "b": 1_000_000}, B)
        r1 = self.formula(0.1, {"a": 0.3, "b": 0.05}, {"a": 2000}, B)
        r2 = self.formula(0.0, {"b": 0.01}, {"b": 4000}, B)
        wt = estimate_wall_time(led, 1.0)
        assert wt.seconds == pytest.approx(r0 + r1 + r2)
        assert r0 == pytest.approx(0.5 + 0.2 + 8.0)  # the slowest party (b, transfer-bound) sets the pace
        # compute + transfer of the critical path
        assert wt.compute_seconds + wt.transfer_seconds == pytest.approx(wt.seconds)
        assert wt.transfer_seconds == pytest.approx(8.0 + 8 * 2000 / B + 8 * 4000 / B)

    def test_fast_link_compute_bound(self, led):
        wt = estimate_wall_time(led, 1e6, phases=("train",))  # 1 Tbit/s: transfer ~ 0
        assert wt.seconds == pytest.approx(0.5 + 1.0 + 0.1 + 0.3, abs=1e-6)

    def test_phase_filter_and_latency(self, led):
        B = 10e6
        lat = 0.02
        r0 = self.formula(0.5, {"a": 1.0, "b": 0.2}, {"a": 1500, "b": 1_000_000}, B, lat, {"a": 2, "b": 1})
        r1 = self.formula(0.1, {"a": 0.3, "b": 0.05}, {"a": 2000}, B, lat, {"a": 1})
        wt = estimate_wall_time(led, 10.0, latency_ms=20.0, phases=("train",))
        assert wt.seconds == pytest.approx(r0 + r1)
        d = wt.to_dict()
        assert d["bandwidth_mbps"] == 10.0 and d["latency_ms"] == 20.0 and d["seconds"] == wt.seconds

    def test_more_bandwidth_is_never_slower(self, led):
        times = [estimate_wall_time(led, b).seconds for b in (0.1, 1, 10, 100)]
        assert times == sorted(times, reverse=True)

    @pytest.mark.parametrize("bw", [0.0, -1.0])
    def test_bad_bandwidth(self, led, bw):
        with pytest.raises(ValueError):
            estimate_wall_time(led, bw)

    def test_on_a_real_run(self, one_epoch):
        _, fed = one_epoch
        wt = estimate_wall_time(fed.ledger, 1.0, phases=("train",))
        # at 1 Mbit/s the transfer of the busiest party dominates: at least its bytes x 8 / 1e6
        per_party = max(v for (ph, s, r), v in fed.ledger.by("phase", "sender", "receiver").items()
                        if ph == "train" and r == "active") * 2
        assert wt.transfer_seconds >= 8 * per_party / 1e6 * 0.9
        assert np.isfinite(wt.seconds) and wt.seconds > wt.transfer_seconds


class TestComputeOfEveryParty:
    """Every party's compute is on the ledger, the label holder's own work (encryption,
    decryption, its top model) included, so a wall-time estimate is never below it."""

    @pytest.mark.parametrize("method,params", [
        ("fate-iv", {"n_select": 5, "key_bits": 512, "insecure": True}),
        ("feast", {"n_select": 5}),
        ("vfl", {"epochs": 2, "batch_size": 64, "hidden": (8,)}),
        ("sparsevfl-16", {"epochs": 2, "batch_size": 64}),
        ("pca", {"epochs": 3, "batch_size": 64}),
    ])
    def test_estimate_covers_the_measured_compute(self, data, method, params):
        res = verticalfs.run(method, data, seed=0, params=params)
        led = res.federation.ledger
        comp = led.compute_seconds()
        own = sum(sec for (party, _, _), sec in comp.items() if party == "active")
        parties = {p: sum(sec for (q, _, _), sec in comp.items() if q == p) for p in data.party_names}
        assert own > 0 and all(v > 0 for v in parties.values())
        # everything measured is either the label holder's work or a party's (plus serialisation)
        assert own + sum(parties.values()) <= res.timings["total_seconds"] * 1.05 + 0.01
        assert own + max(parties.values()) >= 0.5 * res.timings["total_seconds"] / len(data.party_names)
        for bw in (1e6, 100.0, 10.0):
            est = estimate_wall_time(led, bw)
            assert est.seconds >= own
            assert est.compute_seconds >= own
        if method == "fate-iv":
            crypto = res.info["encrypt_seconds"] + res.info["decrypt_seconds"] + res.info["keygen_seconds"]
            assert own >= crypto  # the label holder's encryption and decryption are counted
            assert estimate_wall_time(led, 100.0).seconds >= crypto


def test_a_party_ledger_without_rounds_stays_bounded():
    """A networked party's own ledger adds compute per phase only: 10,000 messages claiming distinct
    rounds (from another organisation's headers) leave one entry, not 10,000."""
    from verticalfs.transport.ledger import Ledger

    per_round, bounded = Ledger(), Ledger(compute_rounds=False)
    for r in range(10_000):
        per_round.add_compute("p1", "train", r, 0.001)
        bounded.add_compute("p1", "train", r, 0.001)
    assert len(per_round.compute_seconds()) == 10_000
    assert list(bounded.compute_seconds()) == [("p1", "train", 0)]
    assert abs(bounded.compute_seconds()[("p1", "train", 0)] - 10.0) < 1e-6
