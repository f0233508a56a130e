"""Online scoring: ``verticalfs serve-model`` at the label party, an HTTP endpoint over a deployment.

- ``POST /predict`` with ``{"ids": ["c0001", ...]}`` answers ``{"predictions": [{"id", "prediction",
  "probabilities": {class: p}} ...], "unknown": [ids]}`` (``"value"`` for regression). An id is
  *unknown* when not every party of the model holds it (see :mod:`verticalfs.deploy.predict` for
  why asking for it tells no party anything). A body over ``max_body_mb`` is refused with 413
  from its ``Content-Length`` (or as its chunks arrive), before a byte of it is parsed. The answer's
  ``Server-Timing`` header says where the time went (:meth:`~verticalfs.deploy.predict.DeployedModel.score`).
- ``GET /health``: liveness (the process answers): the model, its parties, ids known, batches and
  ids served; 200 while the process runs.
- ``GET /ready``: readiness: 200 when every party of the model is reachable and has the model
  open, else 503 with the reason per party (``{"ready": false, "parties": {"telecom": {"ready":
  false, "reason": "...", "since": ...}}}``).
- ``GET /metrics``: Prometheus text (prometheus_client): requests by endpoint and status, the
  latency histogram of ``/predict``, the scoring time per part, ids scored, batches, errors and
  readiness per party.
- ``GET /docs``: the OpenAPI page (``/openapi.json`` the schema).

Healing: a party that restarted (its session or open model gone) is set up again within the
request that finds it (:meth:`~verticalfs.deploy.predict.DeployedModel.score`). A party that is
unreachable (its connection lost, or a request failed naming it) is marked not ready: requests are
answered 503 at once with the reason, and a healer thread sets it up again
(:meth:`~verticalfs.deploy.predict.DeployedModel.reopen`) every ``heal_s`` seconds (0.5 s, then 1 s)
until it answers; the connection itself is tried again at most every 2 s (the channel's reconnect
backoff). A restarted party is thus scored with again a few seconds after it listens.

Requests of several clients are gathered and scored together: a batch is what arrived while the
previous one was scored (and, with ``batch_ms`` > 0, what arrives within that many milliseconds of
the first), up to ``max_batch`` ids: one round of messages to the parties per batch, not per
request. The parties are asked one batch at a time (by one worker thread). Needs the ``serve``
extra (FastAPI, uvicorn, prometheus_client).
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from verticalfs.exceptions import ConfigError, ProtocolError, TransportError, VerticalFSError

if TYPE_CHECKING:
    from verticalfs.deploy.predict import DeployedModel


class PredictRequest(BaseModel):
    """The body of ``POST /predict``."""

    ids: list[str | int] = Field(description="The ids to score (as in the id column; numbers are read as text).")


class Prediction(BaseModel):
    """The score of one id."""

    id: str
    prediction: str | float
    probabilities: dict[str, float] | None = Field(None, description="Per class (classification).")


class PredictResponse(BaseModel):
    """The answer of ``POST /predict``: the known ids' scores in the order asked, the unknown ids."""

    predictions: list[Prediction]
    unknown: list[str] = Field(description="Ids not held by every party of the model (not scored).")


#: the most ids in one request (a larger request is refused with 413)
MAX_IDS_PER_REQUEST = 100_000
#: the largest request body, in MiB (``--max-body-mb``): refused with 413 before it is parsed
MAX_BODY_MB = 8.0
#: seconds between the healer's first attempts to set a party up again (doubling up to HEAL_MAX_S)
HEAL_S, HEAL_MAX_S = 0.5, 1.0
#: the latency histogram's bucket bounds (seconds)
BUCKETS = (0.002, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0,
           2.5, 5.0, 10.0)


class Health:
    """Whether each party of the model is ready (reachable, the model open), with the reason when not."""

    def __init__(self, parties: list[str]) -> None:
        self._lock = threading.Lock()
        self.state: dict[str, dict[str, Any]] = {p: {"ready": True, "reason": None, "since": time.time()}
                                                 for p in parties}
        self.wake = threading.Event()
        self.on_change: Any = None

    def fail(self, party: str, reason: str) -> None:
        with self._lock:
            st = self.state[party]
            if st["ready"] or st["reason"] != reason:
                self.state[party] = {"ready": False, "reason": reason,
                                     "since": st["since"] if not st["ready"] else time.time()}
        self.wake.set()
        if self.on_change is not None:
            self.on_change(party, False)

    def ok(self, party: str) -> None:
        with self._lock:
            if not self.state[party]["ready"]:
                self.state[party] = {"ready": True, "reason": None, "since": time.time()}
        if self.on_change is not None:
            self.on_change(party, True)

    def not_ready(self) -> dict[str, str]:
        with self._lock:
            return {p: str(st["reason"]) for p, st in self.state.items() if not st["ready"]}

    def report(self) -> dict[str, Any]:
        with self._lock:
            parties = {p: dict(st) for p, st in self.state.items()}
        return {"ready": all(st["ready"] for st in parties.values()), "parties": parties}


