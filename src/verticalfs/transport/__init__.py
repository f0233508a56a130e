"""Messages, their serialisation, the byte ledger, the messaging node and the channels.

Nothing outside this package assumes the parties share memory: a channel carries bytes only
(:class:`Channel`), each party talks through a :class:`Node` (serialise, meter, dispatch) and the
label holder reaches a party only through a :class:`PartyProxy`, every call carrying its position
(:class:`At`: phase, round, step).
"""

from verticalfs.transport.bandwidth import WallTime, estimate_wall_time
from verticalfs.transport.channel import Channel, Endpoint
from verticalfs.transport.inprocess import InProcessChannel
from verticalfs.transport.ledger import Ledger, Record
from verticalfs.transport.messages import (
    PHASES,
    PROTOCOL_VERSION,
    Ack,
    At,
    Checkpoint,
    Coded,
    Embeddings,
    EmbedRequest,
    Gradients,
    Hello,
    HelloRequest,
    Join,
    KeepFeatures,
    Ready,
    SupportReport,
    SupportRequest,
    coded,
    kind_name,
    message,
    tensor_field,
    wire_name,
)
from verticalfs.transport.node import Node, PartyProxy
from verticalfs.transport.serde import HEADER_SIZE, TENSOR_MESSAGE_OVERHEAD, decode, encode

__all__ = [
    "HEADER_SIZE",
    "PHASES",
    "PROTOCOL_VERSION",
    "TENSOR_MESSAGE_OVERHEAD",
    "Ack",
    "At",
    "Channel",
    "Checkpoint",
    "Coded",
    "EmbedRequest",
    "Embeddings",
    "Endpoint",
    "Gradients",
    "Hello",
    "HelloRequest",
    "InProcessChannel",
    "Join",
    "KeepFeatures",
    "Ledger",
    "Node",
    "PartyProxy",
    "Ready",
    "Record",
    "SupportReport",
    "SupportRequest",
    "WallTime",
    "coded",
    "decode",
    "encode",
    "estimate_wall_time",
    "kind_name",
    "message",
    "tensor_field",
    "wire_name",
]
