"""Estimated wall time of a run at a given bandwidth and latency, from the ledger.

Synchronous rounds (sparsevfl.md section 4.4): in each round the server waits for the slowest
party, so ``tau = T_0 + max_m (T_m + 8 S_m / B)`` where ``T_0`` is the active party's compute time,
``T_m`` party ``m``'s, ``S_m`` the bytes exchanged between the active party and party ``m`` and
``B`` the throughput in bit/s. We add ``latency x messages_m`` for the one-way latency of each
message. A "round" here is one (phase, round) pair of the ledger, i.e. one epoch of training.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from verticalfs.names import LABEL_HOLDER
from verticalfs.transport.ledger import Ledger


@dataclass(frozen=True)
class WallTime:
    seconds: float
    compute_seconds: float
    transfer_seconds: float
    bandwidth_mbps: float
    latency_ms: float

    def to_dict(self) -> dict[str, float]:
        return {
            "bandwidth_mbps": self.bandwidth_mbps,
            "latency_ms": self.latency_ms,
            "seconds": self.seconds,
            "compute_seconds": self.compute_seconds,
            "transfer_seconds": self.transfer_seconds,
        }


def estimate_wall_time(ledger: Ledger, bandwidth_mbps: float, *, latency_ms: float = 0.0,
                       active: str = LABEL_HOLDER, phases: tuple[str, ...] | None = None) -> WallTime:
    """Estimated wall time of the synchronous protocol recorded in ``ledger``.

    Parameters
    ----------
    bandwidth_mbps : float
        Throughput ``B`` of each party's link to the active party, in Mbit/s (10**6 bit/s).
    latency_ms : float
        One-way latency added per message.
    phases : tuple of str, optional
        Restrict to these phases (default: all).
    """
    if bandwidth_mbps <= 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth_mbps}")
    B = bandwidth_mbps * 1e6
    lat = latency_ms / 1e3
    S: dict[tuple[str, int], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    n: dict[tuple[str, int], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in ledger.records():
        if phases is not None and r.phase not in phases:
            continue
        party = r.sender if r.receiver == active else r.receiver
        key = (r.phase, r.round)
        S[key][party] += r.bytes
        n[key][party] += 1
    T: dict[tuple[str, int], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for (party, phase, rnd), sec in ledger.compute_seconds().items():
        if phases is not None and phase not in phases:
            continue
        T[(phase, rnd)][party] += sec
    total = comp = trans = 0.0
    for key in set(S) | set(T):
        t0 = T[key].get(active, 0.0)
        parties = (set(S[key]) | set(T[key])) - {active}
        best = (0.0, 0.0, 0.0)
        for m in parties:
            tm = T[key].get(m, 0.0)
            tx = 8 * S[key].get(m, 0) / B + lat * n[key].get(m, 0)
            if tm + tx > best[0]:
                best = (tm + tx, tm, tx)
        total += t0 + best[0]
        comp += t0 + best[1]
        trans += best[2]
    return WallTime(total, comp, trans, bandwidth_mbps, latency_ms)
