"""Helpers of the event tests: a sink keeping JSON lines, and the checks of one run's stream."""

from __future__ import annotations

import verticalfs
from verticalfs.events import parse_event


class Lines:
    """A sink keeping each event as the JSON line a file would hold."""

    def __init__(self):
        self.lines = []

    def __call__(self, event):
        self.lines.append(event.model_dump_json())

    def events(self):
        return [parse_event(line) for line in self.lines]  # each line against the schema


def check_stream(events, *, method, parties, mode="in-process", status="ok"):
    """One run's events: numbered from 0 without gaps, one run id, started and ended once, phases
    nested and closed, steps inside their loops, bytes never going back."""
    assert events, "no event"
    assert [e.seq for e in events] == list(range(len(events)))
    assert len({e.run for e in events}) == 1
    assert events[0].type == "run_start" and events[-1].type == "run_end"
    assert [e.type for e in events].count("run_start") == 1 and [e.type for e in events].count("run_end") == 1
    start, end = events[0], events[-1]
    assert start.method == method and start.parties == list(parties) and start.mode == mode
    assert start.version == verticalfs.__version__
    assert end.status == status, end.error
    open_, steps, last_bytes = [], 0, 0
    for e in events[1:-1]:
        if e.type == "phase":
            if e.state == "start":
                open_.append(e.name)
            else:
                assert open_ and open_[-1] == e.name, (open_, e.name)
                open_.pop()
                assert e.seconds is not None and e.seconds >= 0
                assert all(p in parties or p == start.label_party for p in e.bytes_by_party), e.bytes_by_party
        elif e.type in ("epoch", "round"):
            steps += 1
            assert e.phase in open_ or not open_, (e.phase, open_)
            assert e.total is None or 1 <= e.index <= max(e.total, 1)
        if hasattr(e, "bytes_total") and e.type != "phase":
            assert e.bytes_total >= last_bytes
            last_bytes = e.bytes_total
    assert open_ == [] or status != "ok", open_
    return steps
