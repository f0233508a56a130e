"""The board's web application: FastAPI routes over a :class:`~verticalfs.board.catalog.Catalog`.

Read-only: every route is a ``GET`` (or ``HEAD``); the board starts nothing and writes nothing.
Pages are rendered on the server (Jinja2, every value escaped); charts are drawn in the browser by
Chart.js from the page's data, embedded as JSON in a ``<script type="application/json">`` element
(never executed; ``<``, ``>``, ``&`` and ``'`` escaped). The Content-Security-Policy allows scripts
and styles from the board itself only, so markup that got through anyway could not run.

Who may read it (:class:`Guard`): on a loopback address, requests whose ``Host`` names this machine
(a page of another site that rebinds its name to 127.0.0.1 is refused); with a token, requests that
carry it (``Authorization: Bearer``, or once as ``?token=`` in the address, which sets a cookie and
drops it from the address).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

from verticalfs.board.catalog import Catalog, is_id
from verticalfs.board.views import PALETTE, comparison_view, run_view
from verticalfs.exceptions import ConfigError

HERE = Path(__file__).parent
log = logging.getLogger("verticalfs.board")
COOKIE = "verticalfs_board"
#: the Content-Security-Policy of every answer
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
           (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"DENY"), (b"cache-control", b"no-store")]
#: seconds between two looks at the event files while a live page is open, and between two walks
#: of the folders (new files)
POLL_S = 0.2
WALK_S = 0.5
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


def _cookie_value(token: str) -> str:
    return hashlib.sha256(f"verticalfs-board:{token}".encode()).hexdigest()


class Guard:
    """ASGI middleware: the board's read-only, host and token rules, and its security headers."""

    def __init__(self, app: Any, *, token: str | None, allowed_hosts: frozenset[str] | None) -> None:
        self.app, self.token, self.allowed_hosts = app, token, allowed_hosts
        self._cookie = None if token is None else _cookie_value(token)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}

        async def secured(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *HEADERS]}
            await send(message)

        if scope["method"] not in ("GET", "HEAD"):
            await _plain(secured, 405, "the board is read-only: GET only", [(b"allow", b"GET, HEAD")])
            return
        if self.allowed_hosts is not None:
            host = headers.get("host", "")
            name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
            if name not in self.allowed_hosts:
                await _plain(secured, 400, "this board answers only requests addressed to this machine (Host "
                                           f"{host!r} refused)")
                return
        if self.token is not None and not self._authorised(scope, headers):
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            given = query.get("token")
            if given is not None and hmac.compare_digest(given.encode(), self.token.encode()):
                rest = urlencode([(k, v) for k, v in parse_qsl(scope.get("query_string", b"").decode("latin-1"))
                                  if k != "token"])
                where = scope.get("path", "/") + (f"?{rest}" if rest else "")
                cookie = f"{COOKIE}={self._cookie}; HttpOnly; SameSite=Strict; Path=/"
                await _plain(secured, 303, "signed in", [(b"location", where.encode()),
                                                          (b"set-cookie", cookie.encode())])
                return
            await _plain(secured, 401, "this board needs its token: open the address it printed when it started "
                                       "(with ?token=...), or send 'Authorization: Bearer <token>'")
            return
        await self.app(scope, receive, secured)

    def _authorised(self, scope: dict[str, Any], headers: dict[str, str]) -> bool:
        assert self.token is not None and self._cookie is not None
        auth = headers.get("authorization", "")
        if auth.startswith("Bearer ") and hmac.compare_digest(auth[7:].strip().encode(), self.token.encode()):
            return True
        for part in headers.get("cookie", "").split(";"):
            k, _, v = part.strip().partition("=")
            if k == COOKIE and hmac.compare_digest(v.encode(), self._cookie.encode()):
                return True
        return False


async def _plain(send: Any, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = (text + "\n").encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()), *(extra or [])]})
    await send({"type": "http.response.body", "body": body})


