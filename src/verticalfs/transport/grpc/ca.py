"""Certificates for a real deployment: each party's private key is made on its own host.

``verticalfs certs make`` (:func:`~verticalfs.transport.grpc.tls.make_certs`) creates every key on
one host, which is fine for local experiments only. Across organisations:

1. the CA (an organisation all parties trust, or your own PKI) runs ``verticalfs certs ca``
   once (:func:`make_ca`: ``ca.pem``, and ``ca.key``, mode 0600, which never leaves it);
2. each party runs ``verticalfs certs request --party NAME`` on its own host (:func:`request`):
   its private key (``NAME.key``, mode 0600) stays there, and ``NAME.csr``, a certificate signing
   request naming the party, is sent to the CA;
3. the CA runs ``verticalfs certs sign --csr NAME.csr --party NAME`` (:func:`sign`): the request's
   signature and name are checked against the party name the CA was told, a request for the CA's
   own name is refused, and ``NAME.pem`` (valid for mutual TLS as client and server, naming only
   the party and the hosts it asked for) goes back to the party with ``ca.pem``.

Keys are ECDSA P-256 (as ``make_certs``). Every private key this module reads must be readable by
its owner only (:func:`~verticalfs.utils.io.check_private_file`).
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verticalfs.exceptions import ConfigError
from verticalfs.utils.io import check_private_file

if TYPE_CHECKING:  # cryptography is imported on use (the deploy extra)
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

DEFAULT_CA_NAME = "verticalfs CA"


def write_pem(path: Path, data: bytes, private: bool) -> Path:
    """Write ``data`` atomically; a private file 0600 before any byte is written, else 0644."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    os.fchmod(fd, 0o600 if private else 0o644)  # before any byte, whatever the umask or a stale file's mode
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)
    return path


def _check_name(name: str, what: str) -> str:
    if not name or not all(c.isalnum() or c in "-_." for c in name):
        raise ConfigError(f"{what} {name!r} must be made of letters, digits, '-', '_' or '.'")
    return name


def key_pem(k: ec.EllipticCurvePrivateKey) -> bytes:
    """A private key as unencrypted PKCS#8 PEM (the file holding it is 0600)."""
    from cryptography.hazmat.primitives import serialization

    return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                           serialization.NoEncryption())


def _refuse_overwrite(path: Path) -> None:
    if path.exists():
        raise ConfigError(f"{str(path)!r} exists; a private key is never overwritten (move it away first if you "
                          "mean to replace it)")


