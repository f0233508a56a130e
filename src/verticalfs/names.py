"""Names shared by every layer.

:data:`LABEL_HOLDER` is the name of the party that holds the labels (the "active party" or "server"
of the papers). It is reserved: no feature-holding party may use it. Every module that needs it
imports it from here.
"""

from __future__ import annotations

LABEL_HOLDER = "active"

__all__ = ["LABEL_HOLDER"]
