"""Certificates the way organisations make them: the CA (`certs ca`) signs (`certs sign`) requests
each party made on its own host (`certs request`: the key never leaves it); the signed certificates
carry a real mutual-TLS gRPC connection between two processes on 127.0.0.1. Requests for another
name or for the CA's own name, changed requests and a CA key others can read are refused."""

from __future__ import annotations

import multiprocessing as mp
import stat
from pathlib import Path

import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from typer.testing import CliRunner  # noqa: E402

import verticalfs  # noqa: E402
from verticalfs.cli import app  # noqa: E402
from verticalfs.names import LABEL_HOLDER  # noqa: E402

runner = CliRunner()


def _ok(*args: str) -> str:
    r = runner.invoke(app, ["certs", *args])
    assert r.exit_code == 0, r.output
    return " ".join(r.output.split())


def _refused(*args: str) -> str:
    r = runner.invoke(app, ["certs", *args])
    assert r.exit_code == 2, r.output
    return " ".join(r.output.split())


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """Three 'hosts' (folders): the CA, the label holder and party1; only .csr and .pem files travel."""
    root = tmp_path_factory.mktemp("hosts")
    ca, holder, party = root / "ca", root / "holder", root / "party1"
    _ok("ca", "--out", str(ca))
    for name, folder in ((LABEL_HOLDER, holder), ("party1", party)):
        out = _ok("request", "--party", name, "--out", str(folder))
        assert "never copy it off this host" in out
        _ok("sign", "--ca", str(ca), "--csr", str(folder / f"{name}.csr"), "--party", name,
            "--out", str(folder / f"{name}.pem"))
    return root


def test_request_keeps_the_key_private_and_sign_names_the_party(hosts):
    from cryptography import x509

    for name, folder in ((LABEL_HOLDER, "holder"), ("party1", "party1")):
        f = hosts / folder
        assert sorted(p.name for p in f.iterdir()) == [f"{name}.csr", f"{name}.key", f"{name}.pem"]
        assert stat.S_IMODE((f / f"{name}.key").stat().st_mode) == 0o600
        cert = x509.load_pem_x509_certificate((f / f"{name}.pem").read_bytes())
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate((hosts / "ca" / "ca.pem").read_bytes()))
        assert cert.subject.rfc4514_string() == f"CN={name}"
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert name in sans.get_values_for_type(x509.DNSName)
        assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert sorted(p.name for p in (hosts / "ca").iterdir()) == ["ca.key", "ca.pem"]  # no party key at the CA
    assert stat.S_IMODE((hosts / "ca" / "ca.key").stat().st_mode) == 0o600


def test_sign_refuses_wrong_names_changed_requests_and_an_open_ca_key(hosts, tmp_path):
    ca, csr = hosts / "ca", hosts / "party1" / "party1.csr"
    out = str(tmp_path / "x.pem")
    # the request names party1; the CA was told it comes from party2
    assert "names 'party1', not party 'party2'" in _refused("sign", "--ca", str(ca), "--csr", str(csr), "--party",
                                                            "party2", "--out", out)
    # a request for the CA's own name
    _ok("request", "--party", "evil", "--out", str(tmp_path / "evil"))
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    key = serialization.load_pem_private_key((tmp_path / "evil" / "evil.key").read_bytes(), password=None)
    ca_csr = (x509.CertificateSigningRequestBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "verticalfs CA")]))
              .sign(key, hashes.SHA256()))
    (tmp_path / "ca.csr").write_bytes(ca_csr.public_bytes(serialization.Encoding.PEM))
    assert "asks for the CA's own name 'verticalfs CA'" in _refused(
        "sign", "--ca", str(ca), "--csr", str(tmp_path / "ca.csr"), "--party", "evil", "--out", out)
    # nor is a party certificate made under the CA's name, whatever the request says
    _ok("ca", "--out", str(tmp_path / "ca2"), "--name", "ca2")
    _ok("request", "--party", "ca2", "--out", str(tmp_path / "p2"))
    assert "the CA's own name 'ca2'" in _refused("sign", "--ca", str(tmp_path / "ca2"), "--csr",
                                                 str(tmp_path / "p2" / "ca2.csr"), "--party", "ca2", "--out", out)
    # a request changed after it was signed by its key (another public key put in): its signature fails
    other = x509.load_pem_x509_csr(csr.read_bytes())
    forged = other.public_bytes(serialization.Encoding.DER)
    evil = x509.load_pem_x509_csr((tmp_path / "evil" / "evil.csr").read_bytes())
    i = forged.find(other.public_key().public_bytes(serialization.Encoding.DER,
                                                    serialization.PublicFormat.SubjectPublicKeyInfo))
    spki = evil.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert i > 0
    changed = forged[:i] + spki + forged[i + len(spki):]
    (tmp_path / "changed.csr").write_bytes(x509.load_der_x509_csr(changed).public_bytes(serialization.Encoding.PEM))
    assert "invalid signature" in _refused("sign", "--ca", str(ca), "--csr", str(tmp_path / "changed.csr"),
                                           "--party", "party1", "--out", out)
    # a CA key others can read: refused with the fix
    import shutil

    open_ca = tmp_path / "open_ca"
    shutil.copytree(ca, open_ca)
    (open_ca / "ca.key").chmod(0o644)
    msg = _refused("sign", "--ca", str(open_ca), "--csr", str(csr), "--party", "party1", "--out", out)
    assert "accessible to other users (mode 0644)" in msg and f"chmod 600 {open_ca / 'ca.key'}" in msg
    assert not Path(out).exists()
    # a private key is never overwritten
    assert "never overwritten" in _refused("request", "--party", "party1", "--out", str(hosts / "party1"))


