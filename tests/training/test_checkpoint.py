"""End-of-epoch checkpoints and resume, in-process (the networked case is in tests/deploy)."""

from __future__ import annotations

import json
import os

import pytest

import verticalfs
from verticalfs.exceptions import ConfigError, VerticalFSError
from verticalfs.training import split


@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=3, noise=0.5, seed=0)


def _interrupted(data, method, params, folder, after: int) -> None:
    """Run until ``after`` epochs are recorded, then stop as a crash would (no clean-up)."""
    orig = split.SplitTrainer.record
    seen = {"n": 0}

    def record(self, *a, **k):
        entry = orig(self, *a, **k)
        seen["n"] += 1
        if seen["n"] == after:
            raise KeyboardInterrupt
        return entry

    split.SplitTrainer.record = record
    try:
        with pytest.raises(KeyboardInterrupt):
            verticalfs.run(method, data, seed=0, params=params, checkpoint_dir=folder)
    finally:
        split.SplitTrainer.record = orig


@pytest.mark.parametrize("method,params,after", [
    ("vfl", {"epochs": 4, "batch_size": 64, "hidden": (16, 8)}, 2),
    ("sparsevfl-16", {"epochs": 3, "batch_size": 64}, 2),
    # interrupted in its training stage: the pre-training is recomputed, the selection repeated
    ("less-vfl", {"pretrain_epochs": 2, "epochs": 3, "batch_size": 64, "hidden": (16, 8)}, 4),
    # state outside modules: a party's gate logits are a Parameter of the role itself (its optimiser's)
    ("sefs", {"epochs": 3, "ss_epochs": 2, "batch_size": 64, "hidden": (16, 8), "lam": 0.01}, 2),
])
def test_resume_ends_as_uninterrupted(data, tmp_path, method, params, after, capsys):
    full = verticalfs.run(method, data, seed=0, params=params)
    _interrupted(data, method, params, tmp_path, after)
    (latest_file,) = tmp_path.glob("*/latest.json")  # the run's own folder: <run id>-<session>
    latest = json.loads(latest_file.read_text())
    assert latest["epochs"] >= 1 and latest_file.parent.name.startswith(latest["run"] + "-")
    # a newer, half-written party file (a crash while saving) is never loaded: latest.json names the last
    # checkpoint that every side finished
    party_dir = next((tmp_path / "parties").iterdir()) / latest_file.parent.name
    (party_dir / "s9-e99.pt").write_bytes(b"\x80half")
    capsys.readouterr()
    res = verticalfs.run(method, data, seed=0, params=params, checkpoint_dir=tmp_path, resume=True)
    # the resume says where it continues from
    assert f"after epoch {latest['epochs']}" in capsys.readouterr().err
    assert res.info["resumed_from"]["epoch"] == latest["epochs"]
    assert res.metrics == full.metrics
    assert res.selection["n_kept"] == full.selection["n_kept"]
    assert [h.get("roc_auc") for h in res.history] == [h.get("roc_auc") for h in full.history]
    phases = {k: v for k, v in res.communication["by_phase"].items() if k != "checkpoint"}
    assert phases == full.communication["by_phase"]  # the ledger as if never interrupted
    assert not latest_file.exists()
    # a completed run leaves no checkpoint behind, at the label holder or at any party
    assert not any(f.is_file() for f in tmp_path.rglob("*")), sorted(tmp_path.rglob("*"))


def test_resume_refuses_another_run(data, tmp_path):
    params = {"epochs": 3, "batch_size": 64, "hidden": (16, 8)}
    _interrupted(data, "vfl", params, tmp_path, 2)
    with pytest.raises(ConfigError, match="are of other runs"):
        verticalfs.run("vfl", data, seed=1, params=params, checkpoint_dir=tmp_path, resume=True)
    with pytest.raises(ConfigError, match="nothing to resume"):
        verticalfs.run("vfl", data, seed=0, params=params, checkpoint_dir=tmp_path / "empty", resume=True)


