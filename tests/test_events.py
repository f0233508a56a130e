"""The event schema (verticalfs.events): what a writer writes, a reader reads back whole."""

from __future__ import annotations

import json
import os
import stat

import pytest

from verticalfs.events import SCHEMA_VERSION, Emitter, EventLog, EventReader, event_schema, parse_event
from verticalfs.exceptions import ConfigError


def test_events_round_trip_in_order_with_non_finite_metrics_as_null(tmp_path):
    path = tmp_path / "run.jsonl"
    with EventLog(path) as log:
        em = Emitter([log], run="r1")
        em.emit("run_start", method="vfl", parties=["a", "b"], version="0")
        em.emit("epoch", phase="train", index=1, total=2, metrics={"accuracy": 0.5, "auc": float("nan")})
        em.emit("round", phase="selection", index=1)
        em.emit("run_end", status="ok", bytes_total=10)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    events = list(EventReader(path).new())
    assert [e.type for e in events] == ["run_start", "epoch", "round", "run_end"]
    assert [e.seq for e in events] == [0, 1, 2, 3]
    assert all(e.run == "r1" and e.v == SCHEMA_VERSION for e in events)
    assert events[1].metrics == {"accuracy": 0.5, "auc": None}


def test_a_reader_keeps_a_partial_line_until_it_is_whole(tmp_path):
    path = tmp_path / "run.jsonl"
    em = Emitter(run="r")
    line = em.emit("warning", message="w").model_dump_json()
    path.write_bytes(line[:10].encode())
    r = EventReader(path)
    assert r.new() == []
    with open(path, "ab") as f:
        f.write(line[10:].encode() + b"\n" + b"not json\n")
    got = r.new()
    assert [e.message for e in got] == ["w"] and r.bad == 1


def test_the_schema_refuses_unknown_fields_and_newer_versions():
    with pytest.raises(ConfigError, match="not a verticalfs event"):
        parse_event({"v": 1, "run": "r", "seq": 0, "time": 0.0, "type": "warning", "message": "m", "x": 1})
    with pytest.raises(ConfigError):
        parse_event({"v": 2, "run": "r", "seq": 0, "time": 0.0, "type": "warning", "message": "m"})
    with pytest.raises(ConfigError):
        Emitter().emit("epoch", phase="train", index=0)  # epochs count from 1
    assert "oneOf" in json.dumps(event_schema()) or "anyOf" in json.dumps(event_schema())
