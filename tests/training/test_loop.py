"""The one epoch loop (SplitTrainer.train_epoch): every method runs it, its loss check holds whatever
step a method runs, its hooks are called, and limit_batches trains on the first batches only."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import verticalfs
from verticalfs.exceptions import ConfigError
from verticalfs.federation import Federation
from verticalfs.methods.registry import get
from verticalfs.training import SplitTrainer, TrainConfig

SRC = Path(verticalfs.__file__).parent


@pytest.fixture(scope="module")
def bc():
    return verticalfs.build_data("breast_cancer", parties=2, seed=0)


def test_one_definition_of_train_epoch():
    """No method copies the loop: ``train_epoch`` is defined once in the library."""
    where = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "train_epoch":
                where.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert len(where) == 1 and where[0].startswith("training/split.py"), where


@pytest.mark.parametrize("method", ["compfs", "icafs", "vfl"])
def test_diverging_loss_raises(bc, method):
    """CompFS and ICAFS replace the step; the loop still stops a run whose loss became NaN/inf."""
    params = {**get(method).test_params, "lr": 1e30}
    with pytest.raises(ConfigError, match=rf"{method}: the training loss became .* in epoch 1, batch \d+; lower"):
        verticalfs.run(method, bc, seed=0, params=params)


class NaNStep(SplitTrainer):
    """A step that forgets to check its loss."""

    def train_step(self, at, rows, y):
        super().train_step(at, rows, y)
        return float("nan") if at.step == 1 else 0.5


def test_a_replaced_step_cannot_skip_the_check(bc):
    tr = NaNStep(Federation.in_process(bc), "vfl", TrainConfig(epochs=1, batch_size=64, hidden=(8,)), seed=0)
    tr.setup()
    with pytest.raises(ConfigError, match=r"became nan in epoch 1, batch 2"):
        tr.train_epoch()


class Hooked(SplitTrainer):
    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        self.calls: list = []

    def on_epoch_begin(self, phase):
        self.calls.append(("begin", phase, self.epoch))

    def train_step(self, at, rows, y):
        self.calls.append(("step", at.phase, at.round, at.step, len(rows), bool((y == self.y["train"][rows]).all())))
        return super().train_step(at, rows, y)

    def on_epoch_end(self, phase, loss):
        self.calls.append(("end", phase, loss))


def test_hooks_and_limit_batches(bc):
    """limit_batches=2: each epoch trains on the plan's first two batches (two EmbedRequests per party
    and epoch), between on_epoch_begin and on_epoch_end; the steps get the rows' own targets."""
    fed = Federation.in_process(bc)
    tr = Hooked(fed, "vfl", TrainConfig(epochs=2, batch_size=32, hidden=(8,), limit_batches=2), seed=0)
    tr.setup()
    assert tr.plan.n_batches > 2
    hist = tr.fit()
    steps = [c for c in tr.calls if c[0] == "step"]
    assert [c[2:4] for c in steps] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(c[4] == len(tr.plan.rows(c[2], c[3])) and c[5] for c in steps)
    assert [c[0] for c in tr.calls] == ["begin", "step", "step", "end"] * 2
    ends = [c for c in tr.calls if c[0] == "end"]
    assert [e[2] for e in ends] == [h["train_loss"] for h in hist]
    reqs = [r for r in fed.ledger.records() if r.phase == "train" and r.kind.endswith("EmbedRequest")]
    assert len(reqs) == 2 * 2 * len(bc.parties)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_limit_batches_is_checked(bad):
    with pytest.raises(ConfigError, match="limit_batches must be a whole number >= 1"):
        TrainConfig(limit_batches=bad)


def test_limit_batches_as_a_method_parameter(bc):
    """A method's params carry it (from the CLI as a string too): a quick run of few batches."""
    full = verticalfs.run("vfl", bc, seed=0, params={"epochs": 1, "batch_size": 32, "hidden": (8,)})
    quick = verticalfs.run("vfl", bc, seed=0, params={"epochs": 1, "batch_size": 32, "hidden": (8,),
                                                      "limit_batches": "3"})
    n = lambda r: sum(1 for x in r.federation.ledger.records() if x.phase == "train")  # noqa: E731
    per_batch = 3 * len(bc.parties)  # request, embeddings and gradients per party
    assert n(quick) == 3 * per_batch < n(full)
    assert quick.history[0]["train_loss"] != full.history[0]["train_loss"]


def test_replace_top_drops_a_party(bc):
    """replace_top: the party left out is asked for nothing more; the top model is the one given."""
    import torch

    fed = Federation.in_process(bc)
    tr = SplitTrainer(fed, "vfl", TrainConfig(epochs=1, batch_size=64, hidden=(8,)), seed=0)
    tr.setup()
    keep, gone = bc.party_names[0], bc.party_names[1]
    top = torch.nn.Linear(tr.embedding_dims[keep], tr.n_outputs)
    with pytest.raises(ConfigError, match="not in the run"):
        tr.replace_top(top, {"nobody": 3})
    tr.replace_top(top, {keep: tr.embedding_dims[keep]})
    assert tr.top is top and tr.parties == [keep]
    assert {id(p) for g in tr.optimizer.param_groups for p in g["params"]} == {id(p) for p in top.parameters()}
    before = len(list(fed.ledger.records()))
    tr.train_epoch()
    new = list(fed.ledger.records())[before:]
    assert new and all(gone not in (r.sender, r.receiver) for r in new)
    assert np.isfinite(tr.evaluate(["test"])["log_loss"])
