"""Bytes actually on the wire: the kernel's TCP counters of this process's connections to the parties.

The ledger counts what verticalfs serialises (payload and header, the same in every transport).
Networked, gRPC's HTTP/2 framing, TLS records and keep-alive pings come on top; this module reads
them where they are exact: Linux's ``TCP_INFO`` of each socket (``tcpi_bytes_acked``, bytes sent
and acknowledged, and ``tcpi_bytes_received``, Linux >= 4.2), for the sockets of this process
whose peer is one of the given addresses. IP and TCP headers are not included. Elsewhere, or when
the counters cannot be read, :func:`tcp_bytes` returns ``None`` (the figure is then absent, never
estimated).
"""

from __future__ import annotations

import os
import socket
import struct
import sys
from collections.abc import Iterable

_BYTES_ACKED, _BYTES_RECEIVED = 120, 128  # offsets in struct tcp_info (linux/tcp.h)
_TCP_INFO = getattr(socket, "TCP_INFO", 11)


def _resolve(addresses: Iterable[str]) -> set[tuple[str, int]]:
    out: set[tuple[str, int]] = set()
    for a in addresses:
        host, _, port = a.rpartition(":")
        host = host.strip("[]")
        try:
            for info in socket.getaddrinfo(host, int(port), proto=socket.IPPROTO_TCP):
                out.add((str(info[4][0]), int(port)))  # str already: an IPv4/IPv6 address
        except (OSError, ValueError):
            continue
    return out


def tcp_bytes(addresses: Iterable[str]) -> tuple[int, int] | None:
    """(sent, received) bytes of this process's open TCP connections to ``addresses``, or ``None``."""
    if not sys.platform.startswith("linux"):
        return None
    peers = _resolve(addresses)
    sent = received = 0
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            dup = os.dup(int(fd))
        except (OSError, ValueError):
            continue
        try:
            s = socket.socket(fileno=dup)
        except OSError:
            os.close(dup)
            continue
        try:
            if s.type != socket.SOCK_STREAM or s.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            try:
                peer = s.getpeername()
            except OSError:
                continue
            host = peer[0][7:] if peer[0].startswith("::ffff:") else peer[0]  # gRPC's dual-stack sockets
            if (host, peer[1]) not in peers:
                continue
            info = s.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 256)
            if len(info) < _BYTES_RECEIVED + 8:
                return None
            sent += struct.unpack_from("=Q", info, _BYTES_ACKED)[0]
            received += struct.unpack_from("=Q", info, _BYTES_RECEIVED)[0]
        finally:
            s.close()
    return sent, received
