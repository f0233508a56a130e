"""ICAFS (icafs.md), in progress: so far the mode-specific normalisation of its synthesis stage
(:mod:`.transform`). No method is registered yet."""
