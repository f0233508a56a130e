"""What the board finds under its folders: runs, comparisons, event streams and saved models.

A :class:`Catalog` walks the folders it was given (never following a link out of them), recognises
each file by its content and keeps one small summary per file, keyed by its size and modification
time, so that a page asks the disk only for what changed since the last look:

- a run's result JSON (``verticalfs run --out``: ``method``, ``metrics``, ``communication``);
- a comparison (``verticalfs compare --out``: ``results.json`` with ``table`` and ``runs``; its
  per-seed runs each become a run of the table, and its ``runs/`` folder alone, while the comparison
  runs or after it was interrupted, an incomplete comparison);
- event streams (JSON lines of :mod:`verticalfs.events`, ``--events FILE``; any ``.jsonl`` or
  ``.ndjson`` file whose lines are events), read as they grow (:class:`~verticalfs.events.EventReader`):
  each run id in them is a run, live until its ``run_end``;
- saved models (a folder with a ``manifest.json`` of :mod:`verticalfs.model_files`).

Every entry has an opaque id (hex digits, a hash of its file's place under its folder): a page
names an entry only by such an id, so no URL names a file. A file is read again at its resolved
path only after checking that the path still lies inside its folder (a link swapped in after the
walk is refused).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verticalfs.events import EventReader, parse_event, to_json
from verticalfs.exceptions import ConfigError

#: a JSON file larger than this is not read (a result is a few hundred kB at most)
MAX_JSON_BYTES = 64 << 20
#: files and folders looked at per walk at most (a folder given by mistake, e.g. ``/``, stays cheap)
MAX_ENTRIES = 200_000
#: events kept for the live pages' feed
FEED_SIZE = 10_000
#: folders never entered (virtual environments, version control, caches)
SKIP_DIRS = frozenset({".git", ".hg", ".svn", ".venv", "venv", "node_modules", "__pycache__", ".mypy_cache",
                       ".pytest_cache", ".ruff_cache", "site-packages"})
EVENT_SUFFIXES = (".jsonl", ".ndjson")
#: the compare folder's per-run files and its stored configuration (verticalfs.compare, verticalfs.resume)
COMPARE_RUNS_DIR = "runs"
COMPARE_CONFIG = "config.json"


def entry_id(*parts: object) -> str:
    """An entry's id: 16 hex digits of a hash of where it was found."""
    return hashlib.sha256("\x00".join(map(str, parts)).encode()).hexdigest()[:16]


def is_id(text: str) -> bool:
    return len(text) == 16 and all(c in "0123456789abcdef" for c in text)


