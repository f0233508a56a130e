"""Where a message sits in the protocol travels with it, never as channel state."""

from __future__ import annotations

import pytest

import verticalfs
from verticalfs.exceptions import TransportError
from verticalfs.transport import At, SupportRequest
from verticalfs.transport.inprocess import InProcessChannel


def test_channels_hold_no_position():
    ch = InProcessChannel()
    for attr in ("phase", "round", "step", "at", "set_position", "codec"):
        assert not hasattr(ch, attr)


def test_a_message_after_a_run_is_metered_where_its_caller_says():
    data = verticalfs.build_data("breast_cancer", parties=2, seed=0)
    res = verticalfs.run("vfl", data, seed=0, params={"epochs": 1, "batch_size": 128, "hidden": (8,)})
    fed = res.federation
    n = len(fed.ledger)
    fed.proxy(data.party_names[0]).request(SupportRequest(), At("other", 7, 3))
    last = list(fed.ledger.records())[n:]
    assert [(r.phase, r.round, r.step) for r in last] == [("other", 7, 3), ("other", 7, 3)]
    with pytest.raises(TypeError):
        fed.proxy(data.party_names[0]).request(SupportRequest())  # no position, no message


def test_unknown_phase_is_an_error():
    with pytest.raises(TransportError, match="phase"):
        At("training")
