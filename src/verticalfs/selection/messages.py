"""Messages shared by the filter-type selection methods (FEAST family, FATE baselines).

:class:`GatherColumns` / :class:`Columns` pool the *selected* raw columns at the active party after
selection. This is the papers' evaluation set-up (feast.md section 5: a classifier is trained on
the selected features), not part of any selection protocol, so it is sent in phase ``train``
and counted on the ledger like every other message. It does move raw feature columns to the label
holder: it is the price of the evaluation, and the byte count says what it costs.
"""

from __future__ import annotations

import numpy as np
import torch

from verticalfs.exceptions import ProtocolError
from verticalfs.parties import PassiveParty, passive_handler
from verticalfs.transport.messages import message


@message
class GatherColumns:
    """Active -> passive, phase ``train``: send columns ``indices`` (into the party's prepared
    features) of ``split``. The party also records ``indices`` as the features it keeps (so
    :meth:`~verticalfs.federation.Federation.observe_support` agrees with the selection)."""

    split: str
    indices: np.ndarray


@message
class Columns:
    """Passive -> active: the requested columns, ``(rows, len(indices))`` float32, exact (no codec)."""

    values: np.ndarray


def party_columns(party: PassiveParty, split: str) -> np.ndarray:
    """All prepared columns of ``party`` for ``split`` as a float32 array (the party's own data)."""
    try:
        return party._X_all[split].numpy()
    except KeyError:
        raise ProtocolError(f"party {party.name!r} has no split {split!r}; splits are "
                            f"{sorted(party._X_all)}") from None


def keep_features(party: PassiveParty, indices: np.ndarray) -> None:
    """Record ``indices`` as the party's kept features (no model needed, unlike ``drop_features``)."""
    idx = np.asarray(indices, dtype=np.int64)
    party.kept = idx
    t = torch.as_tensor(idx)
    party._X = {s: X.index_select(1, t).contiguous() for s, X in party._X_all.items()}


@passive_handler(GatherColumns)
def _on_gather_columns(party: PassiveParty, sender: str, msg: GatherColumns) -> Columns:
    idx = np.asarray(msg.indices, dtype=np.int64)
    X = party_columns(party, msg.split)
    if idx.size and (idx.min() < 0 or idx.max() >= X.shape[1]):
        raise ProtocolError(f"party {party.name!r}: GatherColumns asks for columns {idx.tolist()} but the "
                            f"party has {X.shape[1]} features")
    keep_features(party, idx)
    return Columns(values=np.ascontiguousarray(X[:, idx], dtype=np.float32))