def _float(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if f == f and f not in (float("inf"), float("-inf")) else None


def _d(v: Any) -> dict[str, Any]:
    """``v`` when it is a JSON object, else an empty one (files from elsewhere: any shape)."""
    return v if isinstance(v, dict) else {}


def _l(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _text(v: Any) -> str | None:
    return None if v is None else str(v)


@dataclass
class Row:
    """One line of the runs table (a run or a comparison)."""

    id: str
    kind: str  # "run" | "comparison"
    where: str  # the file, relative to its folder (shown; never used to open anything)
    folder: str  # the folder given on the command line, as given
    method: str | None = None
    dataset: str | None = None
    parties: list[str] = field(default_factory=list)
    seed: int | None = None
    accuracy: float | None = None
    auc: float | None = None
    r2: float | None = None
    metric_name: str | None = None
    metric: float | None = None
    mb: float | None = None
    n_kept: int | None = None
    n_features: int | None = None
    seconds: float | None = None
    status: str = "ok"  # ok, running, error, interrupted, incomplete
    when: float = 0.0  # Unix seconds: the run's start (events) or its file's modification time
    parent: str | None = None  # a comparison's id, for its runs
    runs: int | None = None  # a comparison: its runs
    live: bool = False  # has an event stream
    progress: str = ""  # a run with events: where it is (its last epoch, round, stage or phase)
    show: dict[str, str] = field(default_factory=dict)  # the table's cells as text (made once per change)
    html: dict[bool, Any] = field(default_factory=dict)  # the row's escaped markup, by "has an R² column"

    @property
    def kept(self) -> str:
        if self.n_kept is None:
            return ""
        return f"{self.n_kept}/{self.n_features}" if self.n_features is not None else str(self.n_kept)


@dataclass
class Model:
    """A saved model folder (its manifest)."""

    id: str
    where: str
    folder: str
    method: str | None
    task: str | None
    parties: dict[str, int]  # party -> features
    version: str | None
    when: float


@dataclass
class EventRun:
    """The events of one run id in one file."""

    run: str
    events: list[Any] = field(default_factory=list)

    @property
    def start(self) -> Any:
        return next((e for e in self.events if e.type == "run_start"), None)

    @property
    def end(self) -> Any:
        return next((e for e in reversed(self.events) if e.type == "run_end"), None)


@dataclass
class _File:
    """What one file held when last read (its size and mtime say whether to read it again)."""

    path: Path
    root: int
    rel: str
    sig: tuple[int, int]
    kind: str  # result, compare, compare-run, compare-config, manifest, events, other
    data: Any = None
    reader: EventReader | None = None
    runs: dict[str, EventRun] | None = None


class Catalog:
    """The runs, comparisons, event streams and models under ``folders`` (see the module docstring).

    Thread-safe: pages and the live watcher share one catalog.
    """

    def __init__(self, folders: list[str | Path]) -> None:
        if not folders:
            raise ConfigError("the board needs at least one folder to read")
        self.folders = [str(f) for f in folders]
        self.roots: list[Path] = []
        for f in folders:
            p = Path(f).expanduser()
            if not p.is_dir():
                raise ConfigError(f"board: {str(f)!r} is not a folder (give the folders holding results: `verticalfs "
                                  "run --out`, `compare --out`, `--events` files, saved models)")
            self.roots.append(p.resolve())
        self._files: dict[str, _File] = {}
        self._lock = threading.RLock()
        self.skipped_links = 0  # files whose link leads outside their folder
        self.truncated = False
        self.scanned_at = 0.0
        self._rows: list[Row] = []
        self._models: list[Model] = []
        self._index: dict[str, tuple[str, Any]] = {}
        #: every event read since the start, numbered, for the live pages (the newest FEED_SIZE kept)
        self._feed: list[tuple[int, str, Any]] = []
        self._fed = 0

    def feed_since(self, n: int) -> tuple[list[tuple[str, Any]], int]:
        """The events read after number ``n`` (by anyone: a page's refresh or the watcher), as
        ``(entry id, event)``, and the number to ask from next time."""
        with self._lock:
            return [(eid, ev) for k, eid, ev in self._feed if k > n], self._fed

    # ------------------------------------------------------------------ walking
    def _walk(self, root: Path) -> Iterator[tuple[str, os.DirEntry[str]]]:
        """Every regular file under ``root`` (links to files inside it included, links leading out
        and linked folders not), with its path relative to ``root``."""
        stack = [(str(root), "")]
        seen = 0
        root_s = str(root)
        while stack:
            path, rel = stack.pop()
            try:
                with os.scandir(path) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError:
                continue
            for e in entries:
                seen += 1
                if seen > MAX_ENTRIES:
                    self.truncated = True
                    return
                name_rel = f"{rel}/{e.name}" if rel else e.name
                try:
                    if e.is_symlink():
                        real = os.path.realpath(e.path)
                        if not (real.startswith(root_s + os.sep)) or not os.path.isfile(real):
                            self.skipped_links += 1
                            continue
                        yield name_rel, e
                    elif e.is_dir(follow_symlinks=False):
                        if e.name not in SKIP_DIRS and not e.name.startswith("."):
                            stack.append((e.path, name_rel))
                    elif e.is_file(follow_symlinks=False):
                        yield name_rel, e
                except OSError:
                    continue

    def refresh(self) -> None:
        """Walk the folders; read the files that are new or changed; forget those gone."""
        with self._lock:
            self.skipped_links = 0
            self.truncated = False
            found: set[str] = set()
            changed = False
            for k, root in enumerate(self.roots):
                for rel, e in self._walk(root):
                    name = e.name
                    is_json = name.endswith(".json")
                    is_events = name.endswith(EVENT_SUFFIXES)
                    if not (is_json or is_events):
                        continue
                    try:
                        st = e.stat()
                    except OSError:
                        continue
                    key = f"{k}:{rel}"
                    found.add(key)
                    sig = (st.st_size, st.st_mtime_ns)
                    old = self._files.get(key)
                    if old is not None and old.sig == sig:
                        continue
                    changed = True
                    if old is not None and old.kind == "events" and st.st_size >= old.sig[0]:
                        old.sig = sig  # grown: read the new lines only
                        self._read_events(old)
                        continue
                    f = _File(Path(e.path), k, rel, sig, "other")
                    self._read(f, is_events, st.st_size)
                    self._files[key] = f
            gone = [k for k in self._files if k not in found]
            for key in gone:
                del self._files[key]
            if changed or gone or not self.scanned_at:  # nothing new: the table stands
                self._build()
            self.scanned_at = time.time()

    def poll(self) -> list[tuple[str, Any]]:
        """The events appended to the known event files since the last look, as ``(entry id, event)``
        (cheap: one ``stat`` per event file; :meth:`refresh` finds new files)."""
        out: list[tuple[str, Any]] = []
        with self._lock:
            changed = False
            for f in self._files.values():
                if f.kind != "events":
                    continue
                try:
                    st = f.path.stat()
                except OSError:
                    continue
                sig = (st.st_size, st.st_mtime_ns)
                if sig == f.sig:
                    continue
                f.sig = sig
                for ev in self._read_events(f):
                    out.append((self._events_id(f, ev.run), ev))
                changed = True
            if changed:
                self._build()
        return out

    # ------------------------------------------------------------------ reading
    def _read(self, f: _File, is_events: bool, size: int) -> None:
        if is_events:
            f.kind, f.reader, f.runs = "events", EventReader(f.path), {}
            if not self._read_events(f) and f.reader.bad:
                f.kind, f.reader, f.runs = "other", None, None  # not an event stream
            return
        if size > MAX_JSON_BYTES:
            return
        try:
            data = json.loads(f.path.read_bytes())
        except (OSError, ValueError, RecursionError):  # (UnicodeDecodeError is a ValueError)
            return
        if not isinstance(data, dict):
            return
        kind = classify(data, f.rel)
        f.kind = kind
        # a result is summarised (its page reads it again); a comparison's files are kept whole
        f.data = _result_summary(data) if kind == "result" else data if kind != "other" else None

    def _read_events(self, f: _File) -> list[Any]:
        if f.reader is None or f.runs is None:
            return []
        try:
            size = f.path.stat().st_size
        except OSError:
            return []
        if size < f.reader._offset:  # replaced by a shorter file: read it afresh
            f.reader, f.runs = EventReader(f.path), {}
        new = f.reader.new()
        for ev in new:
            f.runs.setdefault(ev.run, EventRun(ev.run)).events.append(ev)
            self._fed += 1
            self._feed.append((self._fed, self._events_id(f, ev.run), ev))
        if len(self._feed) > FEED_SIZE:
            del self._feed[:len(self._feed) - FEED_SIZE]
        return new

    # ------------------------------------------------------------------ building
    def _events_id(self, f: _File, run: str) -> str:
        return entry_id("events", f.root, f.rel, run)

    def _build(self) -> None:
        rows: list[Row] = []
        models: list[Model] = []
        index: dict[str, tuple[str, Any]] = {}
        compare_dirs: set[str] = set()
        for f in self._files.values():
            if f.kind == "compare":
                compare_dirs.add(str(f.path.parent))
        # a run's events name the result file it wrote (run_end.result): matched by real path
        named = any(r.end is not None and r.end.result for f in self._files.values() if f.kind == "events"
                    for r in (f.runs or {}).values())
        results_by_path = {os.path.realpath(f.path): f for f in self._files.values()
                           if f.kind == "result"} if named else {}
        merged: set[str] = set()
        # a result of `run --events FILE --out R` names its events file (config.cli.events): its run
        # there (the same method and seed, ended before the result was written) is the same run
        by_events = self._results_by_events()
        # a comparison's results.json and its own events (compare --events): one comparison, each of
        # its runs one run
        with_events = self._compares_with_events()
        absorbed = {(ef.rel, ef.root, run) for cf, (ef, run, kids) in with_events.items()} | {
            (kf.rel, kf.root, k) for _, _, kids in with_events.values() for (kf, k) in kids.values()}
        # event streams first: a run with events and a result file is one row (the events' id)
        compares_by_run: dict[str, tuple[str, _File | None]] = {}
        for f in sorted((f for f in self._files.values() if f.kind == "events"), key=lambda f: f.rel):
            for run in (f.runs or {}).values():
                if (f.rel, f.root, run.run) in absorbed:
                    continue
                start, end = run.start, run.end
                rid = self._events_id(f, run.run)
                res_file = None
                if end is not None and end.result:
                    res_path = Path(end.result)
                    if not res_path.is_absolute():
                        res_path = f.path.parent / res_path
                    res_file = results_by_path.get(os.path.realpath(res_path))
                if res_file is None:
                    res_file = by_events.get((f.rel, f.root, run.run))
                if start is not None and start.kind == "compare":
                    compares_by_run[run.run] = (rid, None)
                row = _events_row(rid, self.folders[f.root], f.rel, run)
                if res_file is not None:
                    merged.add(str(res_file.path))
                    _merge_result(row, res_file.data)
                    row.where = f"{f.rel} + {res_file.rel}"
                    index[rid] = ("run", {"events": (f, run.run), "result": res_file})
                else:
                    index[rid] = ("run", {"events": (f, run.run)})
                if start is not None and start.kind == "compare":
                    row.kind = "comparison"
                    index[rid] = ("comparison", {"events": (f, run.run)})
                rows.append(row)
        for r in rows:  # runs of a comparison with events name it as their parent
            src = index[r.id][1]
            ev = src.get("events")
            if ev is not None:
                st = ev[0].runs[ev[1]].start
                if st is not None and st.parent in compares_by_run:
                    r.parent = compares_by_run[st.parent][0]
        for f in sorted(self._files.values(), key=lambda f: f.rel):
            folder = self.folders[f.root]
            if f.kind == "result" and str(f.path) not in merged:
                rid = entry_id("result", f.root, f.rel)
                row = Row(id=rid, kind="run", where=f.rel, folder=folder, when=f.sig[1] / 1e9)
                _merge_result(row, f.data)
                rows.append(row)
                index[rid] = ("run", {"result": f})
            elif f.kind == "compare":
                cid = entry_id("compare", f.root, f.rel)
                crows = _compare_rows(cid, folder, f.rel, f.data, f.sig[1] / 1e9)
                rows.extend(crows)
                ev_file, ev_run, kids = with_events.get(f.rel + f"\x00{f.root}", (None, None, {}))
                index[cid] = ("comparison", {"compare": f} if ev_file is None else
                              {"compare": f, "events": (ev_file, ev_run)})
                if ev_file is not None:
                    crows[0].where = f"{f.rel} + {ev_file.rel}"
                for r in crows[1:]:
                    of_run: dict[str, Any] = {"compare": f, "method": r.method, "seed": r.seed}
                    kid = kids.get((r.method, r.seed))
                    if kid is not None:  # its events: phases per party, the selection, the parties
                        of_run["events"] = kid
                        r.live, r.where = True, f"{r.where} + {kid[0].rel}"
                    index[r.id] = ("run", of_run)
            elif f.kind == "manifest":
                mid = entry_id("model", f.root, f.rel)
                d = f.data
                raw = _d(d.get("parties"))
                parties = {str(p): len(v["feature_names"]) if isinstance(v.get("feature_names"), list) else 0
                           for p, v in raw.items() if isinstance(v, dict)}
                models.append(Model(id=mid, where=str(Path(f.rel).parent), folder=folder,
                                    method=_text(d.get("method")), task=_text(d.get("task")), parties=parties,
                                    version=_text(d.get("verticalfs_version")), when=f.sig[1] / 1e9))
                index[mid] = ("model", {"manifest": f})
        # a compare folder's runs/ without its results.json: a comparison still running, or interrupted
        partial: dict[str, list[_File]] = {}
        for f in self._files.values():
            if f.kind == "compare-run":
                out_dir = str(f.path.parent.parent)
                if out_dir not in compare_dirs:
                    partial.setdefault(out_dir, []).append(f)
        for _out_dir, files in sorted(partial.items()):
            f0 = files[0]
            rel = str(Path(f0.rel).parent.parent / "results.json")
            cid = entry_id("compare", f0.root, rel)
            summary = partial_summary(files)
            crows = _compare_rows(cid, self.folders[f0.root], str(Path(f0.rel).parent), summary,
                                  max(f.sig[1] for f in files) / 1e9)
            crows[0].status = "incomplete"
            rows.extend(crows)
            index[cid] = ("comparison", {"partial": files})
            for r in crows[1:]:
                index[r.id] = ("run", {"partial": files, "method": r.method, "seed": r.seed})
        rows.sort(key=lambda r: r.when, reverse=True)
        for r in rows:
            r.show = _shown(r)
        self._rows, self._models, self._index = rows, models, index

    def _compares_with_events(self) -> dict[str, tuple[_File, str, dict[tuple[str | None, Any], tuple[_File, str]]]]:
        """``compare file -> (events file, comparison's run id, {(method, seed): (events file, run id)})``:
        a comparison's events (its ``run_start`` of kind ``compare``, ended before its results.json
        was written) whose runs are the comparison's runs (by method and seed)."""
        events = [f for f in self._files.values() if f.kind == "events" and f.runs]
        compares: list[tuple[_File, EventRun]] = [(f, r) for f in events for r in (f.runs or {}).values()
                                                  if r.start is not None and r.start.kind == "compare"
                                                  and r.end is not None]
        if not compares:
            return {}
        kids: dict[str, dict[tuple[str | None, Any], tuple[_File, str]]] = {}
        for f in events:
            for r in (f.runs or {}).values():
                if r.start is not None and r.start.parent:
                    kids.setdefault(r.start.parent, {})[(r.start.method, r.start.seed)] = (f, r.run)
        out: dict[str, tuple[_File, str, dict[tuple[str | None, Any], tuple[_File, str]]]] = {}
        for cf in self._files.values():
            if cf.kind != "compare":
                continue
            have = {(str(m), _d(r).get("seed")) for m, rs in _d(cf.data.get("runs")).items() for r in _l(rs)}
            for ef, er in compares:
                mine = kids.get(er.run, {})
                if mine and set(mine) <= have and er.end.time <= cf.sig[1] / 1e9 + 1.0:
                    out[cf.rel + f"\x00{cf.root}"] = (ef, er.run, mine)
                    break
        return out

    def _results_by_events(self) -> dict[tuple[str, int, str], _File]:
        """``(events file, folder, run id) -> result file`` for results that name their events file."""
        out: dict[tuple[str, int, str], _File] = {}
        events = [f for f in self._files.values() if f.kind == "events" and f.runs]
        for res in self._files.values():
            if res.kind != "result" or not res.data.get("events"):
                continue
            named = str(res.data["events"])
            target = os.path.realpath(named) if os.path.isabs(named) else None
            for f in events:
                here = str(f.path)
                if not (here == target or os.path.realpath(here) == target
                        or (target is None and (here == named or here.endswith(os.sep + named.lstrip("./"))))):
                    continue
                done = [r for r in (f.runs or {}).values() if r.start is not None and r.end is not None
                        and r.start.method == res.data["method"] and r.start.seed == res.data["seed"]
                        and r.end.time <= res.sig[1] / 1e9 + 1.0]
                if done:
                    last = max(done, key=lambda r: r.end.time)
                    out.setdefault((f.rel, f.root, last.run), res)
        return out

    # ------------------------------------------------------------------ views
    @property
    def rows(self) -> list[Row]:
        with self._lock:
            return list(self._rows)

    @property
    def models(self) -> list[Model]:
        with self._lock:
            return list(self._models)

    def row(self, eid: str) -> Row | None:
        with self._lock:
            return next((r for r in self._rows if r.id == eid), None)

    def entry(self, eid: str) -> tuple[str, dict[str, Any]] | None:
        """``(kind, sources)`` of the entry ``eid``, or ``None`` (an unknown or malformed id)."""
        if not is_id(eid):
            return None
        with self._lock:
            return self._index.get(eid)

    def load(self, f: _File) -> dict[str, Any]:
        """The whole JSON of ``f``, read again at its path after checking it is still inside its folder."""
        path = self.confined(f)
        try:
            data = json.loads(path.read_bytes())
        except (OSError, ValueError, RecursionError) as exc:
            raise ConfigError(f"{f.rel}: cannot be read ({type(exc).__name__})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{f.rel}: not a JSON object")
        return data

    def confined(self, f: _File) -> Path:
        root = self.roots[f.root]
        real = Path(os.path.realpath(f.path))
        if root not in real.parents:
            raise ConfigError(f"{f.rel} now leads outside its folder; not read")
        return real

    def events_of(self, eid: str) -> list[Any]:
        ent = self.entry(eid)
        if ent is None or "events" not in ent[1]:
            return []
        f, run = ent[1]["events"]
        with self._lock:
            return list(f.runs[run].events) if f.runs and run in f.runs else []

    def children(self, eid: str) -> list[Row]:
        with self._lock:
            return [r for r in self._rows if r.parent == eid]

    def event_files(self) -> int:
        with self._lock:
            return sum(f.kind == "events" for f in self._files.values())


def _num(v: float | None, digits: int = 4) -> str:
    return "" if v is None else f"{v:.{digits}f}"


def _shown(r: Row) -> dict[str, str]:
    """A row's cells as the runs table shows them (numbers rounded, times local)."""
    mb = "" if r.mb is None else (f"{r.mb:.3g}" if r.mb < 10 else f"{r.mb:,.1f}")
    secs = "" if r.seconds is None else (f"{r.seconds:.2f} s" if r.seconds < 60 else
                                        f"{int(r.seconds // 60)} min {r.seconds % 60:.0f} s")
    return {"accuracy": _num(r.accuracy), "auc": _num(r.auc), "r2": _num(r.r2), "mb": mb, "seconds": secs,
            "when": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.when)) if r.when else "",
            "parties": ", ".join(r.parties), "seed": "" if r.seed is None else str(r.seed),
            "status": r.status.replace(" ", "-"),
            "v_accuracy": "" if r.accuracy is None else repr(r.accuracy), "v_auc": "" if r.auc is None else repr(r.auc),
            "v_r2": "" if r.r2 is None else repr(r.r2), "v_mb": "" if r.mb is None else repr(r.mb),
            "v_kept": "" if r.n_kept is None else str(r.n_kept),
            "v_seconds": "" if r.seconds is None else repr(r.seconds)}


