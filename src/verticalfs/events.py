"""The events of a run: what happened, in order, one JSON object per line.

A run (``verticalfs run``, :func:`verticalfs.run`, a deployment's run, ``predict``) tells what it
does as a stream of events: it started (with its parties and their policies), a phase began or
ended, an epoch or a round ended (with its metrics and the bytes sent so far), a party's selection,
a refusal, a warning, and the end. The progress lines and bars of the command line consume them,
``--events FILE`` writes them as JSON lines, and ``verticalfs board`` reads those files while they
grow. The schema is the models below (pydantic v2); :func:`event_schema` is its JSON schema, which
the documentation prints.

Every event carries:

- ``v``: the schema version (:data:`SCHEMA_VERSION`; a reader refuses a newer one);
- ``type``: its kind (``run_start``, ``phase``, ``epoch``, ``round``, ``stage``, ``selection``,
  ``refusal``, ``warning``, ``run_end``);
- ``run``: the run's id (one per run; every event of a run carries it);
- ``seq``: its place in the run, from 0, without gaps;
- ``time``: when it happened, Unix seconds (UTC).

Byte counts are the ledger's (:mod:`verticalfs.transport.ledger`): ``bytes`` the training traffic
so far (every phase but ``eval``), ``bytes_total`` all of it. Metrics are floats by name (test
metrics by their name, validation metrics as ``val_<name>``); a value that is not finite is written
as ``null``.

The writer (:class:`EventLog`) appends a line and flushes it at once, so a reader sees each event
within the time the file system takes; a line is written whole in one ``write`` (a reader that
meets a partial last line keeps it for its next read: :func:`read_events`).
"""

from __future__ import annotations

import json
import math
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from verticalfs.exceptions import ConfigError

#: the version of the schema written in every event's ``v``
SCHEMA_VERSION = 1

Number = Union[float, None]  # noqa: UP007  (pydantic reads the annotation at run time on 3.10 too)


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    v: Literal[1] = SCHEMA_VERSION
    run: str = Field(min_length=1, max_length=128, description="The run's id (every event of a run carries it).")
    seq: int = Field(ge=0, description="The event's place in its run, from 0, without gaps.")
    time: float = Field(description="When it happened: Unix seconds (UTC).")


