"""Issue 50's "also found" items, each against a real party over the real serde: the party's own
saved parts only (MAC under its own secret, private files), no replay of its noise after a
checkpoint load, its own Paillier randomness, and DP it accounts for itself."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
import torch

from tests.attacks.harness import SELECTION, Holder, default_policy, party, table
from tests.attacks.test_split_models import At_report, joined, spec
from verticalfs.configuration import PartyPolicy
from verticalfs.exceptions import ConfigError, PolicyError
from verticalfs.transport.messages import Ack, At, Join, ModelSaved, Persist, Ready, SaveModel


def _saved(tmp_path, policy=None):
    rt = party(tmp_path, policy)
    h = Holder(rt)
    h.align(table()["id"][:300])
    d = rt.data.n_features
    joined(h, spec(hidden=(d,), embedding_dim=d // 2))
    rep = h.ask(SaveModel(directory="m1"), At_report(), expect=ModelSaved)
    return rt, h, rt.model_folder("m1") / rep.file, rep.sha256


def test_saved_parts_are_private_and_carry_the_partys_mac(tmp_path):
    rt, _, path, _ = _saved(tmp_path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    mac = path.with_name(path.name + ".mac")
    assert mac.is_file() and stat.S_IMODE(os.stat(mac).st_mode) == 0o600
    key = tmp_path / "state" / "model.key"
    assert key.is_file() and stat.S_IMODE(os.stat(key).st_mode) == 0o600


def _planted(path):
    """A label holder that can write to the party's model folder replaces the part by a linear model
    of its own (the same format, a valid file) and sends the new file's SHA-256 with OpenModel."""
    from verticalfs.model_files import dump, load, sha256

    saved = load(path, None, "test")
    state = saved["role"]["state"]
    saved["role"]["state"] = {k: torch.zeros_like(v) for k, v in state.items()}
    data = dump({k: v for k, v in saved.items() if k not in ("format", "verticalfs_version")})
    path.write_bytes(data)
    return sha256(data)


@pytest.mark.parametrize("own", [True, False], ids=["default", "old-path"])
def test_a_part_the_party_did_not_save_is_refused(tmp_path, own):
    from verticalfs.deploy.scoring import ModelOpened, OpenModel

    pol = default_policy() if own else default_policy(own_models_only=False)
    rt, h, path, _ = _saved(tmp_path, pol)
    sha = _planted(path)  # the label holder's checksum matches the planted file
    msg = OpenModel(model="m1", method="vfl", sha256=sha)
    if own:
        with pytest.raises(ConfigError, match="opens only model parts it saved itself"):
            h.ask(msg)
    else:
        assert isinstance(h.ask(msg), ModelOpened)  # the old path trusts the label holder's checksum


def test_a_checkpoint_load_does_not_replay_the_partys_noise(tmp_path):
    """FedSDG-FS's gate noise (``original-gate``: plaintext, gates): saved, drawn from, loaded again.
    Under the default policy the generator is fresh after the load (a rewound party does not draw
    the same noise again); the permissive policy restores it exactly (in-process resume)."""
    from verticalfs.methods.fedsdg_fs.messages import FedSDGSpec

    draws = {}
    for name, pol in (("default", default_policy()), ("permissive", PartyPolicy.permissive())):
        rt = party(tmp_path / name, pol)
        rt.checkpoint_dir = tmp_path / name / "ck"
        h = Holder(rt)
        h.align(table()["id"])
        d = rt.data.n_features
        s = FedSDGSpec(hidden=(d,), embedding_dim=d // 2, activation="relu", optimizer="sgd", lr=0.01,
                       weight_decay=0.0, seed=7, batch_size=32, shuffle_seed=0, secure=False)
        assert isinstance(h.ask(Join(method="original-gate", spec=s), expect=Ready), Ready)
        gen = rt.role.model.generator
        h.ask(Persist(action="save", run="r1", tag="e1"), At("checkpoint"), expect=Ack)
        first = torch.randn(8, generator=gen)
        h.ask(Persist(action="load", run="r1", tag="e1"), At("checkpoint"), expect=Ack)
        again = torch.randn(8, generator=rt.role.model.generator)
        draws[name] = bool(torch.equal(first, again))
    assert draws == {"default": False, "permissive": True}