class Hub:
    """Hands the events read from the files to the open live pages (server-sent events).

    While at least one page listens, a task looks at the event files every :data:`POLL_S` seconds
    and walks the folders for new files every :data:`WALK_S` seconds; each listener gets the events
    of its run (or of every run)."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.listeners: dict[asyncio.Queue[Any], str | None] = {}
        self._task: asyncio.Task[None] | None = None
        self.closing = False

    def subscribe(self, run: str | None) -> asyncio.Queue[Any]:
        q: asyncio.Queue[Any] = asyncio.Queue()
        self.listeners[q] = run
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._watch())
        return q

    def unsubscribe(self, q: asyncio.Queue[Any]) -> None:
        self.listeners.pop(q, None)

    def close(self) -> None:
        self.closing = True
        for q in list(self.listeners):
            q.put_nowait(None)

    async def _watch(self) -> None:
        _, cursor = self.catalog.feed_since(1 << 62)
        last_walk = time.monotonic()
        while self.listeners and not self.closing:
            await asyncio.sleep(POLL_S)
            try:
                if time.monotonic() - last_walk >= WALK_S:
                    await asyncio.to_thread(self.catalog.refresh)
                    last_walk = time.monotonic()
                else:
                    await asyncio.to_thread(self.catalog.poll)
            except Exception:  # noqa: BLE001 - a file that cannot be read now: the live pages go on
                log.exception("board: reading the folders failed; trying again")
                continue
            items, cursor = self.catalog.feed_since(cursor)
            for eid, ev in items:
                payload = json.dumps({"id": eid, "event": json.loads(ev.model_dump_json())})
                for q, run in list(self.listeners.items()):
                    if run is None or run == eid:
                        q.put_nowait(payload)


def _fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _mb(v: Any) -> str:
    if v is None:
        return ""
    return f"{v:.3g}" if v < 10 else f"{v:,.1f}"


def _when(t: Any) -> str:
    if not t:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(t)))


def _secs(v: Any) -> str:
    if v is None:
        return ""
    v = float(v)
    return f"{v:.2f} s" if v < 60 else f"{int(v // 60)} min {v % 60:.0f} s"


def _row_html(r: Any, has_r2: bool) -> Any:
    """One row of the runs table, every value escaped; made once per row (a row object lives until
    its file changes), so that a page over many runs escapes only what changed."""
    from markupsafe import Markup, escape

    cached = r.html.get(has_r2)
    if cached is not None:
        return cached
    c = r.show
    link = f"/{'comparison' if r.kind == 'comparison' else 'run'}/{r.id}"

    def td(text: Any, v: Any = None, cls: str | None = None, volatile: bool = False) -> str:
        attrs = (f' class="{escape(cls)}"' if cls else "") + (f' data-v="{escape(v)}"' if v is not None else "")
        return f"<td{attrs}{' data-volatile' if volatile else ''}>{escape(text)}</td>"

    status = str(r.status) + (f" ({r.runs} runs)" if r.kind == "comparison" and r.runs is not None else "")
    cells = [td(r.kind), f'<td><a href="{escape(link)}">{escape(r.method or "(unnamed)")}</a></td>',
             td(r.dataset or ""), td(c["parties"]), td(c["seed"], c["seed"]), td(c["accuracy"], c["v_accuracy"]),
             td(c["auc"], c["v_auc"])]
    if has_r2:
        cells.append(td(c["r2"], c["v_r2"]))
    # (data-volatile: times and durations, which the docs' screenshots leave out of their comparison)
    cells += [td(c["mb"], c["v_mb"]), td(r.kept, c["v_kept"]), td(c["seconds"], c["v_seconds"], volatile=True),
              td(status, cls=f"status-{c['status']}"), td(c["when"], r.when, volatile=True), td(r.where, cls="where")]
    out = Markup(f'<tr data-id="{escape(r.id)}" class="{escape(r.kind)}">{"".join(cells)}</tr>')
    r.html[has_r2] = out
    return out


def _templates() -> Any:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE / "templates")), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(fmt=_fmt, mb=_mb, when=_when, secs=_secs)
    env.globals.update(palette=PALETTE, row_html=_row_html)
    return env


def create_app(folders: list[str | Path], *, token: str | None = None, allowed_hosts: frozenset[str] | None = None,
               deployments: list[Any] | None = None, command_line: Any = None) -> Any:
    """The board over ``folders`` (an ASGI application; :func:`verticalfs.board.serve` runs it).

    ``token``: required of every request when given. ``allowed_hosts``: the ``Host`` names answered
    (``None``: any; the command sets the loopback names when it binds a loopback address).
    ``deployments``: :class:`~verticalfs.board.deployment.DeploymentStatus` objects to show.
    ``command_line(options)``: a result's ``verticalfs run`` command from its stored options (the
    command line passes :func:`verticalfs.cli.run_command_line`; without it, only the commands of
    events and comparisons are shown).
    """
    from fastapi import FastAPI, HTTPException
    from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
    from fastapi.staticfiles import StaticFiles

    from verticalfs.version import __version__

    catalog = Catalog(list(folders))
    catalog.refresh()
    hub = Hub(catalog)
    env = _templates()
    for name in ("runs.html", "run.html", "comparison.html", "live.html", "deployment.html", "error.html"):
        env.get_template(name)  # compiled now, not on a user's first page
    deps = list(deployments or [])

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        yield
        hub.close()

    app = FastAPI(title="verticalfs board", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.catalog, app.state.hub = catalog, hub
    app.mount("/static", StaticFiles(directory=str(HERE / "static"), follow_symlink=False), name="static")

    def page(name: str, **ctx: Any) -> HTMLResponse:
        ctx.setdefault("partial", False)
        html = env.get_template(name).render(version=__version__, folders=catalog.folders,
                                             deployments=len(deps), **ctx)
        return HTMLResponse(html)

    def missing(what: str) -> HTMLResponse:
        resp = page("error.html", title="not found", message=what, page_id="error")
        resp.status_code = 404
        return resp

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        return Response(status_code=204)

    @app.get("/", response_class=HTMLResponse)
    async def runs_page() -> HTMLResponse:
        await asyncio.to_thread(catalog.refresh)
        rows = catalog.rows
        return page("runs.html", rows=rows, models=catalog.models, page_id="runs",
                    has_r2=any(r.r2 is not None for r in rows), skipped_links=catalog.skipped_links,
                    truncated=catalog.truncated, title="Runs")

    @app.get("/api/runs")
    async def runs_json() -> JSONResponse:
        await asyncio.to_thread(catalog.refresh)
        return JSONResponse([{k: v for k, v in vars(r).items() if k not in ("show", "html")} for r in catalog.rows])

    @app.get("/run/{eid}", response_class=HTMLResponse)
    async def run_page(eid: str, partial: int = 0) -> HTMLResponse:
        ent = catalog.entry(eid)
        if ent is None:
            await asyncio.to_thread(catalog.refresh)
            ent = catalog.entry(eid)
        if ent is None or ent[0] != "run":
            return missing(f"no run {eid!r} under the board's folders")
        try:
            view = await asyncio.to_thread(run_view, catalog, eid, ent[1], command_line)
        except ConfigError as exc:  # gone or changed since the walk
            return missing(str(exc))
        title = f"{view['method'] or 'run'}" + (f" · seed {view['seed']}" if view["seed"] is not None else "")
        return page("run_body.html" if partial else "run.html", v=view, page_id="run", title=title,
                    partial=bool(partial))

    @app.get("/comparison/{eid}", response_class=HTMLResponse)
    async def comparison_page(eid: str) -> HTMLResponse:
        ent = catalog.entry(eid)
        if ent is None:
            await asyncio.to_thread(catalog.refresh)
            ent = catalog.entry(eid)
        if ent is None or ent[0] != "comparison":
            return missing(f"no comparison {eid!r} under the board's folders")
        try:
            view = await asyncio.to_thread(comparison_view, catalog, eid, ent[1])
        except ConfigError as exc:
            return missing(str(exc))
        return page("comparison.html", v=view, page_id="comparison", title=f"Comparison · {view.get('dataset')}")

    @app.get("/live", response_class=HTMLResponse)
    async def live_page(partial: int = 0) -> HTMLResponse:
        await asyncio.to_thread(catalog.refresh)
        rows = catalog.rows
        live = [r for r in rows if r.live and r.status == "running"]
        done = [r for r in rows if r.live and r.status != "running"][:20]
        return page("live_body.html" if partial else "live.html", live=live, done=done, page_id="live",
                    title="Live", partial=bool(partial), event_files=catalog.event_files())

    @app.get("/api/stream")
    async def stream(run: str | None = None) -> StreamingResponse:
        if run is not None and not is_id(run):
            raise HTTPException(404, "no such run")
        q = hub.subscribe(run)

        async def gen() -> Any:
            try:
                yield ": verticalfs board\n\n"
                while not hub.closing:
                    try:
                        item = await asyncio.wait_for(q.get(), timeout=15)
                    except asyncio.TimeoutError:
                        yield ": keep-alive\n\n"
                        continue
                    if item is None:
                        break
                    yield f"event: vf\ndata: {item}\n\n"
            finally:
                hub.unsubscribe(q)

        return StreamingResponse(gen(), media_type="text/event-stream",
                                 headers={"x-accel-buffering": "no"})

    @app.get("/deployment", response_class=HTMLResponse)
    async def deployment_page(n: int = 0) -> HTMLResponse:
        if not deps:
            return missing("the board was started without a deployment file (verticalfs board --deployment FILE)")
        if not 0 <= n < len(deps):
            return missing(f"no deployment {n}")
        return page("deployment.html", d=deps[n].describe(), n=n, all=[x.describe() for x in deps],
                    page_id="deployment", title="Deployment")

    @app.get("/api/deployment/status")
    async def deployment_status(n: int = 0) -> JSONResponse:
        if not 0 <= n < len(deps):
            raise HTTPException(404, "no such deployment")
        return JSONResponse(await asyncio.to_thread(deps[n].status))

    return Guard(app, token=token, allowed_hosts=allowed_hosts)