class Batcher:
    """Gathers the ids of concurrent requests and scores them together (see the module docstring).

    ``score(ids) -> Scores`` is called by one worker thread; :meth:`submit` returns a future of
    ``(rows, unknown, timing)`` for the ids of one request. A failure naming a party marks it not
    ready in ``health``; a healer thread then sets it up again (``model.reopen``) until it answers.
    """

    def __init__(self, model: DeployedModel, *, batch_ms: float = 0.0, max_batch: int = 4096,
                 health: Health | None = None, heal_s: float = HEAL_S, metrics: Any = None) -> None:
        if not batch_ms >= 0:
            raise ConfigError(f"--batch-ms must be >= 0, got {batch_ms}")
        if max_batch < 1:
            raise ConfigError(f"--max-batch must be >= 1, got {max_batch}")
        self.model, self.batch_s, self.max_batch = model, batch_ms / 1e3, int(max_batch)
        self.health = health if health is not None else Health(list(model.parties))
        self.heal_s = float(heal_s)
        self.metrics = metrics
        self._q: queue.Queue[Any] = queue.Queue()
        self.batches = 0
        self.ids_scored = 0
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._run, name="verticalfs-batcher", daemon=True)
        self._worker.start()
        self._healer = threading.Thread(target=self._heal, name="verticalfs-healer", daemon=True)
        self._healer.start()
        self._watcher = threading.Thread(target=self._watch, name="verticalfs-watcher", daemon=True)
        self._watcher.start()

    def submit(self, ids: list[str]) -> Future[Any]:
        fut: Future[Any] = Future()
        self._q.put((ids, fut))
        return fut

    def _gather(self) -> list[tuple[list[str], Future[Any]]]:
        first = self._q.get()
        if first is None:
            return []
        items, n = [first], len(first[0])
        deadline = time.monotonic() + self.batch_s
        while n < self.max_batch:
            left = deadline - time.monotonic()
            try:
                item = self._q.get(timeout=left) if left > 0 else self._q.get_nowait()
            except queue.Empty:
                break
            if item is None:
                self._stop.set()
                break
            items.append(item)
            n += len(item[0])
        return items

    def _failed(self, exc: BaseException) -> None:
        party = exc.party if isinstance(exc, VerticalFSError) else None
        if party in self.health.state and isinstance(exc, (TransportError, ProtocolError)):
            self.health.fail(party, f"{type(exc).__name__}: {exc}")
        if party is not None and self.metrics is not None:
            self.metrics.party_errors.labels(party=str(party)).inc()

    def _run(self) -> None:
        while not self._stop.is_set():
            items = self._gather()
            if not items:
                return
            try:
                ids = list(dict.fromkeys(i for req, _ in items for i in req))
                by_id: dict[str, Any] = {}
                unknown: set[str] = set()
                timing: dict[str, float] = {}
                for k in range(0, max(len(ids), 1), self.max_batch):
                    s = self.model.score(ids[k:k + self.max_batch], split="serve")
                    unknown.update(s.unknown)
                    for j, i in enumerate(s.ids.tolist()):
                        by_id[i] = (s.prediction[j], None if s.probabilities is None else s.probabilities[j])
                    for key, v in self.model.timing.items():
                        timing[key] = timing.get(key, 0.0) + v
                    self.batches += 1
                self.ids_scored += len(by_id)
                for req, fut in items:
                    fut.set_result(([(i, *by_id[i]) for i in req if i in by_id],
                                    [i for i in dict.fromkeys(req) if i in unknown], timing))
            except BaseException as exc:  # noqa: BLE001 - every waiting request gets the error
                self._failed(exc)
                for _, fut in items:
                    if not fut.done():
                        fut.set_exception(exc)

    def _heal(self) -> None:
        """Set every party that is not ready up again, with a growing pause, until it answers."""
        delay = self.heal_s
        while not self._stop.is_set():
            self.health.wake.wait(delay if self.health.not_ready() else None)
            self.health.wake.clear()
            if self._stop.is_set():
                return
            channel = getattr(self.model, "channel", None)
            for party in list(self.health.not_ready()):
                if channel is not None and hasattr(channel, "reachable") and not channel.reachable(party):
                    self.health.fail(party, f"TransportError: party {party!r} at {channel.addresses.get(party)} "
                                            "does not accept connections (stopped, restarting, or the network to it "
                                            "is cut)")
                    continue
                try:
                    self.model.reopen(party)
                except (VerticalFSError, RuntimeError) as exc:
                    self.health.fail(party, f"{type(exc).__name__}: {exc}")
                    continue
                self.health.ok(party)
            delay = min(delay * 2, HEAL_MAX_S) if self.health.not_ready() else self.heal_s

    def _watch(self) -> None:
        """A party whose connection is lost (gRPC's connectivity, reported without any message) is not ready."""
        channel = getattr(self.model, "channel", None)
        if channel is None or not hasattr(channel, "connectivity"):
            return
        seen: dict[str, str] = {}
        while not self._stop.wait(0.5):
            for party in self.model.parties:
                state = channel.connectivity(party)
                if state in ("TRANSIENT_FAILURE", "SHUTDOWN") or (state == "IDLE" and seen.get(party) == "READY"):
                    if party not in self.health.not_ready():
                        self.health.fail(party, f"TransportError: party {party!r}: its connection was lost "
                                                f"({state}); reconnecting")
                seen[party] = state

    def close(self) -> None:
        self._stop.set()
        self.health.wake.set()
        self._q.put(None)
        self._worker.join(5)
        self._healer.join(5)
        self._watcher.join(5)


