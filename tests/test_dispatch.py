"""One way in at a party (verticalfs.dispatch): every kind a party answers is declared with its
senders and policy rules, and one chain of layers checks them before any handler runs."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from verticalfs.configuration import PartyPolicy
from verticalfs.deploy.party import Align, DeployedParty, PolicyQuery, StatusQuery, TrustQuery
from verticalfs.deploy.scoring import OpenModel, PartyScoring, ScoringPsi, ScoringPsiChunk, ScoringPsiOpen, StageIds
from verticalfs.dispatch import DEFAULT_MODS, POLICY_RULES, Budget, Handlers, Route
from verticalfs.exceptions import PolicyError, ProtocolError
from verticalfs.methods import registry
from verticalfs.names import LABEL_HOLDER
from verticalfs.party import LocalData, PartyRuntime
from verticalfs.psi import IdsDigestRequest, PsiChunk, PsiOpen, PsiRequest
from verticalfs.transport.messages import (
    At,
    EndSession,
    HelloRequest,
    Join,
    KeepFeatures,
    LoadModel,
    Persist,
    SaveModel,
    SupportRequest,
    TrafficRequest,
)

SRC = Path(__file__).resolve().parents[1] / "src" / "verticalfs"

#: what the party itself answers, besides the roles (issue 49: the runtime's, the deployment's, scoring's)
RUNTIME_KINDS = {HelloRequest, Join, SupportRequest, KeepFeatures, Persist, EndSession, TrafficRequest, SaveModel,
                 LoadModel, PsiRequest, PsiOpen, PsiChunk}
DEPLOYED_KINDS = RUNTIME_KINDS | {Align, PolicyQuery, IdsDigestRequest, StatusQuery, TrustQuery}
SCORING_KINDS = {OpenModel, ScoringPsi, ScoringPsiOpen, ScoringPsiChunk, StageIds}


def _role_classes() -> dict[str, type]:
    """Every registered method's party role (and the roles their stages' roles extend)."""
    out = {}
    for name in registry.available():
        role = registry.get(name).Role
        if role is not None:
            out[name] = role
    return out


def every_route() -> list[tuple[str, Route]]:
    """Every kind a party answers: the runtime's, a deployed party's, its scoring's, every role's."""
    tables: list[tuple[str, type[Handlers]]] = [("PartyRuntime", PartyRuntime), ("DeployedParty", DeployedParty),
                                                ("PartyScoring", PartyScoring)]
    tables += [(f"role of {m}", r) for m, r in _role_classes().items()]
    return [(where, route) for where, cls in tables for route in cls.routes.values()]


def test_every_kind_a_party_answers_has_a_declared_sender_and_rule():
    assert set(PartyRuntime.routes) == RUNTIME_KINDS
    assert set(DeployedParty.routes) == DEPLOYED_KINDS
    assert SCORING_KINDS <= set(PartyScoring.routes)
    roles = _role_classes()
    assert len(roles) >= 25  # every registered method that runs at the parties
    for m, role in roles.items():
        assert role.routes, f"the role of {m!r} answers nothing"
    routes = every_route()
    for where, r in routes:
        assert isinstance(r.kind, type), (where, r)
        assert isinstance(r.peers, bool), (where, r.kind)  # who may send it: the label holder, or peers too
        assert isinstance(r.policy, tuple) and set(r.policy) <= set(POLICY_RULES), (where, r.kind, r.policy)
        assert r.budget is None or isinstance(r.budget, Budget), (where, r.kind)
        assert r.senders in ("the label holder", "the label holder or another feature party")
    # the declarations that matter: raw columns, labels, peers, budgets
    by_kind = {r.kind.__name__: r for _, r in routes}
    assert by_kind["GatherColumns"].policy == ("release_columns",)
    assert by_kind["StatVariables"].peers
    assert [k for k, r in by_kind.items() if r.peers] == ["StatVariables"]  # only FEAST's party-to-party kind
    assert {k for k, r in by_kind.items() if r.budget} == {"PsiRequest", "PsiOpen", "Align", "ScoringPsi",
                                                           "ScoringPsiOpen"}
    assert by_kind["Join"].guard is not None  # the method, its rules and the keys it would make


def test_no_sender_is_checked_by_hand_outside_the_one_layer():
    """The party-side code (party.py, deploy/, methods/) compares no sender itself."""
    pattern = re.compile(r"sender\s*[!=]=\s*LABEL_HOLDER|LABEL_HOLDER\s*[!=]=\s*sender")
    files = [SRC / "party.py", *sorted((SRC / "deploy").glob("*.py")), *sorted((SRC / "methods").rglob("*.py"))]
    found = [f"{f.relative_to(SRC)}:{i + 1}" for f in files for i, line in enumerate(f.read_text().splitlines())
             if pattern.search(line)]
    assert found == []


class _Reached(Exception):
    pass


def _spy(call, call_next):
    raise _Reached(call.route.handler)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory) -> DeployedParty:
    root = tmp_path_factory.mktemp("dispatch")
    pd.DataFrame({"id": ["a", "b", "c"], "x": [1.0, 2.0, 3.0]}).to_csv(root / "p.csv", index=False)
    rt = DeployedParty("telecom", root / "p.csv", policy=PartyPolicy.permissive())
    rt.enable_scoring(root / "p.csv")
    return rt


def _runtime_for(where: str, route: Route, deployed: DeployedParty, policy: PartyPolicy) -> PartyRuntime:
    if where in ("DeployedParty", "PartyScoring"):
        rt = deployed.fork()
    else:
        rt = PartyRuntime(LocalData("telecom", ["x"], {"train": np.zeros((3, 1))}), role_for=registry.party_roles())
        if where.startswith("role of "):
            role_cls = _role_classes()[where.removeprefix("role of ")]
            rt.role, rt.method = object.__new__(role_cls), where.removeprefix("role of ")
    rt.policy = policy
    rt.mods = [*DEFAULT_MODS, _spy]  # a layer after the checks: reached only if they all passed
    return rt


def _message(kind: type):
    return object.__new__(kind)  # never read: the layers refuse it, or the spy stops it


def test_one_layer_refuses_every_kind_from_a_sender_it_does_not_allow_before_its_handler(deployed):
    at = At("train")
    checked = 0
    for where, route in every_route():
        if where == "PartyScoring" and route.kind not in SCORING_KINDS:
            continue  # (the refusal of an unstaged split: not a kind)
        rt = _runtime_for(where, route, deployed, PartyPolicy.permissive())
        msg = _message(route.kind)
        if route.peers:
            with pytest.raises(_Reached):
                rt.handle("insurer", msg, at, None)
            continue
        with pytest.raises(ProtocolError, match=rf"party 'telecom' accepts {route.kind.__name__} only from the "
                                                 r"label holder, not from 'insurer'"):
            rt.handle("insurer", msg, at, None)
        if route.guard is None and route.budget is None:  # from the label holder, permissive: the handler's turn
            with pytest.raises(_Reached, match=route.handler):
                rt.handle(LABEL_HOLDER, msg, at, None)
        checked += 1
    assert checked > 60


def test_the_policy_rules_declared_with_a_handler_refuse_before_it_runs(deployed):
    strict = PartyPolicy(release_columns=False, accept_labels=False, require_secure=True)
    ruled = [(w, r) for w, r in every_route() if r.policy]
    assert ruled
    for where, route in ruled:
        rt = _runtime_for(where, route, deployed, strict)
        with pytest.raises(PolicyError, match=rf"party 'telecom' refuses to .*\({route.kind.__name__} of "
                                              rf".*its policy has {route.policy[0]} = "):
            rt.handle(LABEL_HOLDER, _message(route.kind), At("train"), None)


def test_a_request_budget_is_counted_in_the_layer_before_its_handler(deployed):
    rt = deployed.fork()
    rt.policy = PartyPolicy(max_psi_requests=1, max_psi_ids=5)
    rt.mods = [*DEFAULT_MODS, _spy]
    rt.psi_requests = 0
    with pytest.raises(PolicyError, match="max_psi_ids = 5"):
        rt.handle(LABEL_HOLDER, PsiOpen(group="ristretto255", n=6, chunk=1), At("setup"), None)
    with pytest.raises(_Reached, match="on_psi_open"):
        rt.handle(LABEL_HOLDER, PsiOpen(group="ristretto255", n=5, chunk=1), At("setup"), None)
    with pytest.raises(PolicyError, match=r"answer more alignments: it has answered 1 new intersections and "
                                          r"alignments in the last 24 h, 0 of 1 left.*max_psi_requests = 1"):
        rt.handle(LABEL_HOLDER, Align(ids=["a"], split=np.zeros(1), scaling="minmax", impute="mean"),
                  At("setup"), None)
    assert deployed.psi_requests == 1  # one count, shared by the party's sessions


def test_adding_a_layer_is_one_line():
    """A party given one more layer runs it after the checks, on every kind (e.g. a deadline)."""
    seen = []

    def record(call, call_next):
        seen.append((call.sender, type(call.msg).__name__, call.route.owner))
        return call_next(call)

    rt = PartyRuntime(LocalData("telecom", ["x"], {"train": np.zeros((3, 1))}), mods=[*DEFAULT_MODS, record])
    hello = rt.handle(LABEL_HOLDER, HelloRequest(), At("setup"), None)
    assert hello.feature_names == ["x"]
    assert seen == [(LABEL_HOLDER, "HelloRequest", "PartyRuntime")]
