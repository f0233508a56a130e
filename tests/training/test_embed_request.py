"""A party checks the fields of an EmbedRequest (they come from another organisation): a
ProtocolError naming the field, its value and the valid range, never an internal error or a
silently empty batch (issue 37: ``epoch=-5`` was ``INTERNAL ValueError`` over gRPC, ``batch=10**9``
an empty result)."""

from __future__ import annotations

import numpy as np
import pytest

import verticalfs
from verticalfs.exceptions import ProtocolError
from verticalfs.federation import Federation
from verticalfs.training import SplitTrainer, TrainConfig
from verticalfs.transport import Embeddings
from verticalfs.transport.messages import At, EmbedRequest


@pytest.fixture(scope="module")
def trained():
    data = verticalfs.build_data("breast_cancer", parties=2, seed=0)
    fed = Federation.in_process(data)
    trainer = SplitTrainer(fed, "vfl", TrainConfig(epochs=1, batch_size=64, hidden=(8,)), seed=0)
    trainer.setup()
    return fed, trainer


BAD = [
    (EmbedRequest("train", -5, 0, True), r"EmbedRequest\.epoch = -5; valid: 0 <= epoch <= 4294967295"),
    (EmbedRequest("train", 2**40, 0, True), r"EmbedRequest\.epoch = 1099511627776; valid"),
    (EmbedRequest("train", 0, 10**9, True), r"EmbedRequest\.batch = 1000000000; valid: -1 \(the whole split\) or "
                                            r"0 <= batch < 7 \(\d+ rows of 'train' in batches of 64\)"),
    (EmbedRequest("train", 0, 7, False), r"EmbedRequest\.batch = 7; valid: .* 0 <= batch < 7"),
    (EmbedRequest("train", 0, -2, True), r"EmbedRequest\.batch = -2; valid: -1"),
    (EmbedRequest("test", 0, 0, False), r"EmbedRequest\.batch = 0 for split 'test'; only 'train'"),
    (EmbedRequest("holdout", 0, -1, False), r"no split 'holdout'; splits are"),
]


@pytest.mark.parametrize("req,match", BAD, ids=[m[:30] for _, m in BAD])
def test_bad_fields_are_named(trained, req, match):
    fed, trainer = trained
    party = fed.party_names[0]
    with pytest.raises(ProtocolError, match=match) as err:
        fed.proxy(party).request(req, At("train"), expect=Embeddings)
    assert str(err.value).startswith(f"party {party!r}")


def test_valid_requests_still_answer(trained):
    fed, trainer = trained
    party = fed.party_names[0]
    last = trainer.plan.n_batches - 1
    out = fed.proxy(party).request(EmbedRequest("train", 3, last, False), At("eval"), expect=Embeddings)
    assert out.values.shape[0] == len(trainer.plan.rows(3, last)) > 0
    whole = fed.proxy(party).request(EmbedRequest("test", 0, -1, False), At("eval"), expect=Embeddings)
    assert whole.values.shape[0] == trainer.n_samples("test")
    assert np.isfinite(whole.values).all()


def test_the_party_expects_its_gradient_shape(trained):
    """After a training batch the party expects a gradient of that batch's shape: the most values a
    run-length code it receives next may decode to (an all-zero one is 13 bytes whatever its shape)."""
    fed, trainer = trained
    party = fed.party_names[0]
    out = fed.proxy(party).request(EmbedRequest("train", 0, 0, True), At("train"), expect=Embeddings)
    node = fed.local_runtime(party).node
    assert node.max_elements == out.values.size


@pytest.mark.parametrize("method", ["vfl", "sparsevfl-16", "less-vfl"])
def test_a_whole_split_is_evaluated_a_block_of_rows_at_a_time_with_the_same_result(method, monkeypatch):
    """Evaluation of a whole split runs the parties' bottom models and the top model a block of
    ``EVAL_ROWS`` rows at a time (issue 39: a split of millions of rows held all its hidden
    activations at once); the blocks give the one-pass result."""
    import verticalfs.training.split as split

    data = verticalfs.build_data("breast_cancer", parties=2, seed=0)
    params = {"epochs": 2, "batch_size": 64}
    whole = verticalfs.run(method, data, seed=0, params=params)
    calls = []
    forward_rows = split.SplitRole.forward_rows

    def counted(self, X):
        calls.append(len(X))
        return forward_rows(self, X)

    monkeypatch.setattr(split, "EVAL_ROWS", 7)
    monkeypatch.setattr(split.SplitRole, "forward_rows", counted)
    blocks = verticalfs.run(method, data, seed=0, params=params)
    assert calls and max(calls) > 7  # whole splits went through the blocks
    for a, b in zip(whole.history, blocks.history, strict=True):
        for k, v in a.items():
            if isinstance(v, float) and k not in ("seconds",):
                assert b[k] == pytest.approx(v, rel=1e-6, abs=1e-9), (k, a["epoch"])
