"""Private set intersection of the parties' ids (ECDH-PSI, OpenMined's ``openmined-psi``).

Before training, the label holder and each feature party align their rows without showing each
other ids outside the intersection. The protocol is OpenMined's ECDH-PSI (Apache-2.0, the
``deploy`` extra): the label holder, as PSI *client*, sends its ids hashed and blinded with its
secret key; the party, as *server*, re-blinds them with its own key and returns them with its own
blinded ids; the label holder unblinds and learns which of *its* ids the party holds, and nothing
else; the party learns only how many ids the label holder has. Both messages are verticalfs messages
(phase ``setup``), so their bytes are on the ledger.

With several parties the label holder narrows its set party by party (its ids ∩ party 1, then that
∩ party 2, ...), so it learns the intersection with each party of the ids still in at that point,
and the feature parties learn the sizes of those sets. The final intersection is what every party
aligns on; no feature party learns another party's ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from verticalfs.exceptions import ConfigError, TransportError
from verticalfs.transport.messages import At, message

#: false-positive rate of the server's setup (RAW: exact, no Bloom filter)
FPR = 1e-9
SETUP = At("setup")


@message("core.PsiRequest")
class PsiRequest:
    """Label holder -> party: its blinded ids (an openmined-psi ``Request``) and their count."""

    request: bytes
    n: int


@message("core.PsiReply")
class PsiReply:
    """Party -> label holder: its blinded ids (``ServerSetup``) and the re-blinded request (``Response``)."""

    setup: bytes
    response: bytes


def _psi():
    try:
        import private_set_intersection.python as psi
    except ImportError:  # pragma: no cover - the deploy extra
        raise ConfigError("private set intersection needs openmined-psi: pip install 'verticalfs[deploy]'") from None
    return psi


def _as_text(ids) -> list[str]:
    return [str(i) for i in ids]


class PsiServer:
    """The party's side: answers :class:`PsiRequest` with its own ids (a fresh key per run)."""

    def __init__(self, ids: Sequence) -> None:
        psi = _psi()
        self.ids = _as_text(ids)
        self._server = psi.server.CreateWithNewKey(True)

    def reply(self, msg: PsiRequest) -> PsiReply:
        psi = _psi()
        if not 0 <= msg.n <= 1 << 32:
            raise TransportError(f"PSI request declares {msg.n} ids")
        try:
            req = psi.Request()
            req.ParseFromString(msg.request)
            setup = self._server.CreateSetupMessage(FPR, int(msg.n), self.ids, psi.DataStructure.RAW)
            response = self._server.ProcessRequest(req)
        except Exception as exc:  # noqa: BLE001 - another party's bytes: any failure is a TransportError
            raise TransportError(f"malformed PSI request: {exc}") from None
        return PsiReply(setup=setup.SerializeToString(), response=response.SerializeToString())


def intersect_with(proxy, ids: Sequence) -> np.ndarray:
    """The label holder's side with one party (``proxy``): the indices into ``ids`` of those the party holds."""
    psi = _psi()
    items = _as_text(ids)
    client = psi.client.CreateWithNewKey(True)
    req = client.CreateRequest(items)
    reply = proxy.request(PsiRequest(request=req.SerializeToString(), n=len(items)), SETUP, expect=PsiReply)
    try:
        setup = psi.ServerSetup()
        setup.ParseFromString(reply.setup)
        response = psi.Response()
        response.ParseFromString(reply.response)
        idx = client.GetIntersection(setup, response)
    except Exception as exc:  # noqa: BLE001 - another party's bytes
        raise TransportError(f"party {proxy.name!r} sent a malformed PSI reply: {exc}") from None
    return np.unique(np.asarray(idx, dtype=np.int64))


def intersect(proxies: Sequence, ids: Sequence) -> list[str]:
    """The ids (as text) that the label holder and every party behind ``proxies`` hold, in the
    label holder's order, narrowed party by party (see the module docstring for what each learns)."""
    current = _as_text(ids)
    if len(set(current)) != len(current):
        raise ConfigError("the label holder's ids are not unique; PSI needs one row per id")
    for proxy in proxies:
        keep = intersect_with(proxy, current)
        current = [current[i] for i in keep]
    return current


def private_intersection(holder_ids: Sequence, party_ids: Mapping[str, Sequence]) -> tuple[list[str], object]:
    """PSI in one process over the metered in-process channel (the same messages as networked).

    Returns the intersection (label holder's order) and the ledger of the PSI messages.
    """
    from verticalfs.names import LABEL_HOLDER
    from verticalfs.transport.inprocess import InProcessChannel
    from verticalfs.transport.ledger import Ledger
    from verticalfs.transport.node import Node, PartyProxy

    channel, ledger = InProcessChannel(), Ledger()
    for name, ids in party_ids.items():
        server = PsiServer(ids)

        def handle(sender, msg, at, node, server=server):
            if not isinstance(msg, PsiRequest) or sender != LABEL_HOLDER:
                raise TransportError(f"unexpected {type(msg).__name__} from {sender!r} during PSI")
            return server.reply(msg)

        channel.register(Node(name, channel, Ledger(), handle))
    holder = Node(LABEL_HOLDER, channel, ledger)
    channel.register(holder)
    out = intersect([PartyProxy(holder, p) for p in party_ids], holder_ids)
    return out, ledger