def classify(data: dict[str, Any], rel: str) -> str:
    """What a JSON object found at ``rel`` is (see the module docstring)."""
    if "table" in data and isinstance(data.get("runs"), dict) and "seeds" in data:
        return "compare"
    if {"method", "metrics", "communication"} <= data.keys():
        return "result"
    parts = Path(rel).parts
    in_runs = len(parts) >= 2 and parts[-2] == COMPARE_RUNS_DIR
    if in_runs and parts[-1] == COMPARE_CONFIG and "methods" in data:
        return "compare-config"
    if in_runs and {"seed", "metric_name", "history"} <= data.keys():
        return "compare-run"
    if parts[-1] == "manifest.json" and "parties" in data and "method" in data and "format" in data:
        return "manifest"
    return "other"


def _result_summary(d: dict[str, Any]) -> dict[str, Any]:
    """The few figures of a result JSON the runs table shows (the page reads the file again)."""
    metrics = _d(d.get("metrics"))
    sel = _d(d.get("selection"))
    comm = _d(d.get("communication"))
    tim = _d(d.get("timings"))
    parties = _l(d.get("parties"))
    return {"method": _text(d.get("method")), "dataset": _text(d.get("dataset")),
            "parties": [str(p) for p in parties], "seed": d.get("seed") if isinstance(d.get("seed"), int) else None,
            "metrics": {str(k): _float(v) for k, v in metrics.items()},
            "n_kept": sel.get("n_kept") if isinstance(sel.get("n_kept"), int) else None,
            "n_features": sel.get("n_features") if isinstance(sel.get("n_features"), int) else None,
            "bytes": _float(comm.get("total_bytes")), "seconds": _float(tim.get("total_seconds")),
            "events": _text(_d(_d(d.get("config")).get("cli")).get("events"))}


