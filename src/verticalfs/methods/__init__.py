"""Registered methods: one folder per paper, plus ``baselines``."""

from verticalfs.methods.base import Method
from verticalfs.methods.registry import available, create, get, register

__all__ = ["Method", "available", "create", "get", "register"]