class RunStart(_Event):
    """A run began."""

    type: Literal["run_start"] = "run_start"
    kind: Literal["run", "compare", "predict", "serve"] = Field(
        "run", description="What runs: a training run, a comparison (its runs follow with their own ids), a "
                           "prediction or online scoring.")
    method: str | None = Field(None, description="The method (or pipeline) name; none for a comparison.")
    dataset: str | None = Field(None, description="The data set's name, or the label party's file.")
    parties: list[str] = Field(default_factory=list, description="The feature parties, in order.")
    label_party: str | None = Field(None, description="The party that holds the labels (a deployment).")
    mode: Literal["in-process", "deployment"] = Field("in-process", description="Where the parties run.")
    seed: int | None = None
    params: dict[str, Any] = Field(default_factory=dict, description="The method's parameters as the run uses them.")
    policies: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Per party, the policy it reported (a deployment's `PolicyReport`).")
    command: list[str] | None = Field(None, description="The command line that reproduces the run, if it came "
                                                        "from the command line.")
    parent: str | None = Field(None, description="The comparison this run belongs to, if any.")
    version: str = Field(description="verticalfs's version.")


class Phase(_Event):
    """A phase of the run began or ended (``setup``, ``psi``, ``align``, ``pretrain``,
    ``selection``, ``train``, ``eval``, ``report``, ``predict``, or a method's own)."""

    type: Literal["phase"] = "phase"
    name: str
    state: Literal["start", "end"]
    total: int | None = Field(None, ge=0, description="On `start` of a loop: how many epochs or rounds it runs at "
                                                      "most.")
    unit: Literal["epoch", "round"] | None = Field(None, description="On `start` of a loop: what its steps are "
                                                                     "(`epoch` or `round` events follow).")
    seconds: Number = Field(None, description="On `end`: the phase's wall seconds.")
    bytes_total: int = Field(0, ge=0, description="Every byte on the ledger so far.")
    bytes_by_party: dict[str, int] = Field(default_factory=dict,
                                           description="On `end`: the phase's bytes per party (both directions).")


class Epoch(_Event):
    """An epoch of a split-learning loop ended (``type = "epoch"``), or a round of a round-based
    protocol (``type = "round"``: FATE's lasso, a tree of SecureBoost)."""

    type: Literal["epoch", "round"] = "epoch"
    phase: str = Field(description="The loop's phase (`train`, `pretrain`, `selection`, ...).")
    index: int = Field(ge=1, description="The epoch or round just ended, from 1.")
    total: int | None = Field(None, ge=0, description="How many the loop runs at most.")
    metrics: dict[str, Number] = Field(default_factory=dict)
    train_loss: Number = None
    bytes: int = Field(0, ge=0, description="Training traffic so far.")
    bytes_total: int = Field(0, ge=0, description="Every byte on the ledger so far.")
    seconds: Number = Field(None, description="Wall seconds since the run began.")


class Stage(_Event):
    """A step of a long stage that is not an epoch (ICAFS's synthesis, a filter's scoring)."""

    type: Literal["stage"] = "stage"
    name: str
    done: int = Field(ge=0)
    total: int = Field(ge=0)
    bytes_total: int = Field(0, ge=0)


class PartySelection(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kept: list[str] = Field(description="The kept prepared features, by name.")
    n_kept: int = Field(ge=0)
    n_features: int = Field(ge=0)
    scores: list[Number] | None = Field(None, description="The method's score per prepared feature, if it has one.")


class Selection(_Event):
    """What each party kept."""

    type: Literal["selection"] = "selection"
    parties: dict[str, PartySelection]


class Refusal(_Event):
    """A party refused a request (its policy, or a check of what it was sent)."""

    type: Literal["refusal"] = "refusal"
    party: str
    rule: str | None = Field(None, description="The policy key or check that refused, if the party named one.")
    message: str


class RunWarning(_Event):
    """A warning the run gave (data, selection, chance)."""

    type: Literal["warning"] = "warning"
    message: str


class RunEnd(_Event):
    """The run ended: ``ok``, or ``error`` with the message, or ``interrupted``."""

    type: Literal["run_end"] = "run_end"
    status: Literal["ok", "error", "interrupted"]
    metrics: dict[str, Number] = Field(default_factory=dict)
    bytes_total: int = Field(0, ge=0)
    seconds: Number = None
    error: str | None = None
    result: str | None = Field(None, description="The result file written, if any.")


Event = Annotated[Union[RunStart, Phase, Epoch, Stage, Selection, Refusal, RunWarning, RunEnd],  # noqa: UP007
                  Field(discriminator="type")]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(Event)
#: the event classes by ``type``
KINDS: dict[str, type[_Event]] = {"run_start": RunStart, "phase": Phase, "epoch": Epoch, "round": Epoch,
                                  "stage": Stage, "selection": Selection, "refusal": Refusal,
                                  "warning": RunWarning, "run_end": RunEnd}


def event_schema() -> dict[str, Any]:
    """The JSON schema of one event line."""
    return _ADAPTER.json_schema()


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if hasattr(x, "item") and callable(x.item) and getattr(x, "ndim", 1) == 0:  # a numpy or torch scalar
        return _finite(x.item())
    return x


def parse_event(obj: dict[str, Any] | str | bytes) -> Any:
    """One event from a decoded JSON object or a line; a :class:`ConfigError` naming what is wrong."""
    try:
        if isinstance(obj, (str, bytes)):
            return _ADAPTER.validate_json(obj)
        return _ADAPTER.validate_python(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "the event"
        raise ConfigError(f"not a verticalfs event (schema {SCHEMA_VERSION}): {where}: {first.get('msg')}") from None


class Emitter:
    """Builds a run's events in order and hands each to its sinks (callables taking one event).

    One emitter per run: it numbers the events (``seq``) and stamps them with the run's id and
    the time. Thread-safe (a deployment's parties answer on their own threads).
    """

    def __init__(self, sinks: list[Callable[[Any], None]] | None = None, *, run: str | None = None) -> None:
        self.run = run or f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(4)}"
        self.sinks: list[Callable[[Any], None]] = list(sinks or [])
        self._seq = 0
        self._lock = threading.Lock()

    def emit(self, type: str, **fields: Any) -> Any:
        """Build the event ``type`` with ``fields``, check it against the schema and hand it to every sink."""
        cls = KINDS[type]
        with self._lock:
            data = {"run": self.run, "seq": self._seq, "time": time.time(), **_finite(fields)}
            if cls is Epoch:
                data["type"] = type
            try:
                event = cls.model_validate(data)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first.get("loc", ())) or type
                raise ConfigError(f"event {type!r} does not fit the schema: {where}: {first.get('msg')}") from None
            self._seq += 1
        for sink in self.sinks:
            sink(event)
        return event


class EventLog:
    """A sink writing one JSON line per event to ``path`` (appended; each line flushed at once).

    The file is created with mode 0600 (events name the parties, their policies and the kept
    features). Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._lock = threading.Lock()

    def __call__(self, event: Any) -> None:
        line = (event.model_dump_json() + "\n").encode()
        with self._lock:
            if self._fd < 0:
                raise ConfigError(f"the event log {str(self.path)!r} is closed")
            os.write(self._fd, line)  # one write per line: a reader never sees two lines interleaved

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EventReader:
    """Reads a growing event file: :meth:`new` returns the events appended since the last call (a
    partial last line is kept until it is whole). Lines that are not valid events are skipped and
    counted in ``bad`` (a reader of files from elsewhere must not stop on them)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._offset = 0
        self._rest = b""
        self.bad = 0

    def new(self) -> list[Any]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        data = self._rest + chunk
        lines = data.split(b"\n")
        self._rest = lines.pop()  # b"" when the data ended with a newline
        out = []
        for line in lines:
            if not line.strip():
                continue
            try:
                out.append(parse_event(line))
            except ConfigError:
                self.bad += 1
        return out


def read_events(path: str | Path) -> Iterator[Any]:
    """Every whole, valid event line of ``path``, in order."""
    yield from EventReader(path).new()


def to_json(event: Any) -> dict[str, Any]:
    """An event as a JSON-ready dict (what a line holds)."""
    return json.loads(event.model_dump_json())
