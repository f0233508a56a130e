"""A simulated federation: the parties of one run, each registered on a channel.

:class:`Federation` creates one :class:`~verticalfs.parties.PassiveParty` per column block (each
given only its own columns), the :class:`~verticalfs.parties.ActiveParty` (given only the labels)
and connects them with a channel (in-process by default). Method code receives the federation and
talks to parties only through ``fed.channel``.

Two doors are *instrumentation*, not protocol, and say so in their names:

- :meth:`Federation.observe_support` reads each party's current feature support so the per-epoch
  history can report ``spurious_removed`` against the ground truth (an evaluator's view, not a
  message; the final selection is reported through :class:`~verticalfs.transport.SupportRequest`).
- :meth:`Federation.pooled_data` returns the pooled data; only the ``central`` reference method
  (which is by definition not federated) and evaluation use it.
"""

from __future__ import annotations

import functools

import numpy as np

from verticalfs.data.vertical import ACTIVE, PreparedData
from verticalfs.parties import ActiveParty, PassiveParty
from verticalfs.transport.channel import Channel
from verticalfs.transport.inprocess import InProcessChannel
from verticalfs.transport.ledger import Ledger
from verticalfs.transport.messages import SupportReport, SupportRequest


class Federation:
    """The parties of one run, wired to a channel.

    Parameters
    ----------
    data : PreparedData
    channel : Channel, optional
        Defaults to an :class:`~verticalfs.transport.InProcessChannel` with ``codec``.
    codec : str
        Payload codec for tensors (``float32``, ``float16``, ``int8``, ...).
    trace : bool
        Keep every decoded message on the in-process channel (for tests/inspection).
    """

    def __init__(self, data: PreparedData, *, channel: Channel | None = None, codec: str = "float32",
                 trace: bool = False) -> None:
        self._data = data
        self.channel = channel if channel is not None else InProcessChannel(codec=codec, trace=trace)
        self.server = ActiveParty(data.labels)
        self._parties = {p.name: PassiveParty(p) for p in data.parties}
        if isinstance(self.channel, InProcessChannel):
            self.channel.register(self.server)
            for p in self._parties.values():
                self.channel.register(p)
                p.send_to = functools.partial(self.channel.send, p.name)  # party-to-party messages
        self.party_names = list(self._parties)
        self.task = data.labels.task
        self.n_classes = data.labels.n_classes

    @property
    def active(self) -> str:
        return ACTIVE

    @property
    def ledger(self) -> Ledger:
        return self.channel.ledger

    # ---------------------------------------------------------- instrumentation
    def observe_support(self) -> dict[str, np.ndarray]:
        """Instrumentation: each party's current support (bool per prepared feature)."""
        out = {}
        for name, p in self._parties.items():
            m = np.zeros(len(p.feature_names), dtype=bool)
            m[p.kept] = True
            out[name] = m
        return out

    def pooled_data(self) -> PreparedData:
        """Instrumentation: the pooled data (for the non-federated ``central`` reference only)."""
        return self._data

    def feature_names(self) -> dict[str, list[str]]:
        """Prepared feature names per party (public metadata: parties announce their schema)."""
        return {n: list(p.feature_names) for n, p in self._parties.items()}

    # ----------------------------------------------------------------- protocol
    def collect_support(self) -> dict[str, np.ndarray]:
        """Ask every party which features it still uses (phase ``report``); bool mask per party."""
        out = {}
        names = self.feature_names()
        with self.channel.at("report"):
            for p in self.party_names:
                rep = self.channel.request(ACTIVE, p, SupportRequest())
                assert isinstance(rep, SupportReport)
                m = np.zeros(len(names[p]), dtype=bool)
                m[np.asarray(rep.kept, dtype=np.int64)] = True
                out[p] = m
        return out
