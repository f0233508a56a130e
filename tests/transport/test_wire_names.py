"""Stable wire names: the golden list of every message kind's name and id, and the decorator's refusals.

A message kind is known on the wire by its 16-bit id and in saved models by its name; both come
from the name given to ``@message("namespace.Name")``, nothing else. :data:`GOLDEN` below is the
protocol: every kind the library registers, written out with its id.

- Adding a kind: append its ``(name, id)`` to :data:`GOLDEN` (the failure message prints the line).
- Renaming or removing a kind, or changing how ids are derived, fails this test on purpose: a peer
  running the previous release, or a model saved by it, would no longer understand the kind. If it
  is really meant, it is a protocol change: bump the major of ``PROTOCOL_VERSION``
  (``verticalfs/transport/messages.py``), say so in CHANGELOG.md, and only then edit the list.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import verticalfs
from verticalfs.exceptions import TransportError
from verticalfs.transport import PROTOCOL_VERSION, wire_name
from verticalfs.transport.messages import (
    Hello,
    Join,
    kind_id_of,
    message,
    message_from_dict,
    message_to_dict,
    registered_kinds,
)

#: every message kind of the library: (wire name, kind id). Append new kinds; never edit or remove a line.
GOLDEN: list[tuple[str, int]] = [
    ("core.Ack", 23297),
    ("core.Align", 62277),
    ("core.Aligned", 7332),
    ("core.Checkpoint", 48641),
    ("core.Columns", 52360),
    ("core.EmbedRequest", 27253),
    ("core.Embeddings", 30246),
    ("core.GatherColumns", 20785),
    ("core.Gradients", 21069),
    ("core.Hello", 5928),
    ("core.HelloRequest", 56076),
    ("core.Join", 935),
    ("core.KeepFeatures", 43891),
    ("core.LoadModel", 51112),
    ("core.ModelSaved", 44594),
    ("core.Persist", 9718),
    ("core.PsiReply", 26473),
    ("core.PsiRequest", 64675),
    ("core.Ready", 10884),
    ("core.SaveModel", 9737),
    ("core.SplitSpec", 1717),
    ("core.SupportReport", 36053),
    ("core.SupportRequest", 11551),
    ("core.TrafficReport", 54248),
    ("core.TrafficRequest", 35958),
    ("baselines.CompFSEmbeddings", 63709),
    ("baselines.CompFSGradients", 53104),
    ("baselines.CompFSSelect", 11980),
    ("baselines.CompFSSelected", 1490),
    ("baselines.CompFSSpec", 11399),
    ("baselines.GroupLassoPenalty", 8062),
    ("baselines.GroupLassoSpec", 57925),
    ("baselines.SEFSPretrain", 5041),
    ("baselines.SEFSPretrained", 15684),
    ("baselines.SEFSSelect", 64798),
    ("baselines.SEFSSelected", 18122),
    ("baselines.SEFSSpec", 61770),
    ("baselines.VFLFSSpec", 2853),
    ("fate.Coefficients", 38043),
    ("fate.CoefficientsRequest", 38661),
    ("fate.EncryptedResidual", 60363),
    ("fate.GradientResult", 56259),
    ("fate.IVBinSums", 1579),
    ("fate.IVLabels", 8998),
    ("fate.LassoStart", 41485),
    ("fate.MaskedGradient", 20588),
    ("fate.PartialPredictor", 55720),
    ("feast.DropCandidates", 4270),
    ("feast.FeastSetup", 51252),
    ("feast.FeatureScores", 31111),
    ("feast.LabelScoresRequest", 53307),
    ("feast.ScoreRequest", 25240),
    ("feast.ShareSelected", 12074),
    ("feast.StatVariables", 10344),
    ("fedsdg_fs.ClearGini", 30288),
    ("fedsdg_fs.CloseGates", 49396),
    ("fedsdg_fs.EncryptedEmbeddingGradient", 20505),
    ("fedsdg_fs.EncryptedEta", 48502),
    ("fedsdg_fs.EncryptedGini", 4026),
    ("fedsdg_fs.FLabels", 21246),
    ("fedsdg_fs.FScores", 54576),
    ("fedsdg_fs.FedSDGSpec", 37393),
    ("fedsdg_fs.ForwardShares", 4175),
    ("fedsdg_fs.GatePenalty", 31475),
    ("fedsdg_fs.GatedEmbeddings", 62730),
    ("fedsdg_fs.GatesClosed", 41492),
    ("fedsdg_fs.GiniLabels", 18860),
    ("fedsdg_fs.GiniScores", 52834),
    ("fedsdg_fs.KeyRequest", 23146),
    ("fedsdg_fs.MaskedClassSums", 49336),
    ("fedsdg_fs.MaskedCounts", 26437),
    ("fedsdg_fs.MaskedProducts", 1689),
    ("fedsdg_fs.MaskedWeightGradient", 42630),
    ("fedsdg_fs.NoisyWeightGradient", 61456),
    ("fedsdg_fs.PartyKey", 2872),
    ("fedsdg_fs.PlainFLabels", 50154),
    ("fedsdg_fs.PlainGiniLabels", 42623),
    ("fedsdg_fs.SecureEmbeddings", 30915),
    ("fedsdg_fs.SquaredCounts", 31320),
    ("fedsdg_fs.WeightedSquares", 21988),
    ("icafs.CodeGradients", 21131),
    ("icafs.CriticFeatures", 37539),
    ("icafs.CriticGradients", 64919),
    ("icafs.CriticRequest", 40636),
    ("icafs.FeaturesSelected", 26913),
    ("icafs.GeneratorGradients", 54374),
    ("icafs.GeneratorRequest", 3441),
    ("icafs.ICAFSSpec", 57914),
    ("icafs.SelectFeatures", 23225),
    ("icafs.Synthesize", 10299),
    ("icafs.Synthesized", 5813),
    ("less_vfl.CandidateEmbeddings", 20045),
    ("less_vfl.KeepCandidate", 11402),
    ("less_vfl.SelectFeatures", 4253),
    ("less_vfl.SelectionInfo", 5559),
    ("less_vfl.SelectionInfoRequest", 62375),
    ("sparsevfl.CodedSpec", 63664),
    ("sparsevfl.ReduceRequest", 62678),
    ("sparsevfl.ReducedFeatures", 20263),
    ("sparsevfl.TopWGradients", 32376),
    ("core.PolicyQuery", 21938),
    ("core.PolicyReport", 61546),
    ("core.OpenModel", 5725),
    ("core.ModelOpened", 49891),
    ("core.ScoringPsi", 16821),
    ("core.StageIds", 39834),
    ("core.IdsStaged", 348),
    ("core.EndSession", 45165),
    ("core.IdsDigestRequest", 1222),
    ("core.IdsDigest", 61230),
    ("core.PsiOpen", 31719),
    ("core.PsiOpened", 29352),
    ("core.PsiChunk", 47113),
    ("core.PsiChunkReply", 20500),
    ("core.ScoringPsiOpen", 32892),
    ("core.ScoringPsiChunk", 54734),
    ("core.StatusQuery", 62811),
    ("core.StatusReport", 25853),
    ("secureboost.HistogramRequest", 35723),
    ("secureboost.Histograms", 42380),
    ("secureboost.Importance", 26938),
    ("secureboost.RouteRequest", 39526),
    ("secureboost.Routes", 54926),
    ("secureboost.SBTReady", 19152),
    ("secureboost.SBTSpec", 36318),
    ("secureboost.SplitMade", 29334),
    ("secureboost.SplitRequest", 18491),
    ("secureboost.TreeEnd", 15945),
    ("secureboost.TreeStart", 100),
    ("core.LabelProof", 26516),
    ("core.TrustQuery", 57279),
    ("core.TrustReport", 58833),
    ("secureboost.HiddenHistogramRequest", 37966),
    ("secureboost.HiddenSplitRequest", 22459),
]

WHY = ("the list of wire names in tests/transport/test_wire_names.py is golden: a peer running the previous "
       "release, or a model saved by it, knows a message kind only by this name and id")


def _import_library() -> None:
    """Import every module of the library, so that every message kind is registered (the method
    packages, deploy, PSI, ...; a kind defined in a module nobody imported would be missed)."""
    for mod in pkgutil.walk_packages(verticalfs.__path__, "verticalfs."):
        if not mod.name.endswith("__main__"):
            importlib.import_module(mod.name)


def _library_kinds() -> dict[str, int]:
    from verticalfs.transport.messages import _BY_NAME

    return {n: i for n, i in registered_kinds().items() if _BY_NAME[n].__module__.startswith("verticalfs.")}


def test_golden_list_of_wire_names_and_ids():
    _import_library()
    golden = dict(GOLDEN)
    assert len(golden) == len(GOLDEN), "a name appears twice in GOLDEN"
    assert len(set(golden.values())) == len(golden), "two names in GOLDEN share a kind id"
    now = _library_kinds()
    from verticalfs.transport.messages import _BY_NAME

    sent = {n: _BY_NAME[n]._vf_kind for n in now}
    assert sent == now, "a class is sent with another id than it is decoded by"
    gone = sorted(set(golden) - set(now))
    assert not gone, (f"message kinds {gone} are no longer registered (renamed or removed); {WHY}. Keep the "
                      "name (move the class freely, the name stays), or make it a protocol change: bump the "
                      "major of PROTOCOL_VERSION, note it in CHANGELOG.md, then edit the list")
    changed = {n: (golden[n], now[n]) for n in golden if now[n] != golden[n]}
    assert not changed, (f"{len(changed)} kind ids changed (golden, now), e.g. {dict(list(changed.items())[:5])}; "
                         f"{WHY}. The id must stay a function of the name only (kind_id_of)")
    new = sorted(set(now) - set(golden))
    assert not new, ("new message kinds: append to GOLDEN in tests/transport/test_wire_names.py:\n"
                     + "\n".join(f'    ("{n}", {now[n]}),' for n in new))


def test_the_id_comes_from_the_name_only():
    """The id of a kind is the folded CRC of its wire name: the module the class lives in plays no part."""
    assert Hello._vf_kind == kind_id_of("core.Hello") == dict(GOLDEN)["core.Hello"]
    assert wire_name(Join) == "core.Join" and wire_name(Join(method="vfl", spec=None)) == "core.Join"

    @message("tests.wire.Somewhere")
    class Somewhere:
        x: int

    assert Somewhere.__module__ == __name__ and Somewhere._vf_kind == kind_id_of("tests.wire.Somewhere")
    # two methods may both call a class SelectFeatures: their names tell them apart
    _import_library()
    from verticalfs.methods.icafs.messages import SelectFeatures as A
    from verticalfs.methods.less_vfl.role import SelectFeatures as B

    assert A.__name__ == B.__name__ and wire_name(A) != wire_name(B) and A._vf_kind != B._vf_kind


def test_missing_malformed_and_duplicate_names_are_refused():
    with pytest.raises(TransportError,
                       match=r'needs the kind\'s stable wire name: write @message\("<namespace>\.NoName"\)'):
        @message
        class NoName:
            x: int

    for bad in ("NoNamespace", "a..b", "core.Has space", ".Leading", "", 7):
        with pytest.raises(TransportError, match="is not of the form 'namespace.Name'"):
            message(bad)
    with pytest.raises(TransportError, match=r"'core\.Hello' of .*Impostor is already the name of "
                                             r"verticalfs\.transport\.messages\.Hello"):
        @message("core.Hello")
        class Impostor:
            x: int

    # the same definition registered again (a module imported twice) is the same kind, not a duplicate
    def define():
        @message("tests.wire.Twice")
        class Twice:
            x: int

        return Twice

    assert define()._vf_kind == define()._vf_kind == kind_id_of("tests.wire.Twice")


def test_an_id_collision_is_refused_at_import():
    taken = {i: n for n, i in registered_kinds().items()}
    name = next(f"tests.wire.Collide{k}" for k in range(1 << 20) if kind_id_of(f"tests.wire.Collide{k}") in taken)
    with pytest.raises(TransportError, match=rf"{name!r} of .* has kind id {kind_id_of(name)}, like "
                                             rf"{taken[kind_id_of(name)]!r}.*choose another name"):
        @message(name)
        class Collides:
            x: int

    assert name not in registered_kinds()


def test_saved_messages_refer_to_kinds_by_wire_name():
    """A role's spec in a saved model names its kind by wire name (a moved file still loads), and a
    name nobody registered (e.g. the module path an older release wrote) is refused by name."""
    from verticalfs.training.split import SplitSpec

    spec = SplitSpec(hidden=(8,), embedding_dim=4, activation="relu", optimizer="adam", lr=0.01, weight_decay=0.0,
                     seed=0, batch_size=32, shuffle_seed=1)
    d = message_to_dict(spec)
    assert d["kind"] == "core.SplitSpec"
    back = message_from_dict(d)
    assert type(back) is SplitSpec and list(back.hidden) == [8] and back.embedding_dim == 4
    with pytest.raises(TransportError, match="unknown message kind 'verticalfs.training.split.SplitSpec'"):
        message_from_dict({**d, "kind": "verticalfs.training.split.SplitSpec"})


def test_protocol_version_is_a_constant_pair_apart_from_the_package_version():
    assert isinstance(PROTOCOL_VERSION, tuple) and len(PROTOCOL_VERSION) == 2
    assert all(type(v) is int for v in PROTOCOL_VERSION)
    assert Hello(feature_names=[], n_samples={}).protocol == PROTOCOL_VERSION
    assert Join(method="vfl", spec=None).protocol == PROTOCOL_VERSION
