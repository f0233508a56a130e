"""The plain-data state of checkpoints, under its earlier path: :mod:`verticalfs.persist.state`."""

from verticalfs.persist.state import KEYS_FORMAT, TAG, Encoder, encode, keys_from_json, keys_to_json, restore_into

__all__ = ["KEYS_FORMAT", "TAG", "Encoder", "encode", "keys_from_json", "keys_to_json", "restore_into"]
