"""Insecure mode (no TLS) for a local experiment, and private keys that others may read.

Three real processes on 127.0.0.1: two ``verticalfs party serve`` and the label party's
``verticalfs run --config``. The run finishes and every process warns, once, on stderr. (Insecure
mode crashed both commands with ``AttributeError: 'NetworkedParty' object has no attribute 'name'``
and no test ran it.) A private key readable by group or others is refused by ``party serve`` and
``run --config`` with the fix; ``verticalfs certs make`` writes keys that only their owner reads.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")
pytest.importorskip("private_set_intersection")

from tests.bad_inputs import base  # noqa: E402
from tests.deploy.test_deployment import _free_port, _stop  # noqa: E402
from verticalfs.transport.grpc.channel import INSECURE_WARNING  # noqa: E402

pytestmark = pytest.mark.slow
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}


def _deployment(root: Path, *, insecure: bool) -> Path:
    files = base(root)  # bank (label), telecom, insurer: 120 customers
    lines = ['label_party = "bank"', 'label_column = "default"', "connect_timeout = 20",
             "insecure = true" if insecure else 'certs = "certs"']
    for name, path in files.items():
        lines += [f"[parties.{name}]", f'address = "127.0.0.1:{_free_port()}"', f'file = "{Path(path).name}"']
        if name == "telecom":
            lines.append('categorical = ["plan"]')
        # insurer has one feature: an embedding of it is that feature, refused by issue 50's floor by default
        lines += [f"[parties.{name}.policy]", "max_embedding_fraction = 1.0"]
    (root / "deployment.toml").write_text("\n".join(lines) + "\n")
    return root / "deployment.toml"


def _serve(root: Path, name: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "verticalfs", "party", "serve", "--config",
                             str(root / "deployment.toml"), "--name", name, *extra], cwd=root, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_insecure_run_with_three_processes(tmp_path):
    _deployment(tmp_path, insecure=True)
    # the file says insecure = true; --insecure on one party as well (both ways crashed)
    procs = {"telecom": _serve(tmp_path, "telecom", "--insecure"), "insurer": _serve(tmp_path, "insurer")}
    try:
        for name, p in procs.items():
            line = p.stdout.readline()
            assert f"party {name} serves" in line and "INSECURE" in line, line + p.stderr.read()
        holder = subprocess.run([sys.executable, "-m", "verticalfs", "run", "--config", "deployment.toml",
                                 "-m", "vfl", "-e", "2", "--no-progress", "--out", "r.json"], cwd=tmp_path,
                                env=ENV, capture_output=True, text=True, timeout=300)
        assert holder.returncode == 0, holder.stdout + holder.stderr
    finally:
        for p in procs.values():
            _stop(p)
    res = json.loads((tmp_path / "r.json").read_text())
    assert res["metrics"] and res["info"]["deployment"]["n_aligned"] == 120
    from verticalfs.psi import resolve_engine  # psi_engine = "auto": ristretto255 where rbcl is installed

    psi_kind = {"ristretto255": "PsiChunk", "openmined": "PsiRequest"}[resolve_engine()]
    assert res["communication"]["by_kind"].get(psi_kind, 0) > 0  # the ids were intersected privately
    errs = {"label holder": holder.stderr, **{n: p.stderr.read() for n, p in procs.items()}}
    for who, text in errs.items():
        assert text.count(INSECURE_WARNING) == 1, f"{who}: {text}"
        assert "Traceback" not in text, f"{who}: {text}"


def test_certs_make_writes_private_keys(tmp_path):
    out = subprocess.run([sys.executable, "-m", "verticalfs", "certs", "make", "--parties", "bank,telecom",
                          "--out", str(tmp_path / "certs")], capture_output=True, text=True, env=ENV)
    assert out.returncode == 0, out.stderr
    keys = sorted((tmp_path / "certs").glob("*.key"))
    assert [k.name for k in keys] == ["active.key", "bank.key", "ca.key", "telecom.key"]
    for k in keys:
        assert stat.S_IMODE(k.stat().st_mode) == 0o600, k
    for c in (tmp_path / "certs").glob("*.pem"):
        assert stat.S_IMODE(c.stat().st_mode) & 0o077 != 0o077  # certificates are public


@pytest.mark.skipif(os.name != "posix", reason="mode bits")
@pytest.mark.parametrize("mode,refused", [(0o600, False), (0o400, False), (0o644, True), (0o640, True),
                                          (0o604, True), (0o620, True), (0o602, True)])
def test_key_modes(tmp_path, mode, refused):
    from verticalfs.exceptions import ConfigError
    from verticalfs.transport.grpc.tls import check_private

    key = tmp_path / "p.key"
    key.write_text("x")
    os.chmod(key, mode)
    if refused:
        with pytest.raises(ConfigError, match=rf"mode {mode:04o}.*chmod 600 {key}"):
            check_private(key)
    else:
        check_private(key)


@pytest.mark.skipif(os.name != "posix", reason="mode bits")
def test_a_key_others_may_read_is_refused(tmp_path):
    mode = 0o640
    from typer.testing import CliRunner

    from verticalfs.cli import app
    from verticalfs.transport.grpc.tls import make_certs

    dep = _deployment(tmp_path, insecure=False)
    make_certs(["active", "bank", "telecom", "insurer"], tmp_path / "certs")
    # party serve in its own process (were the key accepted, it would serve until stopped)
    key = tmp_path / "certs" / "telecom.key"
    os.chmod(key, mode)
    p = _serve(tmp_path, "telecom")
    try:
        out, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        _stop(p)
        pytest.fail("party serve accepted a private key others may read")
    line = " ".join(err.split())
    assert p.returncode == 2 and f"private key '{key}'" in line and f"chmod 600 {key}" in line, out + err
    os.chmod(key, 0o600)
    key = tmp_path / "certs" / "active.key"  # the label holder's identity in run --config
    os.chmod(key, mode)
    res = CliRunner().invoke(app, ["run", "--config", str(dep), "-m", "vfl", "--no-progress"])
    line = " ".join(res.output.split())
    assert res.exit_code == 2 and f"private key '{key}'" in line and f"chmod 600 {key}" in line, res.output
