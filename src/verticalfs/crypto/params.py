"""Checks of the Paillier parameters a method takes (``key_bits``, ``insecure``, ``backend``,
``randomness``), before any work, in the method's words."""

from __future__ import annotations

from typing import Any

from verticalfs.crypto.backends import resolve_backend
from verticalfs.crypto.keys import check_bits
from verticalfs.exceptions import ConfigError, CryptoError


def check_crypto_params(name: str, p: Any) -> None:
    """Validate ``p.key_bits`` / ``p.insecure`` / ``p.backend`` / ``p.randomness`` of method
    ``name`` early, naming the fix (a :class:`~verticalfs.exceptions.ConfigError`)."""
    try:
        check_bits(p.key_bits, p.insecure, "key_bits")  # the name is added once, below
        resolve_backend(p.backend, int(p.key_bits), None, p.randomness)
    except CryptoError as exc:
        raise ConfigError(f"{name}: {exc}") from None
