"""A party's budget of private set intersections: the one place where its PSI limits are counted.

Every request that could tell the label holder something new about which ids a party holds is
charged here: a PSI request over its training file (:class:`~verticalfs.psi.PsiOpen`,
:class:`~verticalfs.psi.PsiRequest`), over its scoring file (``ScoringPsi``, ``ScoringPsiOpen``),
and an ``Align`` of an id set (it answers whether the party holds *every* id of the set). The
party's policy bounds them:

- ``max_psi_ids``: the most ids in one request;
- ``max_psi_requests`` within ``psi_window_hours`` (default 16 a day): the charges of the window,
  a sliding one (a charge leaves it ``psi_window_hours`` after it was made).

What is *not* charged: a run whose intersection comes from the label holder's cache sends no PSI
request, and its ``Align`` repeats an id set this party already aligned, with its file unchanged
(the label holder already knows that set is held: nothing new is revealed). Such an ``Align`` is
recognised by its key, a keyed hash (the party's own digest secret) of the party's file digest and
the set, which the party keeps after a successful alignment (:meth:`PsiBudget.known`). A new
intersection thus costs two charges (its PSI request, then its first ``Align``); a retraining,
``--resume`` or prediction on unchanged files costs none.

With a working folder (a deployed party's ``state/<party>``), the charges and keys are kept in
``psi-budget.json`` there (written atomically, mode 0600), so a restart does not reset the window;
delete the file to reset it. Without one (in-process runs, permissive), they live in memory.

A refusal names the party, the rule, what was used and what is left, and when the next charge
leaves the window.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: the budget file in a party's working folder
FILE = "psi-budget.json"
VERSION = "psi-budget/1"
#: keys of aligned id sets a party keeps (the oldest is forgotten first: its set is charged again)
MAX_KEYS = 4096


class PsiBudget:
    """The PSI budget of party ``party`` under ``policy`` (a :class:`~verticalfs.configuration.PartyPolicy`).

    Thread-safe: every session of a networked party charges the same budget.
    """

    def __init__(self, party: str, policy: Any, folder: str | Path | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.party, self.policy = party, policy
        self.path = None if folder is None else Path(folder) / FILE
        self.clock = clock
        self._lock = threading.Lock()
        self.charges: list[float] = []  # wall-clock times of the charges (within the window)
        self.keys: dict[str, float] = {}  # keys of aligned id sets -> when aligned
        self._load()

    @property
    def window_s(self) -> float:
        return float(self.policy.psi_window_hours) * 3600.0

    @property
    def limit(self) -> int:
        return int(self.policy.max_psi_requests)

    def _load(self) -> None:
        if self.path is None or not self.path.is_file():
            return
        try:
            blob = json.loads(self.path.read_text())
            if blob.get("version") != VERSION:
                raise ValueError(blob.get("version"))
            self.charges = sorted(float(t) for t in blob["charges"])
            self.keys = {str(k): float(t) for k, t in blob["keys"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            from verticalfs.exceptions import ConfigError

            raise ConfigError(f"party {self.party!r}: its PSI budget file {str(self.path)!r} cannot be read ({exc}); "
                              "delete it to start a new window") from None

    def _save(self) -> None:
        if self.path is None:
            return
        from verticalfs.utils.io import write_bytes_atomic

        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        blob = {"version": VERSION, "charges": self.charges, "keys": self.keys}
        write_bytes_atomic(self.path, json.dumps(blob).encode(), mode=0o600)

    def _expire(self, now: float) -> None:
        start = now - self.window_s
        self.charges = [t for t in self.charges if t > start]

    def used(self) -> int:
        """Charges within the window now."""
        with self._lock:
            self._expire(self.clock())
            return len(self.charges)

    def left(self) -> int:
        return max(0, self.limit - self.used())

    def known(self, key: str | None) -> bool:
        """Whether ``key`` names an id set this party aligned before (with its file as it is)."""
        if key is None:
            return False
        with self._lock:
            return key in self.keys

    def remember(self, key: str) -> None:
        """An id set aligned successfully: the same set again is free."""
        with self._lock:
            self.keys.pop(key, None)
            self.keys[key] = self.clock()
            while len(self.keys) > MAX_KEYS:
                del self.keys[next(iter(self.keys))]
            self._save()

    def _refusal(self, rule: str, value: int, what: str, fix: str):
        """The one line of a refusal (the format of :func:`verticalfs.party.refusal`, which imports this module)."""
        from verticalfs.exceptions import PolicyError

        return PolicyError(f"party {self.party!r} refuses to {what}: its policy has {rule} = {value} ({fix}: key "
                           f"{rule} of [parties.{self.party}.policy] or of its --policy file)")

    def charge(self, what: str, n_ids: int, *, key: str | None = None) -> bool:
        """Charge one request of ``n_ids`` ids (``what``: e.g. ``"PSI requests"``); a request whose
        ``key`` names an id set aligned before is free (returns False: not charged). Refused with a
        :class:`~verticalfs.exceptions.PolicyError` when the window's budget is spent. (The ids of
        one request, ``max_psi_ids``, and the ids claimed per session and per day are the party's
        checks, :meth:`verticalfs.party.PartyRuntime.count_request`: their ``"auto"`` limits are in
        the party's rows.)"""
        with self._lock:
            if key is not None and key in self.keys:
                return False
            now = self.clock()
            self._expire(now)
            if len(self.charges) >= self.limit:
                hours = self.window_s / 3600.0
                nxt = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.charges[0] + self.window_s))
                raise self._refusal("max_psi_requests", self.limit,
                              f"answer more {what}: it has answered {len(self.charges)} new intersections and "
                              f"alignments in the last {hours:g} h, 0 of {self.limit} left (the next is free at "
                              f"{nxt}; a run on unchanged files, whose intersection the label holder cached, is not "
                              "counted)", "wait, raise it, or shorten psi_window_hours")
            self.charges.append(now)
            self._save()
            return True


__all__ = ["PsiBudget"]
