"""SecureBoost (Cheng et al., IEEE Intelligent Systems 2021): vertical gradient-boosted trees over
Paillier-encrypted, packed gradient histograms (``secureboost``), and feature selection by their
importance (``sbt-filter``). See :mod:`.method` for the protocol, :mod:`.role` for a party's side,
:mod:`.reference` for the central reference the federated trees equal."""

from verticalfs.methods.secureboost.method import SBTFilter, SBTFilterParams, SecureBoost, SecureBoostParams

__all__ = ["SBTFilter", "SBTFilterParams", "SecureBoost", "SecureBoostParams"]
