"""Additively homomorphic encryption (Paillier) for the FATE baselines and anything else that needs it.

- :func:`generate_keypair` -> :class:`PublicKey`, :class:`PrivateKey` (2048 bits unless
  ``insecure=True``);
- :meth:`PublicKey.start_pool` -> :class:`ObfuscatorPool`: obfuscators ``r**n`` drawn in a background
  thread during idle time, consumed first by encryption and re-randomisation;
- :class:`EncryptedArray`: numpy-shaped ciphertexts with fixed-point encoding
  (:mod:`verticalfs.crypto.encoding`), homomorphic ``+``, ``*`` (plaintext), ``sum``, ``dot``,
  ``group_sum`` and fixed-width serialisation;
- :class:`SlotPacking` / :class:`PackedEncryptedArray` (:mod:`verticalfs.crypto.packing`): many
  signed fixed-point values per plaintext, slot-wise sums and masks, overflow refused;
- back ends (:mod:`verticalfs.crypto.backends`): ``python``, ``phe``, ``pypaillier``, ``heu``,
  chosen by name or ``auto``; optional ones are imported only when used;
- :func:`set_workers` (:mod:`verticalfs.crypto.parallel`): the key holder's decryptions and
  obfuscators on several cores (worker processes; one, the default, starts none).

This package imports nothing from the transport, training or method code.
"""

from verticalfs.crypto.array import EncryptedArray, unpack_slots
from verticalfs.crypto.backends import AUTO_ORDER, available_backends, backend_info, get_backend
from verticalfs.crypto.encoding import DEFAULT_PLAIN_PRECISION, DEFAULT_PRECISION
from verticalfs.crypto.keys import MIN_SECURE_BITS, ObfuscatorPool, PrivateKey, PublicKey, generate_keypair
from verticalfs.crypto.packing import (
    HIDING_FLOOR,
    PackedEncryptedArray,
    SlotPacking,
    combination_bound,
    packed_combination,
    slot_masks,
)
from verticalfs.crypto.parallel import set_workers

__all__ = [
    "AUTO_ORDER",
    "DEFAULT_PLAIN_PRECISION",
    "DEFAULT_PRECISION",
    "HIDING_FLOOR",
    "MIN_SECURE_BITS",
    "EncryptedArray",
    "ObfuscatorPool",
    "PackedEncryptedArray",
    "PrivateKey",
    "PublicKey",
    "SlotPacking",
    "available_backends",
    "combination_bound",
    "packed_combination",
    "set_workers",
    "slot_masks",
    "backend_info",
    "generate_keypair",
    "get_backend",
    "unpack_slots",
]