class _Metrics:
    """The endpoint's Prometheus metrics, in a registry of its own (prometheus_client)."""

    def __init__(self, parties: list[str]) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = r = CollectorRegistry()
        self.requests = Counter("verticalfs_requests", "HTTP requests by endpoint and status.",
                                ["endpoint", "status"], registry=r)
        self.latency = Histogram("verticalfs_predict_seconds", "Time to answer POST /predict (server side).",
                                 buckets=BUCKETS, registry=r)
        self.parts = Histogram("verticalfs_score_part_seconds", "Time of each part of scoring a batch: stage (the "
                               "parties prepare the rows), infer (the method's round and the model), queue, json.",
                               ["part"], buckets=BUCKETS, registry=r)
        self.ids = Counter("verticalfs_ids_scored", "Ids scored.", registry=r)
        self.party_errors = Counter("verticalfs_party_errors", "Failed batches naming a party.", ["party"],
                                    registry=r)
        self.ready = Gauge("verticalfs_party_ready", "1 when the party is reachable with the model open.", ["party"],
                           registry=r)
        for p in parties:
            self.party_errors.labels(party=p)
            self.ready.labels(party=p).set(1)

    def text(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` is answered 413 from its ``Content-Length``,
    or as its chunks arrive (no length given), without the app parsing any of it."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, int(max_bytes)

    async def _too_large(self, send: Any, size: str) -> None:
        import json

        body = json.dumps({"detail": f"request body of {size} bytes is over the limit of {self.max_bytes} bytes "
                                     f"(--max-body-mb); send at most {MAX_IDS_PER_REQUEST} ids per request"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None:
            if not length.isdigit() or int(length) > self.max_bytes:
                await self._too_large(send, length.decode(errors="replace"))
                return
            await self.app(scope, receive, send)
            return
        chunks, size = [], 0  # no length (chunked): read up to the limit, then hand the app what came
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                return
            size += len(msg.get("body", b""))
            if size > self.max_bytes:
                await self._too_large(send, f"more than {self.max_bytes}")
                return
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body", False):
                break
        body, sent = b"".join(chunks), False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _server_timing(timing: dict[str, float], extra: dict[str, float]) -> str:
    """The ``Server-Timing`` header: each part's milliseconds (names: stage, infer, rtt.<party>.<round>, ...)."""
    parts = {**timing, **extra}
    return ", ".join(f"{k.replace('.', '-')};dur={v * 1e3:.3f}" for k, v in parts.items())


def create_app(model: DeployedModel, *, batch_ms: float = 0.0, max_batch: int = 4096,
               on_ready: Callable[[], None] | None = None, max_body_mb: float = MAX_BODY_MB,
               heal_s: float = HEAL_S) -> Any:
    """The FastAPI app scoring with ``model`` (a :class:`~verticalfs.deploy.predict.DeployedModel`);
    ``on_ready()`` is called once the server listens."""
    try:
        from fastapi import FastAPI, HTTPException
        from fastapi.responses import JSONResponse, Response
    except ImportError:  # pragma: no cover - the serve extra
        raise ConfigError("serve-model needs FastAPI and uvicorn: pip install 'verticalfs[serve]'") from None
    try:
        metrics = _Metrics(list(model.parties))
    except ImportError:  # pragma: no cover - the serve extra
        raise ConfigError("serve-model needs prometheus_client: pip install 'verticalfs[serve]'") from None
    if not max_body_mb > 0:
        raise ConfigError(f"--max-body-mb must be > 0, got {max_body_mb}")
    import json
    from contextlib import asynccontextmanager

    from verticalfs.version import __version__

    health = Health(list(model.parties))
    health.on_change = lambda party, ok: metrics.ready.labels(party=party).set(1 if ok else 0)
    batcher = Batcher(model, batch_ms=batch_ms, max_batch=max_batch, health=health, heal_s=heal_s, metrics=metrics)

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        if on_ready is not None:
            on_ready()
        yield
        batcher.close()

    app = FastAPI(title="verticalfs model", version=__version__, lifespan=lifespan,
                  description=f"Scores with the saved model {model.name!r} ({model.manifest['method']}) over "
                              f"a deployment of {len(model.parties)} parties; each party computes its part "
                              "on its own rows.")
    app.state.batcher = batcher
    app.state.health = health
    app.state.metrics = metrics
    classes = [str(c) for c in model.classes]

    def _unavailable(why: dict[str, str]) -> JSONResponse:
        text = "; ".join(f"party {p!r} is not ready: {r}" for p, r in why.items())
        return JSONResponse({"detail": f"{text} (being set up again; see GET /ready)"}, status_code=503,
                            headers={"Retry-After": "1"})

    @app.post("/predict", response_model=PredictResponse,
              responses={413: {"description": "More ids, or a larger body, than allowed."},
                         503: {"description": "A party of the model is not ready (the reason is given)."}})
    async def predict(req: PredictRequest) -> Any:
        t0 = time.perf_counter()
        status = 200
        try:
            if len(req.ids) > MAX_IDS_PER_REQUEST:
                status = 413
                raise HTTPException(413, f"at most {MAX_IDS_PER_REQUEST} ids per request, got {len(req.ids)}")
            down = health.not_ready()
            if down:  # answered at once: the healer sets the party up again
                status = 503
                return _unavailable(down)
            ids = [str(i) for i in req.ids]
            t_sub = time.perf_counter()
            try:
                rows, unknown, timing = await asyncio.wrap_future(batcher.submit(ids))
            except VerticalFSError as exc:  # a party refused or could not be reached: say which, not a bare 500
                status = 503
                raise HTTPException(503, f"{type(exc).__name__}: {exc}") from None
            t_scored = time.perf_counter()
            if model.task == "regression":
                preds = [{"id": i, "prediction": float(v)} for i, v, _ in rows]
            else:
                preds = [{"id": i, "prediction": str(v),
                          "probabilities": dict(zip(classes, map(float, p), strict=True))} for i, v, p in rows]
            body = json.dumps({"predictions": preds, "unknown": unknown}).encode()
            t_json = time.perf_counter()
            work = sum(timing.get(k, 0.0) for k in ("stage", "infer"))
            extra = {"queue": max(0.0, (t_scored - t_sub) - work), "json": t_json - t_scored,
                     "total": t_json - t0}
            for part in ("stage", "infer", "queue", "json"):
                metrics.parts.labels(part=part).observe(timing.get(part, extra.get(part, 0.0)))
            metrics.ids.inc(len(rows))
            return Response(body, media_type="application/json",
                            headers={"Server-Timing": _server_timing(timing, extra)})
        finally:
            metrics.latency.observe(time.perf_counter() - t0)
            metrics.requests.labels(endpoint="/predict", status=str(status)).inc()

    @app.get("/health")
    async def health_() -> dict[str, Any]:
        metrics.requests.labels(endpoint="/health", status="200").inc()
        return {"status": "ok", "model": model.name, "method": model.manifest["method"], "parties": model.parties,
                "ids_known": len(model.known), "batches": batcher.batches, "ids_scored": batcher.ids_scored}

    @app.get("/ready", responses={503: {"description": "A party is not ready: the reason per party."}})
    async def ready() -> Any:
        rep = health.report()
        status = 200 if rep["ready"] else 503
        metrics.requests.labels(endpoint="/ready", status=str(status)).inc()
        return JSONResponse(rep, status_code=status)

    @app.get("/metrics")
    async def metrics_() -> Any:
        body, kind = metrics.text()
        return Response(body, media_type=kind)

    app.add_middleware(BodyLimit, max_bytes=int(max_body_mb * 2**20))
    return app


def serve(model: DeployedModel, *, host: str = "127.0.0.1", port: int = 8080, batch_ms: float = 0.0,
          max_batch: int = 4096, on_ready: Callable[[], None] | None = None, max_body_mb: float = MAX_BODY_MB) -> None:
    """Run the endpoint with uvicorn until interrupted (``on_ready()`` once it listens)."""
    try:
        import uvicorn
    except ImportError:  # pragma: no cover - the serve extra
        raise ConfigError("serve-model needs FastAPI and uvicorn: pip install 'verticalfs[serve]'") from None
    app = create_app(model, batch_ms=batch_ms, max_batch=max_batch, on_ready=on_ready, max_body_mb=max_body_mb)
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)).run()
