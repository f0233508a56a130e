"""A party's policy, checked by its runtime before any work (in-process; over gRPC: tests/deploy/test_policy.py).

Each refusal is one :class:`PolicyError` line naming the party, the rule (with its value) and the
key to change; a permitted request goes through (so each test shows the rule, not a broken
handler, is what refuses).
"""

from __future__ import annotations

import numpy as np
import pytest

from verticalfs.configuration import DeploymentFile, PartyPolicy, read_policy, validate
from verticalfs.exceptions import ConfigError, PolicyError
from verticalfs.methods import registry
from verticalfs.methods.fedsdg_fs.messages import FedSDGSpec, GiniLabels, PlainGiniLabels
from verticalfs.methods.filter import Columns, GatherColumns
from verticalfs.party import LocalData, LocalProxy, PartyRuntime
from verticalfs.transport.messages import Ack, At, Join, ModelSaved, SaveModel

AT = At("setup")


def _runtime(**policy) -> PartyRuntime:
    rng = np.random.default_rng(0)
    data = LocalData("telecom", ["a", "b", "c"], {"train": rng.random((40, 3)), "val": rng.random((5, 3)),
                                                  "test": rng.random((5, 3))})
    return PartyRuntime(data, role_for=registry.party_roles(), ids=[f"c{i}" for i in range(40)],
                        policy=PartyPolicy(**policy))


def _spec(**kw) -> FedSDGSpec:
    # within the default policy's floors (issue 50): an embedding of at most half the 3 inputs, batches of 16
    return FedSDGSpec(hidden=(4,), embedding_dim=1, activation="relu", optimizer="sgd", lr=0.1, weight_decay=0.0,
                      seed=0, batch_size=16, shuffle_seed=0, **kw)


def _refused(rt: PartyRuntime, msg, *parts: str) -> str:
    with pytest.raises(PolicyError) as e:
        LocalProxy(rt).request(msg, AT)
    text = str(e.value)
    assert "\n" not in text and text.startswith("party 'telecom' refuses"), text
    assert "[parties.telecom.policy]" in text, text
    for p in parts:
        assert p in text, text
    return text


def test_in_process_runtimes_allow_everything():
    rt = PartyRuntime(LocalData("p", ["a"], {"train": np.zeros((3, 1))}))
    assert rt.policy == PartyPolicy.permissive()
    assert rt.policy.release_columns and rt.policy.min_key_bits == 0 and not rt.policy.require_secure


def test_methods_outside_the_list_are_refused():
    rt = _runtime(methods=["vfl"])
    _refused(rt, Join(method="feast", spec=None), "join method 'feast'", 'methods = ["vfl"]')
    assert rt.role is None


def test_raw_columns_only_with_release_columns():
    rt = _runtime()
    _refused(rt, Join(method="raw", spec=None), "release_columns = false")
    assert rt.role is None  # refused at Join: no role built
    assert isinstance(LocalProxy(rt).request(Join(method="feast", spec=None), AT), Ack)  # feast selects
    gather = GatherColumns(split="train", indices=np.array([0, 2]))
    _refused(rt, gather, "send raw columns", "(GatherColumns of 'feast')", "release_columns = false")
    rt = _runtime(release_columns=True)
    LocalProxy(rt).request(Join(method="feast", spec=None), AT)
    assert LocalProxy(rt).request(gather, AT, expect=Columns).values.shape == (40, 2)


def test_labels_only_with_accept_labels():
    rt = _runtime(accept_labels=False)
    for method in ("feast", "mi"):
        _refused(rt, Join(method=method, spec=None), "receive the labels in the clear", "accept_labels = false")
    # ms-gini joins (it may run encrypted), but its plaintext labels are refused
    rt = _runtime(accept_labels=False, require_secure=False)
    LocalProxy(rt).request(Join(method="ms-gini", spec=None), AT)
    _refused(rt, PlainGiniLabels(labels=np.zeros(40, dtype=np.int64), n_classes=2, n_bins=4), "accept_labels")


def test_the_label_holder_cannot_lower_key_size_or_switch_secure_off():
    rt = _runtime()
    _refused(rt, Join(method="fedsdg-fs", spec=_spec(secure=False)), "require_secure = true", "set it to false")
    _refused(rt, Join(method="fedsdg-fs", spec=_spec(secure=True, interactive=4, key_bits=1024, insecure=True)),
             "make 1024-bit Paillier keys", "min_key_bits = 2048")
    assert rt.role is None
    # any public key sent to the party is measured, whatever the message says of itself
    from verticalfs.crypto import generate_keypair

    pub, _ = generate_keypair(512, insecure=True)
    rt = _runtime(require_secure=False)
    LocalProxy(rt).request(Join(method="ms-gini", spec=None), AT)
    _refused(rt, GiniLabels(public_key=pub.to_bytes(), labels=b"", shape=(40, 2), n_bins=4, mask_bits=40,
                            insecure=True), "use a 512-bit Paillier key (GiniLabels)", "min_key_bits = 2048")
    # allowed when the policy says so
    rt = _runtime(require_secure=False)
    LocalProxy(rt).request(Join(method="fedsdg-fs", spec=_spec(secure=False)), AT)
    assert rt.method == "fedsdg-fs" and rt.role is not None


