"""Every registered method over real party processes whose policy is the deployment's default: it
runs within the parties' floors, or is refused before any work with a PolicyError naming the rule,
exactly as docs/reference/deployment-status.md (generated from the registry and the policy) says.

``bank`` is the label party (its own block of four columns served by this process); ``telecom`` and
``insurer`` serve 24 numeric columns each with the default policy except ``min_key_bits = 512``
(Paillier keys of 512 bits, for the test's time: key size is not what it checks). Each method
runs with its own test parameters less those that shape the model (``hidden``, ``secure``), one
epoch, and, for the filter methods, every feature selected (so that the split model trained
after them gets every party's columns).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from tests.deploy.test_deployment import _free_port, _listening, _start, _stop  # noqa: E402
from verticalfs.exceptions import PolicyError  # noqa: E402
from verticalfs.methods import available, registry  # noqa: E402
from verticalfs.methods.deployable import default_status  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("deploy_every_method")]
PARTIES = ("telecom", "insurer")
N, WIDTH = 260, 24
#: parameters that shape the model or the mode (the verdict's inputs): the defaults are what is checked
SHAPE = {"hidden", "secure", "embedding_dim", "lr", "activation"}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from verticalfs.transport.grpc.tls import make_certs

    root = tmp_path_factory.mktemp("every_method")
    rng = np.random.default_rng(5)
    ids = [f"c{i:04d}" for i in range(N)]
    X = {p: rng.normal(size=(N, WIDTH)) for p in PARTIES}
    own = rng.normal(size=(N, 4))
    logit = X["telecom"][:, 0] - X["insurer"][:, 1] + own[:, 0]
    y = (logit + rng.normal(scale=0.5, size=N) > 0).astype(int)
    pd.DataFrame({"id": ids, **{f"b{j}": own[:, j] for j in range(4)}, "default": y}).to_csv(root / "bank.csv",
                                                                                               index=False)
    for p in PARTIES:
        pd.DataFrame({"id": ids, **{f"{p[0]}{j}": X[p][:, j] for j in range(WIDTH)}}).to_csv(root / f"{p}.csv",
                                                                                              index=False)
    make_certs(["active", "bank", *PARTIES], root / "certs")
    lines = ['label_party = "bank"', 'label_column = "default"', "connect_timeout = 20", 'certs = "certs"']
    for p in ("bank", *PARTIES):
        lines += [f"[parties.{p}]", f'address = "127.0.0.1:{_free_port()}"', f'file = "{p}.csv"']
        lines += [f"[parties.{p}.policy]", "min_key_bits = 512", "max_psi_requests = 1000"]
    (root / "deployment.toml").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="module")
def servers(site):
    procs = {p: _start(site, p) for p in PARTIES}  # started together: each imports torch
    try:
        for p, proc in procs.items():
            _listening(proc, p)
        yield procs
    finally:
        for proc in procs.values():
            _stop(proc)


def _params(name: str) -> dict:
    from dataclasses import fields

    cls = registry.get(name)
    known = {f.name for f in fields(cls.Params)}
    out = {k: v for k, v in cls.test_params.items() if k not in SHAPE}
    if "epochs" in known:
        out["epochs"] = 1
    if "n_select" in known and not getattr(cls, "selects_all", False):
        out["n_select"] = 4 + 2 * WIDTH  # every feature: the split model after it gets every party's columns
    if "key_bits" in known:
        out.update(key_bits=512 if name != "fedsdg-fs" else 1024, insecure=True)
    return out


FEDERATED = [m for m in available() if default_status(m).runs is not None]


@pytest.mark.parametrize("method", FEDERATED)
def test_each_method_runs_within_the_floors_or_is_refused_naming_the_rule(site, servers, method):
    from verticalfs.deploy.holder import run_deployment

    status = default_status(method)
    if status.runs:
        res = run_deployment(site / "deployment.toml", method, seed=0, params=_params(method))
        assert res.metrics, method
        return
    with pytest.raises(PolicyError) as e:
        run_deployment(site / "deployment.toml", method, seed=0, params=_params(method))
    text = str(e.value)
    assert "\n" not in text and text.startswith("party '") and f"{status.rule} = " in text, text
