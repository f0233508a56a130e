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
import ipaddress
import os
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
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    names = list(parties)
    bad = [p for p in names if not p or not all(c.isalnum() or c in "-_." for c in p)]
    if bad or len(set(names)) != len(names):
        raise ConfigError(f"party names for certificates must be distinct and made of letters, digits, '-', "
                          f"'_' or '.'; got {names}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    now = _dt.datetime.now(_dt.timezone.utc)

    def write(path: Path, data: bytes, private: bool) -> Path:
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
        if private:  # also when a stale temporary file had another mode
            os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
        return path

    def key_pem(k: ec.EllipticCurvePrivateKey) -> bytes:
        return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                               serialization.NoEncryption())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "verticalfs development CA")])
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - _dt.timedelta(minutes=5)).not_valid_after(now + _dt.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                            crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
               .sign(ca_key, hashes.SHA256()))
    paths = {"ca": write(out / "ca.pem", ca_cert.public_bytes(serialization.Encoding.PEM), False)}
    write(out / "ca.key", key_pem(ca_key), True)
    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    for p in names:
        k = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, p)])).issuer_name(ca_name)
                .public_key(k.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - _dt.timedelta(minutes=5)).not_valid_after(now + _dt.timedelta(days=days))
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(p), *sans]), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        paths[p] = write(out / f"{p}.pem", cert.public_bytes(serialization.Encoding.PEM), False)
        write(out / f"{p}.key", key_pem(k), True)
    return paths
