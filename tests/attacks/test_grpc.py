"""Attack 1 of issue 50 over gRPC, against real ``verticalfs party serve`` processes with mutual TLS.

``telecom`` serves with the deployment's default policy; ``insurer`` serves the same kind of file
with a ``--policy`` file that restores the old path (the label holder's seeds, no floors). This
process is the label holder (its own certificate, its own gRPC channel, every message through the
real serde): ``Join(vfl)`` with a linear bottom model and a seed it chose, then the training split's
embeddings and the least-squares solve.

The insurer gives every column (R^2 > 0.999); telecom refuses the linear model naming
``min_hidden_layers``, and the widest model its floors allow, with the attacker's seed, gives nothing
(mean R^2 over its columns below 0: worse than predicting each column's mean).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from tests.attacks.harness import CATEGORICAL, SELECTION, r2, table  # noqa: E402
from tests.attacks.test_split_models import solve, spec  # noqa: E402
from tests.deploy.test_deployment import _free_port, _listening, _start, _stop  # noqa: E402
from verticalfs.exceptions import PolicyError  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("attacks_grpc")]
PARTIES = ("telecom", "insurer")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from verticalfs.transport.grpc.tls import make_certs

    root = tmp_path_factory.mktemp("attacks_grpc")
    t = table()
    pd_bank = t[["id"]].assign(default=np.arange(len(t)) % 2)
    pd_bank.to_csv(root / "bank.csv", index=False)
    for k, name in enumerate(PARTIES):
        table(seed=11 + k).assign(id=t["id"]).to_csv(root / f"{name}.csv", index=False)
    make_certs(["active", "bank", *PARTIES], root / "certs")
    lines = ['label_party = "bank"', 'label_column = "default"', "connect_timeout = 20", 'certs = "certs"']
    for name in ("bank", *PARTIES):
        lines += [f"[parties.{name}]", f'address = "127.0.0.1:{_free_port()}"', f'file = "{name}.csv"']
        if name != "bank":
            lines.append(f"categorical = {CATEGORICAL!r}".replace("'", '"'))
    (root / "deployment.toml").write_text("\n".join(lines) + "\n")
    # the old path: the label holder's seeds, any shape (what every party did before issue 50)
    (root / "old_path.toml").write_text("[policy]\nown_randomness = false\nmin_hidden_layers = 0\n"
                                        "max_embedding_fraction = 1.0\n")
    return root


@pytest.fixture(scope="module")
def servers(site):
    extra = {"telecom": [], "insurer": ["--policy", "old_path.toml"]}
    procs = {p: _start(site, p, *extra[p]) for p in PARTIES}  # started together: each imports torch
    try:
        for p, proc in procs.items():
            _listening(proc, p)
        yield procs
    finally:
        for proc in procs.values():
            _stop(proc)


@pytest.fixture(scope="module")
def holder(site, servers):
    """The attacker's proxies to each party over mutual TLS, each party aligned on every id."""
    from tests.attacks.harness import Holder
    from verticalfs.deploy.config import Deployment
    from verticalfs.names import LABEL_HOLDER
    from verticalfs.transport.grpc.channel import GrpcChannel
    from verticalfs.transport.ledger import Ledger
    from verticalfs.transport.node import Node, PartyProxy

    dep = Deployment.load(site / "deployment.toml")
    ch = GrpcChannel(LABEL_HOLDER, dep.addresses, tls=dep.tls(LABEL_HOLDER), connect_timeout=20)
    ch.wait_ready(list(PARTIES))
    node = Node(LABEL_HOLDER, ch, Ledger())
    proxies = {p: PartyProxy(node, p) for p in PARTIES}
    for p in PARTIES:
        h = Holder.__new__(Holder)
        h.proxy = proxies[p]
        h.align(table()["id"])
    yield proxies
    ch.close()


def _truth(site: Path, name: str) -> np.ndarray:
    """The party's prepared training columns (the test's view: the same file, Align and preparation)."""
    from tests.attacks.harness import Holder, default_policy
    from verticalfs.deploy.party import DeployedParty

    rt = DeployedParty(name, site / f"{name}.csv", id_column="id", categorical=CATEGORICAL, policy=default_policy())
    Holder(rt).align(table()["id"])
    return rt.data.X("train").numpy()


def _attack(proxy, s, d):
    from verticalfs.transport.messages import Embeddings, EmbedRequest, Join, Ready

    proxy.request(Join(method="vfl", spec=s), SELECTION, expect=Ready)
    H = proxy.request(EmbedRequest("train", 0, -1, False), SELECTION, expect=Embeddings).values
    return solve(s, d, H)


def test_over_grpc_the_old_path_gives_every_column(site, holder):
    truth = _truth(site, "insurer")
    d = truth.shape[1]
    X = _attack(holder["insurer"], spec(embedding_dim=d), d)
    assert r2(truth, X).min() > 0.999


def test_over_grpc_the_default_policy_gives_nothing(site, holder):
    truth = _truth(site, "telecom")
    d = truth.shape[1]
    with pytest.raises(PolicyError) as e:
        _attack(holder["telecom"], spec(embedding_dim=d), d)
    assert str(e.value).startswith("party 'telecom' refuses") and "min_hidden_layers = 1" in str(e.value)
    fit = r2(truth, _attack(holder["telecom"], spec(hidden=(d,), embedding_dim=d // 2), d))
    assert fit.mean() < 0, fit