def _primary(metrics: dict[str, Any]) -> tuple[str | None, float | None]:
    for k in ("accuracy", "r2"):
        if metrics.get(k) is not None:
            return k, _float(metrics[k])
    for k, v in metrics.items():
        if _float(v) is not None:
            return k, _float(v)
    return None, None


def _merge_result(row: Row, s: dict[str, Any]) -> None:
    row.method = s["method"] or row.method
    row.dataset = s["dataset"] or row.dataset
    row.parties = s["parties"] or row.parties
    row.seed = s["seed"] if s["seed"] is not None else row.seed
    m = s["metrics"]
    row.accuracy, row.auc, row.r2 = m.get("accuracy"), m.get("roc_auc"), m.get("r2")
    row.metric_name, row.metric = _primary(m)
    row.n_kept, row.n_features = s["n_kept"], s["n_features"]
    row.mb = None if s["bytes"] is None else s["bytes"] / 1e6
    row.seconds = s["seconds"] if s["seconds"] is not None else row.seconds


def _events_row(rid: str, folder: str, rel: str, run: EventRun) -> Row:
    start, end = run.start, run.end
    row = Row(id=rid, kind="run", where=rel, folder=folder, live=True,
              when=run.events[0].time if run.events else 0.0)
    if start is not None:
        row.method, row.dataset, row.parties, row.seed = start.method, start.dataset, list(start.parties), start.seed
    last_bytes = None
    metrics: dict[str, Any] = {}
    for ev in run.events:
        if ev.type in ("epoch", "round"):
            row.progress = f"{ev.phase} {ev.type} {ev.index}" + (f"/{ev.total}" if ev.total else "")
            last_bytes = ev.bytes_total
            metrics = {**metrics, **{k: v for k, v in ev.metrics.items() if not k.startswith("val_")}}
        elif ev.type == "phase":
            last_bytes = ev.bytes_total or last_bytes
            if ev.state == "start":
                row.progress = ev.name
        elif ev.type == "stage":
            row.progress = f"{ev.name} {ev.done}/{ev.total}"
        elif ev.type == "selection":
            row.n_kept = sum(p.n_kept for p in ev.parties.values())
            row.n_features = sum(p.n_features for p in ev.parties.values())
    if end is not None:
        row.status = end.status
        metrics = {**metrics, **end.metrics} if end.metrics else metrics
        last_bytes = end.bytes_total or last_bytes
        row.seconds = end.seconds
    else:
        row.status = "running"
        row.seconds = (run.events[-1].time - run.events[0].time) if run.events else None
    row.accuracy, row.auc, row.r2 = (_float(metrics.get("accuracy")), _float(metrics.get("roc_auc")),
                                     _float(metrics.get("r2")))
    row.metric_name, row.metric = _primary(metrics)
    row.mb = None if last_bytes is None else last_bytes / 1e6
    return row


