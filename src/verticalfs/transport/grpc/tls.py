"""Mutual TLS material: a development CA and one certificate per party, and loading it for gRPC.

Each party (the label holder included, as ``active``) gets a key and a certificate signed by a CA
the parties agree on. The certificate's common name and a DNS subject-alternative name are the
party's name: a server checks that the peer's certificate names the sender it claims to be, and a
client checks the server's certificate against the party it meant to reach (gRPC's target-name
override), whatever address it connects to. ``make_certs`` (``verticalfs certs make``) creates a
development CA with the ``cryptography`` package; in production, use certificates from your own CA
with the same naming.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from verticalfs.exceptions import ConfigError
from verticalfs.utils.io import check_private_file


@dataclass(frozen=True)
class TLSFiles:
    """PEM files of one party: the agreed CA certificate, its own certificate and private key."""

    ca: Path
    cert: Path
    key: Path

    def read(self) -> tuple[bytes, bytes, bytes]:
        """The three files' bytes; a private key that group or others may read is refused."""
        check_private(self.key)
        out = []
        for what, p in (("CA certificate", self.ca), ("certificate", self.cert), ("private key", self.key)):
            try:
                out.append(Path(p).read_bytes())
            except OSError as exc:
                raise ConfigError(f"cannot read the {what} {str(p)!r}: {exc.strerror}; create development "
                                  "certificates with `verticalfs certs make --parties ... --out certs/`") from None
        return out[0], out[1], out[2]

    @classmethod
    def in_folder(cls, folder: str | Path, party: str) -> TLSFiles:
        """``folder/ca.pem``, ``folder/<party>.pem`` and ``folder/<party>.key`` (as ``make_certs`` writes)."""
        f = Path(folder)
        return cls(f / "ca.pem", f / f"{party}.pem", f / f"{party}.key")


def check_private(key: str | Path) -> None:
    """A :class:`ConfigError` if the private key file ``key`` is readable or writable by group or others."""
    check_private_file(key, "private key", missing_ok=True)  # a missing file: reading it reports it


def make_certs(parties: Sequence[str], out: str | Path, *, hosts: Iterable[str] = ("localhost", "127.0.0.1"),
               days: int = 365) -> dict[str, Path]:
    """A development CA (``ca.pem``, ``ca.key``) and per party ``<name>.pem`` / ``<name>.key`` in ``out``.

    Keys are ECDSA P-256. Each party certificate names the party (common name and DNS name) and the
    ``hosts`` it may be reached at. Private keys are written with mode 0600. Returns the paths.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    from verticalfs.transport.grpc.ca import (
        ca_certificate,
        key_pem,
        party_certificate,
        subject_alt_names,
        write_pem,
    )

    names = list(parties)
    bad = [p for p in names if not p or not all(c.isalnum() or c in "-_." for c in p)]
    if bad or len(set(names)) != len(names):
        raise ConfigError(f"party names for certificates must be distinct and made of letters, digits, '-', "
                          f"'_' or '.'; got {names}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    now = _dt.datetime.now(_dt.timezone.utc)
    pem = serialization.Encoding.PEM
    ca_key, ca_cert = ca_certificate("verticalfs development CA", days, now)
    paths = {"ca": write_pem(out / "ca.pem", ca_cert.public_bytes(pem), False)}
    write_pem(out / "ca.key", key_pem(ca_key), True)
    for p in names:
        k = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, p)])
        san = x509.SubjectAlternativeName(subject_alt_names(p, hosts))
        cert = party_certificate(subject, k.public_key(), san, ca_key, ca_cert.subject, days, now)
        paths[p] = write_pem(out / f"{p}.pem", cert.public_bytes(pem), False)
        write_pem(out / f"{p}.key", key_pem(k), True)
    return paths
