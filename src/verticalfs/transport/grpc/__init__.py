"""Networked transport: every party in its own process, encoded messages over gRPC with mutual TLS.

Needs the ``deploy`` extra (``grpcio``, ``cryptography``). See :mod:`.channel` and :mod:`.tls`.
"""

from verticalfs.transport.grpc.channel import GrpcChannel, PartyServer
from verticalfs.transport.grpc.tls import TLSFiles, make_certs

__all__ = ["GrpcChannel", "PartyServer", "TLSFiles", "make_certs"]
