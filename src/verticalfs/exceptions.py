"""One exception hierarchy for verticalfs.

Every error names the thing that is wrong (file, column, party, shape) and, where possible, the fix.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "CryptoError",
    "DataError",
    "PolicyError",
    "ProtocolError",
    "TransportError",
    "VerticalFSError",
    "VerticalFSWarning",
]


class VerticalFSError(Exception):
    """Base class of every error raised by verticalfs."""

    #: the party the error is from, when known (set by the gRPC channel on a peer's failure: the
    #: deployment's recovery and serve-model's health read it)
    party: str | None = None


class DataError(VerticalFSError, ValueError):
    """Bad input data: a file, column, party block or shape that cannot be used as it is."""


class ConfigError(VerticalFSError, ValueError):
    """A method, parameter or option that does not exist or has an invalid value."""


class ProtocolError(VerticalFSError):
    """A message arrived that the receiving party cannot handle in its current state."""


class PolicyError(ProtocolError):
    """A party refuses a request its own policy does not allow (``[policy]`` of the deployment file,
    ``verticalfs party serve --policy``); the message names the party, the rule and the key to change."""


class TransportError(VerticalFSError):
    """A message could not be serialised, sent or decoded."""


class CryptoError(VerticalFSError):
    """Key, encoding or ciphertext problems in the cryptographic layer."""


class VerticalFSWarning(UserWarning):
    """Something a run went on with but a user should hear about (extreme values, constant parties,
    ids that would match after stripping, a feature that looks like the label, ...). Each is also in
    the result's ``warnings``; the command line prints those once and silences this category."""
