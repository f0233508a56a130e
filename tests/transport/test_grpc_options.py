"""``CHANNEL_OPTIONS``: the public copy of the gRPC options the networked transport connects with
(a bare gRPC endpoint compared with the transport, as ``benchmarks/network`` does, uses them)."""

from __future__ import annotations

import pytest

pytest.importorskip("grpc")

from verticalfs.transport.grpc import channel  # noqa: E402
from verticalfs.transport.grpc.channel import CHANNEL_OPTIONS  # noqa: E402


def test_channel_options_are_the_transports():
    assert list(CHANNEL_OPTIONS) == channel._OPTIONS  # the channel's own list, not a copy that may drift
    opts = dict(CHANNEL_OPTIONS)
    assert opts["grpc.max_send_message_length"] == opts["grpc.max_receive_message_length"] == -1
    assert opts["grpc.keepalive_time_ms"] == 5_000 and opts["grpc.max_reconnect_backoff_ms"] == 2_000
    assert isinstance(CHANNEL_OPTIONS, tuple)  # a caller cannot change the transport's options through it