def test_runs_sharing_a_folder_keep_their_checkpoints_apart(data, tmp_path):
    """Two runs with one checkpoint folder (the same options even): each has its own latest.json, a
    run that completes clears only its own, and the interrupted one still resumes to the metrics of
    an uninterrupted run."""
    from verticalfs.training.checkpoint import Checkpointer

    params = {"epochs": 3, "batch_size": 64, "hidden": (16, 8)}
    full = verticalfs.run("vfl", data, seed=0, params=params)
    _interrupted(data, "vfl", params, tmp_path, 2)
    (mine,) = tmp_path.glob("*/latest.json")
    other = verticalfs.run("vfl", data, seed=0, params=params, checkpoint_dir=tmp_path)  # a second run completes
    assert other.metrics == full.metrics and list(tmp_path.glob("*/latest.json")) == [mine]
    # a run still going (its folder locked) is never taken by a resume
    rid = json.loads(mine.read_text())["run"]
    going = Checkpointer(tmp_path, rid, session="going")
    (tmp_path / going.key / "latest.json").write_text(mine.read_text())
    os.utime(tmp_path / going.key / "latest.json", (mine.stat().st_mtime + 60,) * 2)  # newer than the interrupted
    res = verticalfs.run("vfl", data, seed=0, params=params, checkpoint_dir=tmp_path, resume=True)
    assert res.metrics == full.metrics and not mine.exists()
    assert (tmp_path / going.key / "latest.json").exists()  # the other run's folder is not touched
    going.release()


# ------------------------------------------------------------------ no key and no code in a checkpoint
SECURE = {"epochs": 2, "batch_size": 64, "hidden": (16,), "embedding_dim": 4, "key_bits": 512, "insecure": True,
          "secure": True, "prune": False, "lam": 0.0}


def _pickle_globals(path) -> set[str]:
    """Every class or function a torch checkpoint's pickle names (GLOBAL / STACK_GLOBAL)."""
    import pickletools
    import zipfile

    with zipfile.ZipFile(path) as z:
        pkl = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
    names, strings = set(), []
    for op, arg, _ in pickletools.genops(pkl):
        if op.name == "GLOBAL":
            names.add(arg.replace(" ", "."))
        elif op.name == "STACK_GLOBAL":
            names.add(".".join(strings[-2:]))
        if isinstance(arg, str):
            strings.append(arg)
    return names


def test_secure_checkpoint_holds_no_pickled_key_and_resumes(tmp_path):
    import stat

    import torch

    data = verticalfs.build_data("wine", parties=2, seed=0)
    full = verticalfs.run("fedsdg-fs", data, seed=0, params=SECURE)
    _interrupted(data, "fedsdg-fs", SECURE, tmp_path, 2)
    pts = sorted(tmp_path.rglob("*.pt"))
    key_files = sorted(tmp_path.rglob("*.keys.json"))
    assert len(key_files) == 2 and len(pts) == 3  # one key file per party; the parties' and the label holder's
    for f in pts + key_files:
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
        assert stat.S_IMODE(f.parent.stat().st_mode) == 0o700, f.parent
    secrets = []
    for kf in key_files:
        (k,) = json.loads(kf.read_text())["paillier_private_keys"].values()
        assert int(k["p"]) * int(k["q"]) == int(k["n"]) and int(k["n"]).bit_length() >= 500
        for x in (int(k["p"]), int(k["q"])):
            size = (x.bit_length() + 7) // 8
            secrets += [x.to_bytes(size, "big"), x.to_bytes(size, "little"), str(x).encode(), hex(x)[2:].encode()]
    for f in pts:
        raw = f.read_bytes()
        assert not [s for s in secrets if s in raw], f"a private prime is in {f}"
        assert b"PrivateKey" not in raw and b"crypto.keys" not in raw
        # the pickle names torch's tensor rebuilders and nothing else: no class of ours, no key
        assert {g.split(".")[0] for g in _pickle_globals(f)} <= {"torch", "collections"}, _pickle_globals(f)
        torch.load(f, weights_only=True)
    # the label holder's checkpoint holds the parties' public keys: the ones of the keys saved beside
    n_saved = {json.loads(kf.read_text())["paillier_private_keys"]["k0"]["n"] for kf in key_files}
    holder = torch.load(next(p for p in pts if "parties" not in p.parts), weights_only=True)
    assert {s["attrs"]["pub"]["n"] for s in holder["trainer"]["server"].values()} == n_saved
    # a key file others can read is refused, with the fix
    key_files[1].chmod(0o644)
    with pytest.raises(VerticalFSError, match=r"key file .*accessible to other users \(mode 0644\).*chmod 600"):
        verticalfs.run("fedsdg-fs", data, seed=0, params=SECURE, checkpoint_dir=tmp_path, resume=True)
    key_files[1].chmod(0o600)
    res = verticalfs.run("fedsdg-fs", data, seed=0, params=SECURE, checkpoint_dir=tmp_path, resume=True)
    # secure training computes the plaintext model (the parties' noise cancels): the resumed run, with the
    # restored keys and noise, ends where the uninterrupted one did
    assert res.metrics == pytest.approx(full.metrics, abs=1e-6)
    assert [h.get("train_loss") for h in res.history] == pytest.approx([h.get("train_loss") for h in full.history],
                                                                        abs=1e-6)


