"""The benchmark's Paillier throughput helper (``paillier_rates.py``), on short insecure keys."""

from __future__ import annotations

from paillier_rates import rates


def test_rates_of_every_figure():
    r = rates("python", bits=512, n=20, pool=True, insecure=True)
    assert r["backend"] == "python" and r["bits"] == 512 and r["n"] == 20
    for k in ("encrypt_per_s", "encrypt_holder_per_s", "decrypt_per_s", "precompute_per_s",
              "encrypt_pooled_per_s"):
        assert r[k] > 0
    assert r["encrypt_pooled_per_s"] > r["encrypt_per_s"]  # the pool moves r^n offline


def test_rates_short():
    r = rates("python", bits=512, n=10, pool=True, randomness="short", insecure=True)
    assert r["randomness"] == "short" and r["encrypt_per_s"] > 0
