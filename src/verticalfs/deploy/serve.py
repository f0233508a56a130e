"""Online scoring: ``verticalfs serve-model`` at the label party, an HTTP endpoint over a deployment.

- ``POST /predict`` with ``{"ids": ["c0001", ...]}`` answers ``{"predictions": [{"id", "prediction",
  "probabilities": {class: p}} ...], "unknown": [ids]}`` (``"value"`` for regression). An id is
  *unknown* when not every party of the model holds it (see :mod:`verticalfs.deploy.predict` for
  why asking for it tells no party anything).
- ``GET /health``: the model, its parties, how many ids can be scored, batches and ids served.
- ``GET /docs``: the OpenAPI page (``/openapi.json`` the schema).

Requests of several clients are gathered for ``batch_ms`` milliseconds (or until ``max_batch`` ids)
and scored together: one round of messages to the parties per batch, not per request. The parties
are asked one batch at a time (by one worker thread). Needs the ``serve`` extra (FastAPI, uvicorn).
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from concurrent.futures import Future
from typing import Any

from pydantic import BaseModel, Field

from verticalfs.exceptions import ConfigError, VerticalFSError


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


class Batcher:
    """Gathers the ids of concurrent requests for ``batch_ms`` and scores them together.

    ``score(ids) -> Scores`` is called by one worker thread; :meth:`submit` returns a future of
    ``(rows, unknown)`` for the ids of one request.
    """

    def __init__(self, model, *, batch_ms: float = 2.0, max_batch: int = 4096) -> None:
        if not batch_ms >= 0:
            raise ConfigError(f"--batch-ms must be >= 0, got {batch_ms}")
        if max_batch < 1:
            raise ConfigError(f"--max-batch must be >= 1, got {max_batch}")
        self.model, self.batch_s, self.max_batch = model, batch_ms / 1e3, int(max_batch)
        self._q: queue.Queue = queue.Queue()
        self.batches = 0
        self.ids_scored = 0
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._run, name="verticalfs-batcher", daemon=True)
        self._worker.start()

    def submit(self, ids: list[str]) -> Future:
        fut: Future = Future()
        self._q.put((ids, fut))
        return fut

    def _gather(self) -> list[tuple[list[str], Future]]:
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

    def _run(self) -> None:
        while not self._stop.is_set():
            items = self._gather()
            if not items:
                return
            try:
                ids = list(dict.fromkeys(i for req, _ in items for i in req))
                by_id: dict[str, Any] = {}
                unknown: set[str] = set()
                for k in range(0, max(len(ids), 1), self.max_batch):
                    s = self.model.score(ids[k:k + self.max_batch], split="serve")
                    unknown.update(s.unknown)
                    for j, i in enumerate(s.ids.tolist()):
                        by_id[i] = (s.prediction[j], None if s.probabilities is None else s.probabilities[j])
                    self.batches += 1
                self.ids_scored += len(by_id)
                for req, fut in items:
                    fut.set_result(([(i, *by_id[i]) for i in req if i in by_id],
                                    [i for i in dict.fromkeys(req) if i in unknown]))
            except BaseException as exc:  # noqa: BLE001 - every waiting request gets the error
                for _, fut in items:
                    if not fut.done():
                        fut.set_exception(exc)

    def close(self) -> None:
        self._stop.set()
        self._q.put(None)
        self._worker.join(5)


def create_app(model, *, batch_ms: float = 2.0, max_batch: int = 4096, on_ready=None):
    """The FastAPI app scoring with ``model`` (a :class:`~verticalfs.deploy.predict.DeployedModel`);
    ``on_ready()`` is called once the server listens."""
    try:
        from fastapi import FastAPI, HTTPException
    except ImportError:  # pragma: no cover - the serve extra
        raise ConfigError("serve-model needs FastAPI and uvicorn: pip install 'verticalfs[serve]'") from None
    from contextlib import asynccontextmanager

    from verticalfs import __version__

    batcher = Batcher(model, batch_ms=batch_ms, max_batch=max_batch)

    @asynccontextmanager
    async def lifespan(app):
        if on_ready is not None:
            on_ready()
        yield
        batcher.close()

    app = FastAPI(title="verticalfs model", version=__version__, lifespan=lifespan,
                  description=f"Scores with the saved model {model.name!r} ({model.manifest['method']}) over "
                              f"a deployment of {len(model.parties)} parties; each party computes its part "
                              "on its own rows.")
    app.state.batcher = batcher
    classes = [str(c) for c in model.classes]

    @app.post("/predict", response_model=PredictResponse)
    async def predict(req: PredictRequest) -> dict:
        if len(req.ids) > MAX_IDS_PER_REQUEST:
            raise HTTPException(413, f"at most {MAX_IDS_PER_REQUEST} ids per request, got {len(req.ids)}")
        ids = [str(i) for i in req.ids]
        try:
            rows, unknown = await asyncio.wrap_future(batcher.submit(ids))
        except VerticalFSError as exc:  # a party refused or could not be reached: say which, not a bare 500
            raise HTTPException(503, f"{type(exc).__name__}: {exc}") from None
        if model.task == "regression":
            preds = [{"id": i, "prediction": float(v)} for i, v, _ in rows]
        else:
            preds = [{"id": i, "prediction": str(v), "probabilities": dict(zip(classes, map(float, p), strict=True))}
                     for i, v, p in rows]
        return {"predictions": preds, "unknown": unknown}

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "model": model.name, "method": model.manifest["method"], "parties": model.parties,
                "ids_known": len(model.known), "batches": batcher.batches, "ids_scored": batcher.ids_scored}

    return app


def serve(model, *, host: str = "127.0.0.1", port: int = 8080, batch_ms: float = 2.0, max_batch: int = 4096,
          on_ready=None) -> None:
    """Run the endpoint with uvicorn until interrupted (``on_ready()`` once it listens)."""
    try:
        import uvicorn
    except ImportError:  # pragma: no cover - the serve extra
        raise ConfigError("serve-model needs FastAPI and uvicorn: pip install 'verticalfs[serve]'") from None
    app = create_app(model, batch_ms=batch_ms, max_batch=max_batch, on_ready=on_ready)
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)).run()
