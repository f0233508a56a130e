"""The largest party file a deployment reads is a setting (``max_file_mb`` in the deployment file,
``party serve --max-file-mb`` on one host), no longer a hard-coded 1 GiB (issue 39)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

pytest.importorskip("grpc")

from tests.deploy.test_insecure import _deployment  # noqa: E402
from verticalfs.cli import app  # noqa: E402
from verticalfs.deploy.config import Deployment  # noqa: E402
from verticalfs.deploy.holder import serve_party  # noqa: E402
from verticalfs.exceptions import DataError  # noqa: E402


def _with_limit(path, mb):
    text = path.read_text().replace("insecure = true\n", f"insecure = true\nmax_file_mb = {mb}\n")
    path.write_text(text)
    return Deployment.load(path)


def test_the_deployment_file_sets_the_limit_and_party_serve_overrides_it(tmp_path):
    dep_file = _deployment(tmp_path, insecure=True)
    assert Deployment.load(dep_file).max_bytes == 1 << 30  # the default: 1 GiB
    dep = _with_limit(dep_file, 0.0005)  # 524 bytes: smaller than any of the three files (862-1,594 bytes)
    assert dep.max_bytes == 524
    with pytest.raises(DataError, match=r"telecom.*limit of 524 bytes.*--max-file-mb"):
        serve_party(dep, "telecom")
    party = serve_party(dep, "telecom", max_bytes=1 << 20)  # the host's own limit wins (not started)
    assert party.runtime.read_options["max_bytes"] == 1 << 20
    res = CliRunner().invoke(app, ["party", "serve", "--config", str(dep_file), "--name", "telecom",
                                   "--max-file-mb", "0"])
    assert res.exit_code == 2 and "--max-file-mb must be > 0" in res.output
    res = CliRunner().invoke(app, ["party", "serve", "--config", str(dep_file), "--name", "insurer"])
    assert res.exit_code != 0 and "limit of 524 bytes" in res.output
