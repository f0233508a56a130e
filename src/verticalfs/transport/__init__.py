"""Messages, their serialisation, the byte ledger and the channels that carry them.

Nothing outside this package assumes the parties share memory: algorithm code uses only
:class:`Channel` (``send``/``request``) and the message classes.
"""

from verticalfs.transport.bandwidth import WallTime, estimate_wall_time
from verticalfs.transport.channel import Channel, Endpoint
from verticalfs.transport.inprocess import InProcessChannel
from verticalfs.transport.ledger import Ledger, Record
from verticalfs.transport.messages import (
    Ack,
    Embeddings,
    EmbedRequest,
    Gradients,
    ModelSpec,
    Ready,
    SupportReport,
    SupportRequest,
    kind_name,
    message,
    tensor_field,
)
from verticalfs.transport.serde import HEADER_SIZE, PHASES, TENSOR_MESSAGE_OVERHEAD, decode, encode

__all__ = [
    "HEADER_SIZE",
    "PHASES",
    "TENSOR_MESSAGE_OVERHEAD",
    "Ack",
    "Channel",
    "EmbedRequest",
    "Embeddings",
    "Endpoint",
    "Gradients",
    "InProcessChannel",
    "Ledger",
    "ModelSpec",
    "Ready",
    "Record",
    "SupportReport",
    "SupportRequest",
    "WallTime",
    "decode",
    "encode",
    "estimate_wall_time",
    "kind_name",
    "message",
    "tensor_field",
]
