"""A run's events (verticalfs.run_events over the schema of verticalfs.events): every registered
method sends a valid stream through ``callbacks=``; ``--events FILE`` writes it; a refusal is told."""

from __future__ import annotations

import json

import pytest

import verticalfs
from tests.event_stream import Lines, check_stream
from verticalfs.configuration import PartyPolicy
from verticalfs.events import EventLog, parse_event, read_events
from verticalfs.exceptions import PolicyError
from verticalfs.federation import Federation
from verticalfs.methods import available, get


# ------------------------------------------------------------------------------ every method
@pytest.fixture(scope="module")
def data():
    return verticalfs.build_data("breast_cancer", parties=3, noise=0.5, seed=0)


@pytest.mark.parametrize("name", available())
def test_every_method_sends_valid_events(name, data):
    sink = Lines()
    res = verticalfs.run(name, data, seed=0, params=get(name).test_params, callbacks=[sink])
    events = sink.events()
    steps = check_stream(events, method=name, parties=data.party_names)
    assert steps >= 1, f"{name} told no epoch or round"
    sel = [e for e in events if e.type == "selection"]
    assert len(sel) == 1 and set(sel[0].parties) == set(data.party_names)
    for p, s in sel[0].parties.items():
        mine = res.selection["parties"][p]
        assert s.kept == mine["kept"] and s.n_features == mine["n_features"]
    assert events[-1].metrics == pytest.approx(res.metrics)
    assert events[-1].bytes_total == res.federation.ledger.total_bytes
    last_step = [e for e in events if e.type in ("epoch", "round")][-1]
    assert last_step.bytes_total <= res.federation.ledger.total_bytes


def test_a_round_based_method_sends_rounds_inside_its_selection(data):
    sink = Lines()
    params = {**get("fate-lasso").test_params, "rounds": 3}
    res = verticalfs.run("fate-lasso", data, seed=0, params=params, callbacks=[sink])
    events = sink.events()
    rounds = [e for e in events if e.type == "round"]
    assert [e.index for e in rounds] == list(range(1, len(res.info["runs"]) + 1))
    assert all(e.total == 3 and e.phase == "selection" for e in rounds)
    assert [e.metrics["nonzero"] for e in rounds] == [r["nonzero"] for r in res.info["runs"]]
    starts = [e for e in events if e.type == "phase" and e.state == "start"]
    assert [(e.name, e.total, e.unit) for e in starts] == [("selection", 1, "epoch"), ("selection", 3, "round")]


def test_a_refusal_is_told_then_the_run_ends_with_the_error(data):
    fed = Federation.in_process(data)
    fed.local_runtime("party2").policy = PartyPolicy()  # release_columns = false
    sink = Lines()
    with pytest.raises(PolicyError, match="release_columns"):
        verticalfs.run("raw", data, seed=0, callbacks=[sink], federation=fed)
    events = sink.events()
    check_stream(events, method="raw", parties=data.party_names, status="error")
    (refusal,) = [e for e in events if e.type == "refusal"]
    assert refusal.party == "party2" and refusal.rule == "release_columns"
    assert "refuses to" in refusal.message and "release_columns" in events[-1].error


def test_progress_is_a_deprecated_keyword(data):
    with pytest.warns(DeprecationWarning, match="callbacks="):
        verticalfs.run("random", data, seed=0, params={"n_select": 3}, progress=False)


# ------------------------------------------------------------------------------- the command line
def test_cli_events_file_holds_valid_lines(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from verticalfs.cli import app

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "run.jsonl"
    args = ["run", "-m", "vfl", "-d", "breast_cancer", "-k", "2", "-e", "2", "--param", "embedding_dim=4",
            "--events", str(path), "--quiet"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    lines = path.read_text().splitlines()
    events = [parse_event(json.loads(line)) for line in lines]
    assert check_stream(events, method="vfl", parties=["party1", "party2"]) == 2
    assert [e.type for e in read_events(path)] == [e.type for e in events]
    out = CliRunner().invoke(app, ["run", "-m", "vfl", "-d", "breast_cancer", "--events", str(tmp_path), "--quiet"])
    assert out.exit_code == 2 and "--events" in out.output  # a folder: refused before any work


def test_compare_encloses_each_run(tmp_path):
    from verticalfs.compare import compare

    path = tmp_path / "c.jsonl"
    with EventLog(path) as log:
        compare("breast_cancer", ["random", "mi"], parties=2, params={"random": {"n_select": 3},
                                                                     "mi": {"n_select": 3}}, callbacks=[log])
    events = list(read_events(path))
    outer = [e for e in events if e.run == events[0].run]
    assert events[0].kind == "compare" and outer[-1].type == "run_end" and outer[-1].status == "ok"
    inner = [e for e in events if e.type == "run_start" and e.kind == "run"]
    assert [e.method for e in inner] == ["random", "mi"] and all(e.parent == events[0].run for e in inner)
    for e in inner:
        check_stream([x for x in events if x.run == e.run], method=e.method, parties=["party1", "party2"])