def _compare_rows(cid: str, folder: str, rel: str, d: dict[str, Any], when: float) -> list[Row]:
    """A comparison's row, then one per run of it (method x seed)."""
    runs = _d(d.get("runs"))
    metric = _text(d.get("metric"))
    n = sum(len(v) for v in runs.values() if isinstance(v, list))
    methods = [str(m) for m in runs]
    best = None
    for r in _l(d.get("table")):
        if isinstance(r, dict) and _float(r.get("metric")) is not None:
            best = max(best or -1e300, _float(r["metric"]) or 0.0)
    parties = d.get("parties")
    head = Row(id=cid, kind="comparison", where=rel, folder=folder, method=", ".join(methods),
               dataset=_text(d.get("dataset")),
               parties=[f"{parties} parties"] if isinstance(parties, int) else [], metric_name=metric,
               metric=best, runs=n, when=when)
    out = [head]
    for m, rs in runs.items():
        if not isinstance(rs, list):
            continue
        for k, r in enumerate(rs):
            if not isinstance(r, dict):
                continue
            metrics = _d(r.get("metrics"))
            seed = r.get("seed") if isinstance(r.get("seed"), int) else k
            row = Row(id=entry_id("compare-run", cid, m, seed), kind="run", where=f"{rel} [{m}, seed {seed}]",
                      folder=folder, method=str(m), dataset=head.dataset, parties=head.parties, seed=seed,
                      accuracy=_float(metrics.get("accuracy")), auc=_float(metrics.get("roc_auc")),
                      r2=_float(metrics.get("r2")), metric_name=metric, metric=_float(r.get("metric")),
                      mb=_float(r.get("total_mb")),
                      n_kept=r.get("n_kept") if isinstance(r.get("n_kept"), int) else None,
                      status="ok" if r.get("chance") is None else "at chance", when=when, parent=cid)
            out.append(row)
    return out


def partial_summary(files: list[_File]) -> dict[str, Any]:
    """A comparison's summary from its ``runs/`` files alone (no ``results.json`` yet)."""
    runs: dict[str, list[dict[str, Any]]] = {}
    metric = None
    for f in sorted(files, key=lambda f: f.rel):
        name = Path(f.rel).stem
        method = name.rsplit("__seed", 1)[0]
        runs.setdefault(method, []).append(f.data)
        metric = metric or f.data.get("metric_name")
    return {"dataset": None, "parties": None, "metric": metric, "seeds": [], "table": [], "runs": runs,
            "skipped": {}, "warnings": []}


def event_json(ev: Any) -> dict[str, Any]:
    return to_json(ev)


__all__ = ["Catalog", "Model", "Row", "classify", "entry_id", "event_json", "is_id", "parse_event"]
