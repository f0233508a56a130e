"""Attacks 5 and 6 of issue 50: membership of the party's ids beyond the intersection a policy allows.

Attack 5: PSI over a guessed id range (here every id of the range the party's ids come from, 30
times its rows, in one request): the party's whole id set. Attack 6: ``StageIds`` as a membership
oracle (requests of about 1,000 guessed ids; each reply's ``missing`` names those the party does not
hold), without any PSI.

PSI reveals, by design, the membership of the ids the label holder *claims*; what a party decides
is how many. "Recovers nothing beyond the PSI the policy allowed": the membership the attacker
learns is of ids it claimed in requests the party answered, at most ``psi_ids_per_day`` (here the
default ``"auto"``: 20 times the party's rows) a day, and ``StageIds`` adds none. The kept old
path (a policy of the old limits: 10,000,000 ids a request, no budget; ``StageIds`` without its
check) gives every membership.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.attacks import harness
from tests.attacks.harness import PREDICT, SETUP, SPACE, Holder, default_policy
from verticalfs.exceptions import PolicyError, ProtocolError
from verticalfs.psi import intersect_with

pytest.importorskip("rbcl")

ENGINE = "ristretto255"
#: a smaller party than the other attacks' (every PSI here costs two scalar multiplications an id)
N = 120


def table():
    return harness.table(N)


def party(tmp, policy=None):
    return harness.party(tmp, policy, frame=table())


def _guess() -> np.ndarray:
    return np.array([f"{i:06d}" for i in range(SPACE * N)])


def _old_limits():
    """The limits before issue 50: one request of up to 10,000,000 ids, no budget per session or day."""
    return default_policy(max_psi_ids=10_000_000, psi_ids_per_session=2**62, psi_ids_per_day=2**62)


def _members(h: Holder, ids: np.ndarray) -> set[str]:
    return set(ids[intersect_with(h.proxy, list(ids), engine=ENGINE)].tolist())


def test_old_path_psi_over_a_guessed_range_gives_the_whole_id_set(tmp_path):
    rt = party(tmp_path, _old_limits())
    got = _members(Holder(rt), _guess())
    assert got == set(table()["id"])


def test_default_policy_psi_gives_at_most_the_daily_budget(tmp_path):
    rt = party(tmp_path)
    h = Holder(rt)
    guess = _guess()
    with pytest.raises(PolicyError, match=r"request with 3600 ids.*max_psi_ids = \"auto\" \(10 x its 120 rows"):
        intersect_with(h.proxy, list(guess), engine=ENGINE)
    # the most a guessing label holder gets: requests of 10 x rows, session after session
    learned: set[str] = set()
    claimed = 0
    refused = []
    for start in range(0, len(guess), 10 * N):
        part = guess[start:start + 10 * N]
        try:
            learned |= _members(h, part)
            claimed += len(part)
        except PolicyError as exc:
            refused.append(str(exc))
            h = Holder(party(tmp_path))  # a new session (and a restarted party: the day's budget is on disk)
            try:
                learned |= _members(h, part)
                claimed += len(part)
            except PolicyError as exc2:
                refused.append(str(exc2))
    assert any("psi_ids_per_session" in r for r in refused) and any("psi_ids_per_day" in r for r in refused)
    assert claimed <= 20 * N
    truth = set(table()["id"])
    assert learned <= truth and len(learned) < len(truth)
    # nothing beyond the ids claimed: the members found are exactly the party's ids among them
    assert learned == truth & set(guess[:claimed].tolist())


def _open_model(h: Holder, rt, run_ids):
    from tests.attacks.test_split_models import At_report, joined, spec
    from verticalfs.deploy.scoring import ModelOpened, OpenModel
    from verticalfs.transport.messages import ModelSaved, SaveModel

    h.align(run_ids)
    d = rt.data.n_features
    joined(h, spec(hidden=(d,), embedding_dim=d // 2))
    saved = h.ask(SaveModel(directory="m1"), At_report(), expect=ModelSaved)
    h.ask(OpenModel(model="m1", method="vfl", sha256=saved.sha256), SETUP, expect=ModelOpened)


#: ids per StageIds (the issue's attack: ~1,010 of a 33,300-id range; here the same share of the range)
STAGE = 300


def _oracle(h: Holder, guess: np.ndarray) -> tuple[set[str], int]:
    """StageIds of ~1,000 guessed ids at a time; the members its replies name, and requests refused."""
    from verticalfs.deploy.scoring import IdsStaged, StageIds

    found, refused = set(), 0
    for k, start in enumerate(range(0, len(guess), STAGE)):
        part = guess[start:start + STAGE]
        try:
            rep = h.ask(StageIds(model="m1", ids=list(part), split=f"s{k}"), PREDICT, expect=IdsStaged)
        except (PolicyError, ProtocolError):
            refused += 1
            continue
        held = np.ones(len(part), dtype=bool)
        held[np.asarray(rep.missing, dtype=np.int64)] = False
        found |= set(part[held].tolist())
    return found, refused


def test_old_path_stage_ids_is_a_membership_oracle(tmp_path, monkeypatch):
    from verticalfs.deploy import scoring

    monkeypatch.setattr(scoring, "check_stage", lambda *a, **k: None)  # StageIds before issue 50
    rt = party(tmp_path, _old_limits())
    h = Holder(rt)
    _open_model(h, rt, table()["id"][:90])
    found, refused = _oracle(h, _guess())
    assert refused == 0 and found == set(table()["id"])


def test_default_policy_stage_ids_reveals_nothing_beyond_psi(tmp_path):
    from verticalfs.deploy.predict import _PhaseProxy

    rt = party(tmp_path)
    h = Holder(rt)
    _open_model(h, rt, table()["id"][:90])
    found, refused = _oracle(h, _guess())  # no scoring PSI: every request refused
    assert found == set() and refused == len(range(0, SPACE * N, STAGE))
    # after a scoring PSI over ids of its choice, within the budget, StageIds names only those ids: a
    # request with any other id is refused whole (and counted), so it adds no membership
    claim = _guess()[:4 * N]
    held = claim[intersect_with(_PhaseProxy(h.proxy), list(claim), engine=ENGINE)]
    found, refused = _oracle(h, _guess())
    assert found == set() and refused == len(range(0, SPACE * N, STAGE))
    found, refused = _oracle(h, held)
    assert found == set(held.tolist()) and refused == 0
