"""One feature party as a networked process: its runtime behind a :class:`PartyServer`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from verticalfs.names import LABEL_HOLDER
from verticalfs.transport.grpc.channel import MAX_MESSAGE_BYTES, GrpcChannel, PartyServer
from verticalfs.transport.grpc.tls import TLSFiles
from verticalfs.transport.ledger import Ledger

if TYPE_CHECKING:
    from verticalfs.party import PartyRuntime


class NetworkedParty:
    """A :class:`~verticalfs.party.PartyRuntime` listening on ``address``.

    It accepts messages from the label holder and from the other parties named in ``addresses``
    (party-to-party messages, e.g. FEAST's statistical variables, go straight to the peer) and
    records what it sends to peers on its own ledger (the node's metering rule). Its largest
    message, received or as a peer's reply, is the runtime's policy's ``max_message_mb``.
    """

    def __init__(self, runtime: PartyRuntime, address: str, *, tls: TLSFiles | None,
                 addresses: Mapping[str, str] | None = None, peers: Sequence[str] = (), insecure: bool = False,
                 connect_timeout: float = 10.0) -> None:
        from verticalfs.utils.memory import IdleTrimmer, limit_arenas

        limit_arenas()  # before the server's threads: one heap to reuse and to trim (utils/memory.py)
        self.runtime = runtime
        policy = getattr(runtime, "policy", None)
        self.max_message_bytes = MAX_MESSAGE_BYTES if policy is None else policy.max_message_bytes
        #: gives the memory of a burst of requests back once it is over (utils/memory.py)
        self.trimmer = IdleTrimmer()
        self.ledger = Ledger(compute_rounds=False)  # bounded whatever rounds the headers claim
        self._tls, self._insecure, self._timeout = tls, insecure, connect_timeout
        self.channel: GrpcChannel | None = None
        self.name = runtime.name  # before the server, which names this party (e.g. in the insecure warning)
        self.server = PartyServer(self, address, tls=tls, peers={LABEL_HOLDER, *peers}, insecure=insecure,
                                  max_message_bytes=self.max_message_bytes)
        if addresses is not None:
            self.set_addresses(addresses)

    def set_addresses(self, addresses: Mapping[str, str]) -> None:
        """Where the other parties listen (for party-to-party messages)."""
        others = {p: a for p, a in addresses.items() if p != self.name}
        self.server.peers = frozenset({LABEL_HOLDER, *others})
        self.channel = GrpcChannel(self.name, others, tls=self._tls, insecure=self._insecure,
                                   connect_timeout=self._timeout, max_message_bytes=self.max_message_bytes)
        self.runtime.connect(self.channel, self.ledger)

    def receive(self, sender: str, data: bytes) -> bytes | None:
        try:
            node = self.runtime.node
            if node is None:  # the server starts after set_addresses(), which connects the runtime
                raise RuntimeError("set_addresses() first")
            return node.receive(sender, data)
        finally:
            self.trimmer.touch()

    def start(self) -> NetworkedParty:
        if self.runtime.node is None:
            raise RuntimeError("set_addresses() first")
        self.server.start()
        self.trimmer.start()
        return self

    def stop(self) -> None:
        self.trimmer.stop()
        self.server.stop()
        if self.channel is not None:
            self.channel.close()
