"""The byte ledger: one record per serialised message, plus measured compute time per party.

Bytes are recorded by the channel at the moment a message is serialised (never estimated in
algorithm code). Each record holds sender, receiver, phase, message kind, round (the epoch, or the
protocol round), step (mini-batch), payload bytes and overhead bytes (see
:mod:`verticalfs.transport.serde`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from verticalfs.names import LABEL_HOLDER

FIELDS = ("sender", "receiver", "phase", "kind", "round", "step", "payload", "overhead")


@dataclass(frozen=True)
class Record:
    sender: str
    receiver: str
    phase: str
    kind: str
    round: int
    step: int
    payload: int
    overhead: int

    @property
    def bytes(self) -> int:
        return self.payload + self.overhead


class Ledger:
    """Append-only record of every message that crossed, and of compute time per party.

    ``compute_rounds=False`` adds compute time per party and phase only (round 0): for a networked
    party's own ledger, whose compute nobody reads and whose rounds come from the headers of
    another organisation's messages (one entry per distinct round would grow without bound).
    """

    def __init__(self, *, compute_rounds: bool = True) -> None:
        self._rows: list[tuple[Any, ...]] = []  # FIELDS, in order
        self._compute_rounds = compute_rounds
        self._compute: dict[tuple[str, str, int], float] = defaultdict(float)
        self._total = 0
        self._phase_total: dict[str, int] = defaultdict(int)  # running bytes per phase

    # ------------------------------------------------------------------ writing
    def record(self, sender: str, receiver: str, phase: str, kind: str, round: int, step: int,
               payload: int, overhead: int) -> None:
        self._rows.append((sender, receiver, phase, kind, round, step, payload, overhead))
        self._total += payload + overhead
        self._phase_total[phase] += payload + overhead

    def add_compute(self, party: str, phase: str, round: int, seconds: float) -> None:
        """Add measured compute time of ``party`` in ``(phase, round)``."""
        self._compute[(party, phase, round if self._compute_rounds else 0)] += seconds

    def snapshot(self) -> dict[str, Any]:
        """Everything recorded so far (for a checkpoint)."""
        return {"rows": list(self._rows), "compute": dict(self._compute)}

    def restore(self, snap: dict[str, Any]) -> None:
        """Replace the records with a :meth:`snapshot`'s (resuming a run)."""
        self._rows = [tuple(r) for r in snap["rows"]]
        self._compute.clear()
        self._compute.update(snap["compute"])
        self._total = sum(r[6] + r[7] for r in self._rows)
        self._phase_total.clear()
        for r in self._rows:
            self._phase_total[r[2]] += r[6] + r[7]

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return len(self._rows)

    def records(self) -> Iterable[Record]:
        return (Record(*r) for r in self._rows)

    @property
    def total_bytes(self) -> int:
        return self._total

    def bytes_where(self, **match: Any) -> int:
        """Total bytes of the records whose fields equal the given values (e.g. ``phase="train"``)."""
        if len(match) == 1 and "phase" in match:  # kept as a running total: O(1)
            return self._phase_total.get(match["phase"], 0)
        idx = [FIELDS.index(k) for k in match]
        vals = list(match.values())
        return sum(r[6] + r[7] for r in self._rows if all(r[i] == v for i, v in zip(idx, vals, strict=True)))

    def payload_where(self, **match: Any) -> int:
        idx = [FIELDS.index(k) for k in match]
        vals = list(match.values())
        return sum(r[6] for r in self._rows if all(r[i] == v for i, v in zip(idx, vals, strict=True)))

    def to_frame(self) -> pd.DataFrame:
        df = pd.DataFrame(self._rows, columns=list(FIELDS))
        df["bytes"] = df["payload"] + df["overhead"]
        return df

    def by(self, *keys: str) -> dict[Any, int]:
        """Total bytes grouped by one or more of the record fields."""
        out: dict[Any, int] = defaultdict(int)
        idx = [FIELDS.index(k) for k in keys]
        for r in self._rows:
            key = r[idx[0]] if len(idx) == 1 else tuple(r[i] for i in idx)
            out[key] += r[6] + r[7]
        return dict(out)

    def compute_seconds(self) -> dict[tuple[str, str, int], float]:
        return dict(self._compute)

    def summary(self, active: str = LABEL_HOLDER) -> dict[str, Any]:
        """The ``communication`` block of a result: totals by phase, party, direction and kind."""
        by_party: dict[str, int] = defaultdict(int)
        direction = {"up": 0, "down": 0}
        for r in self._rows:
            b = r[6] + r[7]
            if r[1] == active:
                by_party[r[0]] += b
                direction["up"] += b
            elif r[0] == active:
                by_party[r[1]] += b
                direction["down"] += b
            else:  # party to party
                by_party[r[0]] += b
                direction.setdefault("peer", 0)
                direction["peer"] += b
        return {
            "total_bytes": self._total,
            "payload_bytes": sum(r[6] for r in self._rows),
            "overhead_bytes": sum(r[7] for r in self._rows),
            "messages": len(self._rows),
            "by_phase": self.by("phase"),
            "by_party": dict(by_party),
            "by_direction": direction,
            "by_kind": self.by("kind"),
        }