def ca_certificate(name: str, days: int, now: _dt.datetime) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A fresh ECDSA P-256 key and its self-signed CA certificate (``name``, valid ``days``; may sign
    certificates, not further CAs)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _dt.timedelta(minutes=5)).not_valid_after(now + _dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def party_certificate(subject: x509.Name, public_key: Any, san: x509.SubjectAlternativeName, ca_key: Any,
                      issuer: x509.Name, days: int, now: _dt.datetime) -> x509.Certificate:
    """A party's certificate signed by the CA: not a CA, for mutual TLS as server and client."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID

    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - _dt.timedelta(minutes=5)).not_valid_after(now + _dt.timedelta(days=days))
            .add_extension(san, critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))


def make_ca(out: str | Path, *, name: str = DEFAULT_CA_NAME, days: int = 3650) -> dict[str, Path]:
    """A CA: ``out/ca.pem`` (give it to every party) and ``out/ca.key`` (0600, keep it at the CA)."""
    from cryptography.hazmat.primitives import serialization

    out = Path(out)
    _refuse_overwrite(out / "ca.key")
    now = _dt.datetime.now(_dt.timezone.utc)
    key, cert = ca_certificate(name, days, now)
    k = write_pem(out / "ca.key", key_pem(key), True)
    return {"ca": write_pem(out / "ca.pem", cert.public_bytes(serialization.Encoding.PEM), False), "key": k}


def subject_alt_names(party: str, hosts: Iterable[str]) -> list[x509.GeneralName]:
    """The party's name and the ``hosts`` it may be reached at (IP addresses or DNS names)."""
    from cryptography import x509

    out: list[x509.GeneralName] = [x509.DNSName(party)]
    for h in hosts:
        h = h.strip()
        if not h:
            continue
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            out.append(x509.DNSName(h))
    return out


def request(party: str, out: str | Path, *, hosts: Iterable[str] = ("localhost", "127.0.0.1")) -> dict[str, Path]:
    """At the party: ``out/<party>.key`` (0600, stays here) and ``out/<party>.csr`` (send it to the CA).

    The request names the party (common name and DNS name) and the ``hosts`` it is reached at.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    party = _check_name(party, "--party")
    out = Path(out)
    key_path = out / f"{party}.key"
    _refuse_overwrite(key_path)
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, party)]))
           .add_extension(x509.SubjectAlternativeName(subject_alt_names(party, hosts)), critical=False)
           .sign(key, hashes.SHA256()))
    k = write_pem(key_path, key_pem(key), True)
    return {"key": k, "csr": write_pem(out / f"{party}.csr", csr.public_bytes(serialization.Encoding.PEM), False)}


def _common_name(name: x509.Name) -> str | None:
    from cryptography.x509.oid import NameOID

    attrs = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(attrs[0].value) if len(attrs) == 1 else None


def sign(ca_dir: str | Path, csr_path: str | Path, out: str | Path, *, party: str, days: int = 365) -> Path:
    """At the CA: ``out`` (the party's certificate) from its request, after checking it.

    Refused: a request whose signature does not verify, whose common name is not ``party`` (or that
    has several), one for the CA's own name, or whose DNS names omit ``party``. The certificate
    carries the request's subject-alternative names only, is not a CA, and is valid for TLS client
    and server authentication.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa

    party = _check_name(party, "--party")
    ca_dir = Path(ca_dir)
    try:
        ca_cert = x509.load_pem_x509_certificate((ca_dir / "ca.pem").read_bytes())
    except FileNotFoundError:
        raise ConfigError(f"{str(ca_dir / 'ca.pem')!r} does not exist; create the CA with `verticalfs certs ca "
                          f"--out {ca_dir}`") from None
    except ValueError as exc:
        raise ConfigError(f"{str(ca_dir / 'ca.pem')!r} is not a PEM certificate: {exc}") from None
    key_path = check_private_file(ca_dir / "ca.key", "CA private key")
    try:
        ca_key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{str(key_path)!r} is not an unencrypted PEM private key: {exc}") from None
    if not isinstance(ca_key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey, ed25519.Ed25519PrivateKey,
                               ed448.Ed448PrivateKey, dsa.DSAPrivateKey)):  # DH, X25519, X448 keys cannot sign
        raise ConfigError(f"{str(key_path)!r} holds a {type(ca_key).__name__}, which cannot sign certificates; give "
                          "the CA's signing key (EC, RSA, Ed25519, Ed448 or DSA; `verticalfs certs ca` makes EC)")
    csr_path = Path(csr_path)
    try:
        csr = x509.load_pem_x509_csr(csr_path.read_bytes())
    except FileNotFoundError:
        raise ConfigError(f"the request {str(csr_path)!r} does not exist") from None
    except ValueError as exc:
        raise ConfigError(f"{str(csr_path)!r} is not a PEM certificate signing request: {exc}") from None
    if not csr.is_signature_valid:
        raise ConfigError(f"the request {str(csr_path)!r} has an invalid signature (changed after it was made); "
                          "ask the party for a new one")
    ca_name = _common_name(ca_cert.subject)
    cn = _common_name(csr.subject)
    if (cn is not None and cn == ca_name) or party == ca_name:
        raise ConfigError(f"the request {str(csr_path)!r} asks for the CA's own name {ca_name!r}; refused (a party "
                          "certificate must never look like the CA)")
    if cn != party:
        raise ConfigError(f"the request {str(csr_path)!r} names {cn!r}, not party {party!r}; sign a party's request "
                          "only under the name you know it by (--party)")
    try:
        san = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        san = x509.SubjectAlternativeName([x509.DNSName(party)])
    if party not in san.get_values_for_type(x509.DNSName):
        raise ConfigError(f"the request {str(csr_path)!r} does not name {party!r} among its DNS names (peers check "
                          "it); make it with `verticalfs certs request --party NAME`")
    now = _dt.datetime.now(_dt.timezone.utc)
    cert = party_certificate(csr.subject, csr.public_key(), san, ca_key, ca_cert.subject, days, now)
    return write_pem(Path(out), cert.public_bytes(serialization.Encoding.PEM), False)
