"""Attacks 1 and 7 of issue 50: a label holder that chooses the party's bottom model reads its raw
columns out of the embeddings.

Attack 1: ``Join(vfl)`` with a one-layer linear bottom model (``hidden=()``, ``embedding_dim`` =
the party's input width) and a seed it chose; it asks for the training split's embeddings,
rebuilds the weights from the seed and solves ``H = X W^T + b`` for ``X``.

Attack 7: the same model saved (``SaveModel``), opened for scoring (``OpenModel``), rows of ids
outside the run's intersection staged (``StageIds``) and embedded (``EmbedRequest``, phase
``predict``): those rows' raw features.

"Recovers nothing": the attacker's reconstruction of the party's prepared columns is worse than
predicting each column's mean (mean R^2 over the columns below 0, :func:`~tests.attacks.harness.r2`),
where the kept old path (the permissive policy of in-process runs, which takes the label holder's
seed and any shape, exactly as every party did before) gives every column with R^2 > 0.999.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.attacks.harness import PREDICT, SELECTION, Holder, party, r2, table
from verticalfs.configuration import PartyPolicy
from verticalfs.exceptions import PolicyError, ProtocolError
from verticalfs.nn.models import MLP, init_weights, seeded
from verticalfs.training.split import SplitSpec
from verticalfs.transport.messages import Embeddings, EmbedRequest, Join, ModelSaved, Ready, SaveModel

SEED = 1234  # the attacker's


def spec(hidden=(), embedding_dim=8, activation="relu", lr=0.01, batch_size=32, seed=SEED) -> SplitSpec:
    return SplitSpec(hidden=tuple(hidden), embedding_dim=int(embedding_dim), activation=activation, optimizer="sgd",
                     lr=lr, weight_decay=0.0, seed=seed, batch_size=batch_size, shuffle_seed=0)


def attacker_model(s: SplitSpec, d: int) -> torch.nn.Module:
    """The bottom model the attacker expects from the seed it sent (the party's build, replayed)."""
    return seeded(int(s.seed), lambda: init_weights(MLP(d, tuple(s.hidden), int(s.embedding_dim), s.activation,
                                                        out_activation="none", out_bias=True), "torch"))


def solve(s: SplitSpec, d: int, H: np.ndarray) -> np.ndarray:
    """The attacker's reconstruction of ``X`` from embeddings ``H``: the least-squares solve for a
    linear model; for a model with hidden layers, gradient descent on ``X`` in [0, 1] (min-max
    scaled columns) through the model it expects."""
    m = attacker_model(s, d)
    if not s.hidden:
        W = m.output_layer.weight.detach().double().numpy()
        b = m.output_layer.bias.detach().double().numpy()
        return np.linalg.lstsq(W, (H - b).T, rcond=None)[0].T
    Ht = torch.from_numpy(np.asarray(H, dtype=np.float32))
    x = torch.full((len(Ht), d), 0.5, requires_grad=True)
    opt = torch.optim.Adam([x], lr=0.05)
    for _ in range(400):
        opt.zero_grad()
        loss = ((m(x.clamp(0, 1)) - Ht) ** 2).sum()
        loss.backward()
        opt.step()
    return x.detach().clamp(0, 1).numpy()


def joined(h: Holder, s: SplitSpec) -> Ready:
    return h.ask(Join(method="vfl", spec=s), expect=Ready)


def train_embeddings(h: Holder) -> np.ndarray:
    return h.ask(EmbedRequest("train", 0, -1, False), SELECTION, expect=Embeddings).values


# ----------------------------------------------------------------------------------------- attack 1
def test_old_path_linear_model_with_a_chosen_seed_gives_every_column(tmp_path):
    rt = party(tmp_path, PartyPolicy.permissive())
    h = Holder(rt)
    h.align(table()["id"])
    d = rt.data.n_features
    s = spec(embedding_dim=d)
    joined(h, s)
    X = solve(s, d, train_embeddings(h))
    truth = rt.data.X("train").numpy()
    assert np.abs(X - truth).max() < 1e-4
    assert r2(truth, X).min() > 0.999


@pytest.mark.parametrize("bad,rule", [
    ({"hidden": ()}, "min_hidden_layers"),
    ({"hidden": (16,), "embedding_dim": 13}, "max_embedding_fraction"),
    ({"hidden": (16,), "embedding_dim": 4, "lr": 50.0}, "max_lr"),
    ({"hidden": (16,), "embedding_dim": 4, "batch_size": 1}, "min_batch_size"),
])
def test_default_policy_refuses_a_model_below_the_floors(tmp_path, bad, rule):
    rt = party(tmp_path)
    h = Holder(rt)
    h.align(table()["id"])
    with pytest.raises(PolicyError) as e:
        joined(h, spec(**bad))
    text = str(e.value)
    assert text.startswith("party 'telecom' refuses") and rule in text and "\n" not in text, text
    assert rt.role is None


def test_default_policy_allowed_model_with_a_chosen_seed_gives_nothing(tmp_path):
    """The most the floors allow (one hidden layer, half the input width) with the attacker's
    seed: the party draws its own initialisation, so the model the attacker inverts is not the
    party's."""
    rt = party(tmp_path)
    h = Holder(rt)
    h.align(table()["id"])
    d = rt.data.n_features
    s = spec(hidden=(d,), embedding_dim=d // 2)
    assert joined(h, s).embedding_dim == d // 2
    X = solve(s, d, train_embeddings(h))
    fit = r2(rt.data.X("train").numpy(), X)
    assert fit.mean() < 0, fit
    # the party's weights are not the ones the attacker's seed gives
    mine = attacker_model(s, d).state_dict()
    theirs = rt.role.model.state_dict()
    assert not any(torch.equal(mine[k], theirs[k]) for k in mine)


def test_old_path_seeds_reproduce_the_label_holders_model(tmp_path):
    """The permissive policy (in-process runs) keeps today's seeded results: the party's weights are
    exactly the ones the spec's seed gives."""
    rt = party(tmp_path, PartyPolicy.permissive())
    h = Holder(rt)
    h.align(table()["id"])
    d = rt.data.n_features
    s = spec(hidden=(d,), embedding_dim=d // 2)
    joined(h, s)
    mine = attacker_model(s, d).state_dict()
    assert all(torch.equal(mine[k], v) for k, v in rt.role.model.state_dict().items())


# ----------------------------------------------------------------------------------------- attack 7
def _outside(n_run: int = 300):
    """The run's intersection (the first ``n_run`` ids of the party) and ids the party holds outside it."""
    ids = table()["id"].to_numpy()
    return ids[:n_run], ids[n_run:]


def _score_rows(h: Holder, s: SplitSpec, run_ids, others, psi: bool = False):
    """Train nothing, save, open, stage ``others``, embed them: the attacker's embeddings of rows
    outside the run (``psi``: after a scoring PSI over exactly those ids, within the budget)."""
    from verticalfs.deploy.scoring import IdsStaged, ModelOpened, OpenModel, StageIds

    h.align(run_ids)
    joined(h, s)
    saved = h.ask(SaveModel(directory="m1"), At_report(), expect=ModelSaved)
    h.ask(OpenModel(model="m1", method="vfl", sha256=saved.sha256), expect=ModelOpened)
    if psi:
        from verticalfs.deploy.predict import _PhaseProxy
        from verticalfs.psi import intersect_with

        held = intersect_with(_PhaseProxy(h.proxy), list(others))
        assert len(held) == len(others)
    rep = h.ask(StageIds(model="m1", ids=list(others), split="s1"), PREDICT, expect=IdsStaged)
    assert len(rep.missing) == 0
    return h.ask(EmbedRequest("s1", 0, -1, False), PREDICT, expect=Embeddings).values


def At_report():
    from verticalfs.transport.messages import At

    return At("report")


def _truth(rt, ids) -> np.ndarray:
    """The party's prepared rows of ``ids``, as its saved preprocessing makes them (the test's view)."""
    sc = next(iter(rt.scoring.models.values()))
    pos = sc.file.positions(np.asarray(ids, dtype=str))
    return np.asarray(sc.X)[pos]


def test_old_path_saved_linear_model_gives_rows_outside_the_intersection(tmp_path, monkeypatch):
    from verticalfs.deploy import scoring

    monkeypatch.setattr(scoring, "check_stage", lambda *a, **k: None, raising=False)  # the old StageIds
    rt = party(tmp_path, PartyPolicy.permissive())
    h = Holder(rt)
    run_ids, others = _outside()
    d = len(rt.data.feature_names) if rt.data.feature_names else 13
    s = spec(embedding_dim=13)
    H = _score_rows(h, s, run_ids, others)
    X = solve(s, d, H)
    truth = _truth(rt, others)
    assert r2(truth, X).min() > 0.999
    hours = 0  # hours_per_week, min-max scaled by the run's training rows: exact to the hour
    lo, hi = table()["hours_per_week"].iloc[:int(0.7 * 300)].agg(["min", "max"])
    got = np.rint(X[:, hours] * (hi - lo) + lo)
    want = table().set_index("id").loc[list(others), "hours_per_week"].to_numpy()
    assert np.array_equal(got, want)


def test_default_policy_stages_no_id_without_a_scoring_psi(tmp_path):
    from verticalfs.deploy.scoring import ModelOpened, OpenModel, StageIds

    rt = party(tmp_path)
    h = Holder(rt)
    run_ids, others = _outside()
    h.align(run_ids)
    d = rt.data.n_features
    joined(h, spec(hidden=(d,), embedding_dim=d // 2))
    saved = h.ask(SaveModel(directory="m1"), At_report(), expect=ModelSaved)
    h.ask(OpenModel(model="m1", method="vfl", sha256=saved.sha256), expect=ModelOpened)
    with pytest.raises((PolicyError, ProtocolError), match="scoring PSI"):
        h.ask(StageIds(model="m1", ids=list(others), split="s1"), PREDICT)


def test_default_policy_saved_model_gives_nothing_of_rows_outside_the_intersection(tmp_path):
    rt = party(tmp_path)
    h = Holder(rt)
    run_ids, others = _outside()
    h.align(run_ids)
    d = rt.data.n_features
    with pytest.raises(PolicyError, match="min_hidden_layers"):
        joined(h, spec(embedding_dim=d))
    s = spec(hidden=(d,), embedding_dim=d // 2)
    rt2 = party(tmp_path / "b")
    H = _score_rows(Holder(rt2), s, run_ids, others, psi=True)
    fit = r2(_truth(rt2, others), solve(s, d, H))
    assert fit.mean() < 0, fit