def test_the_partys_paillier_randomness_is_its_own(tmp_path):
    from verticalfs.methods.fedsdg_fs.messages import FedSDGSpec

    got = {}
    for name, pol in (("default", default_policy()), ("permissive", PartyPolicy.permissive())):
        rt = party(tmp_path / name, pol)
        h = Holder(rt)
        h.align(table()["id"])
        d = rt.data.n_features
        s = FedSDGSpec(hidden=(d,), embedding_dim=2, activation="relu", optimizer="sgd", lr=0.01, weight_decay=0.0,
                       seed=7, batch_size=32, shuffle_seed=0, secure=True, interactive=2, key_bits=512,
                       insecure=True, randomness="short", backend="python")
        h.ask(Join(method="fedsdg-fs", spec=s), expect=Ready)
        got[name] = rt.role.crypto.pub.randomness
    assert got == {"default": "full", "permissive": "short"}


# -------------------------------------------------------------------------------- DP
def _icafs_spec(d, noise):
    from verticalfs.methods.icafs.messages import ICAFSSpec

    return ICAFSSpec(hidden=(d,), embedding_dim=d // 2, activation="relu", optimizer="adam", lr=0.003, weight_decay=0.0,
                     seed=3, batch_size=64, shuffle_seed=0, arch="mlp", code_dim=4, feature_dim=4, max_modes=2,
                     dp_noise=noise, dp_clip=1.0)


def test_max_epsilon_refuses_methods_without_dp_and_too_little_noise(tmp_path):
    pytest.importorskip("opacus")
    rt = party(tmp_path, default_policy(max_epsilon=2.0))
    h = Holder(rt)
    h.align(table()["id"])
    d = rt.data.n_features
    with pytest.raises(PolicyError, match=r"without DP-SGD at the party.*max_epsilon = 2.0"):
        joined(h, spec(hidden=(d,), embedding_dim=d // 2))
    with pytest.raises(PolicyError, match=r"without DP-SGD.*max_epsilon"):
        h.ask(Join(method="icafs", spec=_icafs_spec(d, 0.0)))
    with pytest.raises(PolicyError, match=r"one epoch .* already spends epsilon.*max_epsilon = 2.0"):
        h.ask(Join(method="icafs", spec=_icafs_spec(d, 0.3)))
    assert rt.role is None


@pytest.mark.slow  # Opacus and a run of noisy steps
def test_the_partys_accountant_stops_its_noisy_steps(tmp_path):
    """Noise for a few epochs within max_epsilon: the party takes the steps its own RDP accountant
    allows, then refuses the next noisy step, whatever the label holder asks."""
    pytest.importorskip("opacus")
    from verticalfs.transport.messages import Embeddings, EmbedRequest, Gradients

    rt = party(tmp_path, default_policy(max_epsilon=8.0))
    h = Holder(rt)
    h.align(table()["id"])
    d = rt.data.n_features
    h.ask(Join(method="icafs", spec=_icafs_spec(d, 1.5)), expect=Ready)
    allowed = rt.role.dp_steps_left
    per_epoch = rt.role.plan.n_batches
    assert allowed >= per_epoch
    taken = 0
    with pytest.raises(PolicyError, match=r"another noisy step.*max_epsilon = 8.0"):
        for step in range(allowed + 1):
            e, b = divmod(step, per_epoch)
            emb = h.ask(EmbedRequest("train", e, b, True), SELECTION, expect=Embeddings).values
            h.proxy.send(Gradients(np.ones_like(emb) * 1e-3), SELECTION)
            taken += 1
    assert taken == allowed
    from verticalfs.methods.icafs.dp import rdp_epsilon

    assert rdp_epsilon(1.5, rt.role.plan.rate, allowed, 1e-5) <= 8.0 < rdp_epsilon(1.5, rt.role.plan.rate,
                                                                                     allowed + 1, 1e-5)


def test_pca_uploads_no_more_components_than_the_floor(tmp_path):
    """PCA's reduced rows are a party's embedding of sorts: as wide as its features they are the
    centred rows in another basis; the default policy allows at most half."""
    from verticalfs.methods.sparsevfl.khan import ReducedFeatures, ReduceRequest
    from verticalfs.transport.messages import At

    for name, pol, ok in (("default", default_policy(), False), ("permissive", PartyPolicy.permissive(), True)):
        rt = party(tmp_path / name, pol)
        h = Holder(rt)
        h.align(table()["id"])
        h.ask(Join(method="pca", spec=None))
        d = rt.data.n_features
        full = ReduceRequest(kind="pca", n_components=d, seed=0)
        if ok:
            assert h.ask(full, At("train"), expect=ReducedFeatures).dim == d
            continue
        with pytest.raises(PolicyError, match=r"upload 13 reduced components.*max_embedding_fraction = 0.5"):
            h.ask(full, At("train"))
        assert h.ask(ReduceRequest(kind="pca", n_components=d // 2, seed=0), At("train"),
                     expect=ReducedFeatures).dim == d // 2