class _Planted:
    """An object whose unpickling would run code (creates a file)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_a_checkpoint_with_code_is_refused_without_running_it(data, tmp_path):
    import torch

    params = {"epochs": 3, "batch_size": 64, "hidden": (16, 8)}
    _interrupted(data, "vfl", params, tmp_path, 2)
    (latest_file,) = tmp_path.glob("*/latest.json")
    latest = json.loads(latest_file.read_text())
    target = latest_file.parent / f"{latest['tag']}.pt"
    marker = tmp_path / "ran"
    torch.save({"trainer": _Planted(marker)}, target)
    with pytest.raises(ConfigError, match="not a verticalfs checkpoint"):
        verticalfs.run("vfl", data, seed=0, params=params, checkpoint_dir=tmp_path, resume=True)
    assert not marker.exists()


def test_state_round_trip_as_plain_data():
    """What roles hold, through the plain-data form and back into a fresh run's objects: a
    parametrised module whose input was sliced, a parameter outside any module that an optimiser
    steps, NumPy scalars in lists (ICAFS's mixtures hold them), generators, a Paillier key pair."""
    import io

    import numpy as np
    import torch
    from torch.nn.utils import parametrizations

    from verticalfs.crypto.keys import generate_keypair
    from verticalfs.training import state

    class Holder:
        def __init__(self, d):
            torch.manual_seed(0)
            self.net = parametrizations.weight_norm(torch.nn.Linear(d, 2))
            self.logits = torch.nn.Parameter(torch.zeros(d))
            self.opt = torch.optim.Adam([self.logits, *self.net.parameters()], lr=0.1)
            self.gen, self.rng = torch.Generator().manual_seed(1), np.random.default_rng(2)
            self.scores = [np.float64(0.5), np.int64(3), np.str_("a")]
            self.arr = np.arange(d, dtype=np.float32)
            self.pub, self.priv = generate_keypair(512, insecure=True)

    a = Holder(4)
    a.net.parametrizations.weight.original0.data = torch.ones(2, 1) * 3
    (a.logits.sum() + a.net(torch.ones(1, 4)).sum()).backward()
    a.opt.step()
    a.logits = torch.nn.Parameter(a.logits.detach()[:3].clone())  # an input dropped
    a.opt = torch.optim.Adam([a.logits, *a.net.parameters()], lr=0.1)
    a.gen.manual_seed(5)
    a.rng.normal(size=3)
    tree, keys = state.encode(vars(a))
    buf = io.BytesIO()
    torch.save(tree, buf)
    assert b"crypto" not in buf.getvalue() and list(keys) == ["k0"]
    back = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
    keys = state.keys_from_json(state.keys_to_json(keys), "keys")
    b = Holder(4)
    logits_obj = b.logits
    for k, v in back.items():
        setattr(b, k, state.restore_into(getattr(b, k, None), v, keys, k))
    assert b.logits is logits_obj and b.logits.shape == (3,) and torch.equal(b.logits, a.logits)
    for x, y in zip(b.net.state_dict().values(), a.net.state_dict().values(), strict=True):
        assert torch.equal(x, y)
    assert [type(x) for x in b.scores] == [np.float64, np.int64, np.str_] and b.scores == a.scores
    assert b.arr.dtype == np.float32 and np.array_equal(b.arr, a.arr)
    assert torch.equal(b.gen.get_state(), a.gen.get_state())
    assert b.rng.normal() == a.rng.normal()
    assert (b.priv.p, b.priv.q) == (a.priv.p, a.priv.q) and b.pub is b.priv.public_key and b.pub.n == a.pub.n
    assert b.opt.state_dict()["param_groups"] == a.opt.state_dict()["param_groups"]