def test_sign_refuses_a_ca_key_that_cannot_sign(hosts, tmp_path):
    """An X25519 key in ca.key (a key-agreement key) is refused naming the file, before any signing."""
    import shutil

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import x25519

    ca = tmp_path / "ca"
    shutil.copytree(hosts / "ca", ca)
    (ca / "ca.key").write_bytes(x25519.X25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    out = tmp_path / "x.pem"
    msg = _refused("sign", "--ca", str(ca), "--csr", str(hosts / "party1" / "party1.csr"), "--party", "party1",
                   "--out", str(out))
    assert "holds a X25519PrivateKey, which cannot sign certificates" in msg and "ca.key" in msg
    assert not out.exists()


def test_certs_make_says_it_is_for_local_experiments():
    r = runner.invoke(app, ["certs", "make", "--help"])
    assert "LOCAL EXPERIMENTS ONLY" in r.output and "certs request" in " ".join(r.output.split())


def _party_main(party_data, ca: str, cert: str, key: str, conn) -> None:  # runs in a child process
    import torch

    from verticalfs.methods.registry import party_roles
    from verticalfs.party import PartyRuntime
    from verticalfs.transport.grpc import TLSFiles
    from verticalfs.transport.grpc.party import NetworkedParty

    torch.set_num_threads(1)
    party = NetworkedParty(PartyRuntime(party_data, role_for=party_roles()), "127.0.0.1:0",
                           tls=TLSFiles(Path(ca), Path(cert), Path(key)))
    conn.send(party.server.address)
    party.set_addresses(conn.recv())
    party.start()
    conn.send("ready")
    conn.recv()  # any message: stop
    party.stop()


def test_signed_certificates_carry_mutual_tls_between_two_processes(hosts):
    from verticalfs.federation import Federation
    from verticalfs.transport.grpc import GrpcChannel, TLSFiles
    from verticalfs.transport.messages import At, Hello, HelloRequest

    data = verticalfs.build_data("wine", parties=2, seed=0)
    party_data = data.parties[0]
    assert party_data.name == "party1"
    ca = hosts / "ca" / "ca.pem"  # travels to every party with its certificate
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=_party_main, daemon=True,
                       args=(party_data, str(ca), str(hosts / "party1" / "party1.pem"),
                             str(hosts / "party1" / "party1.key"), there))
    proc.start()
    try:
        addresses = {"party1": here.recv()}
        here.send(addresses)
        assert here.recv() == "ready"
        tls = TLSFiles(ca, hosts / "holder" / f"{LABEL_HOLDER}.pem", hosts / "holder" / f"{LABEL_HOLDER}.key")
        fed = Federation(data.labels, GrpcChannel(LABEL_HOLDER, addresses, tls=tls, connect_timeout=10), ["party1"])
        hello = fed.proxy("party1").request(HelloRequest(), At("setup"), expect=Hello)
        assert list(hello.feature_names) == list(party_data.feature_names)
        assert fed.channel.wire_bytes() > 0  # it went over the TLS connection
    finally:
        here.send("stop")
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