@pytest.mark.parametrize("engine", ["openmined", "ristretto255"])
def test_psi_requests_and_ids_are_bounded(engine):
    pytest.importorskip("private_set_intersection" if engine == "openmined" else "rbcl")
    from functools import partial

    from verticalfs import psi

    intersect_with = partial(psi.intersect_with, engine=engine)

    rt = _runtime(max_psi_requests=2, max_psi_ids=30)
    proxy = LocalProxy(rt)
    with pytest.raises(PolicyError, match=r"answer a request with 31 ids.*max_psi_ids = 30"):
        intersect_with(proxy, [f"c{i}" for i in range(31)])
    for _ in range(2):
        assert len(intersect_with(proxy, ["c1", "c2", "zz"])) == 2
    with pytest.raises(PolicyError, match=r"answered 2 new intersections and alignments in the last 24 h, 0 of 2 "
                                          r"left.*max_psi_requests = 2"):
        intersect_with(proxy, ["c1"])


def test_the_psi_budget_is_a_sliding_window_kept_across_restarts(tmp_path):
    """max_psi_requests counts within psi_window_hours (sliding); the charges and the keys of aligned
    sets survive a restart (the party's working folder); a known set is free; the refusal says what is left."""
    from verticalfs.budget import PsiBudget

    now = [1_000_000.0]
    pol = PartyPolicy(max_psi_requests=2, psi_window_hours=1.0)
    b = PsiBudget("telecom", pol, tmp_path, clock=lambda: now[0])
    assert b.charge("PSI requests", 5) and b.charge("alignments", 5, key="k1") and b.left() == 0
    b.remember("k1")
    assert not b.charge("alignments", 5, key="k1")  # the same set again: free, even with nothing left
    with pytest.raises(PolicyError, match=r"0 of 2 left \(the next is free at 1970-01-12T14:46:40Z") as e:
        b.charge("PSI requests", 5)
    assert "psi_window_hours" in str(e.value) and "[parties.telecom.policy]" in str(e.value)
    again = PsiBudget("telecom", pol, tmp_path, clock=lambda: now[0])  # a restarted party: the same window
    assert again.used() == 2 and again.known("k1") and not again.known("k2")
    now[0] += 3600.5  # both charges have left the window
    assert again.left() == 2 and again.charge("PSI requests", 5)
    assert oct((tmp_path / "psi-budget.json").stat().st_mode & 0o777) == "0o600"
    with pytest.raises(PolicyError, match=r"answer a request with 31 ids.*max_psi_ids = 30"):
        _runtime(max_psi_ids=30).count_request("PSI requests", 31)  # (the party's check: "auto" is in its rows)
    (tmp_path / "psi-budget.json").write_text("{")
    with pytest.raises(ConfigError, match="psi-budget.json.*delete it"):
        PsiBudget("telecom", pol, tmp_path)


def test_models_are_saved_by_name_in_the_partys_folder(tmp_path):
    rt = _runtime(model_dir=tmp_path / "mine", release_columns=True)
    LocalProxy(rt).request(Join(method="feast", spec=None), AT)
    for bad in ("../outside", "a/b", "..", "", "/etc"):
        with pytest.raises(PolicyError, match="saves models only under a plain name"):
            LocalProxy(rt).request(SaveModel(directory=bad), AT)
    rep = LocalProxy(rt).request(SaveModel(directory="run1"), AT, expect=ModelSaved)
    assert (tmp_path / "mine" / "run1" / rep.file).is_file()
    assert sorted(p.name for p in tmp_path.rglob("*.pt")) == ["telecom.pt"]


def test_policy_tables_and_files(tmp_path):
    conf = {"label_party": "bank", "label_column": "y", "insecure": True,
            "parties": {"bank": {"address": "h:1", "file": "b.csv"},
                        "telecom": {"address": "h:2", "file": "t.csv", "policy": {"min_key_bits": 3072}}}}
    dep = validate(DeploymentFile, conf, "d")
    assert dep.parties["bank"].policy == PartyPolicy() and not PartyPolicy().release_columns
    assert dep.parties["telecom"].policy.min_key_bits == 3072
    conf["parties"]["telecom"]["policy"] = {"release_column": True}
    with pytest.raises(ConfigError, match=r"parties\.telecom\.policy\.release_column.*did you mean 'release_columns'"):
        validate(DeploymentFile, conf, "d")
    f = tmp_path / "p.toml"
    f.write_text("[policy]\nrelease_columns = true\nmodel_dir = \"m\"\n")
    pol = read_policy(f, dep.parties["telecom"].policy)
    assert pol.release_columns and pol.min_key_bits == 3072 and pol.model_dir == tmp_path / "m"
    f.write_text('max_message_mb = "big"\n')
    with pytest.raises(ConfigError, match=r"policy file .*max_message_mb = \"big\": expected a number"):
        read_policy(f)


def test_a_method_without_a_secure_mode_is_not_refused_by_require_secure():
    from verticalfs.methods.fedsdg_fs.method import OriginalGate

    rt = _runtime()  # require_secure = true
    spec = _spec(embed_gate=False)  # what original-gate sends: it has no secure mode
    assert OriginalGate.Role.policy_rules(spec) == ()
    LocalProxy(rt).request(Join(method="original-gate", spec=spec), AT)
    assert rt.method == "original-gate"


def test_a_psi_request_holds_the_ids_it_declares():
    pytest.importorskip("private_set_intersection")
    import private_set_intersection.python as psi

    from verticalfs.exceptions import TransportError
    from verticalfs.psi import PsiRequest

    rt = _runtime(max_psi_ids=2)
    req = psi.client.CreateWithNewKey(True).CreateRequest(["c1", "c2", "c3"])
    with pytest.raises(TransportError, match="declares 2 ids and holds 3"):  # under the limit, by its own word
        LocalProxy(rt).request(PsiRequest(request=req.SerializeToString(), n=2), AT)
