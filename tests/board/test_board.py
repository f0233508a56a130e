"""The board over real results, through HTTP (FastAPI's test client): every page, and the security
rules (confined to its folders, everything escaped, read-only, host and token checks)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("jinja2")

from fastapi.testclient import TestClient  # noqa: E402

from tests.board.helpers import XSS, XSS_SCRIPT, LiveRun, injected, real_compare, real_run  # noqa: E402
from verticalfs.board.app import CSP, create_app  # noqa: E402
from verticalfs.board.catalog import Catalog  # noqa: E402
from verticalfs.exceptions import ConfigError  # noqa: E402

TOKEN = "a-token-of-at-least-16-chars"


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("results")
    run = real_run(root / "runs" / "vfl" / "result.json")
    injected(run, root / "hostile" / "result.json")
    real_compare(root / "cmp")
    live = LiveRun(root / "live" / "run.jsonl")
    live.phase("setup")
    live.epoch(1, 0.8)
    live.epoch(2, 0.85)
    live.selection()
    # outside the folder: a result and a folder that links inside it must not bring in
    outside = tmp_path_factory.mktemp("outside")
    secret = json.loads(run.read_text())
    secret["method"] = "SECRET-OUTSIDE"
    (outside / "secret.json").write_text(json.dumps(secret))
    os.symlink(outside / "secret.json", root / "runs" / "linked.json")
    os.symlink(outside, root / "linked-folder")
    return root


@pytest.fixture(scope="module")
def client(results):
    from verticalfs.cli import run_command_line

    with TestClient(create_app([results], command_line=run_command_line)) as c:
        yield c


def _ids(html: str, kind: str) -> list[str]:
    return re.findall(rf'href="/{kind}/([0-9a-f]{{16}})"', html)


def test_runs_page_lists_every_run_and_comparison(client):
    r = client.get("/")
    assert r.status_code == 200
    html = r.text
    rows = re.findall(r'<tr data-id="([0-9a-f]{16})" class="(run|comparison)"', html)
    kinds = [k for _, k in rows]
    # one run, one hostile run, a live run, a comparison and its 6 runs (vfl-original, vfl, feast x 2 seeds)
    assert kinds.count("comparison") == 1 and kinds.count("run") == 3 + 6, kinds
    assert "SECRET-OUTSIDE" not in html  # a link leading out of the folder is not followed
    assert "2 link(s) leading outside the folders ignored" in html  # the file and the folder
    assert len(_ids(html, "run")) == 9 and len(_ids(html, "comparison")) == 1
    api = client.get("/api/runs").json()  # the same table as JSON
    assert sorted(r["id"] for r in api) == sorted(i for i, _ in rows) and "html" not in api[0]


def test_run_page_shows_parties_phases_epochs_selection_and_command(client, results):
    html = client.get("/").text
    res = json.loads((results / "runs" / "vfl" / "result.json").read_text())
    rid = next(i for i in _ids(html, "run") if "runs/vfl/result.json" in client.get(f"/run/{i}").text)
    page = client.get(f"/run/{rid}").text
    for p in res["parties"]:
        assert f"<td>{p}</td>" in page
    for phase in res["communication"]["by_phase"]:
        assert f"<td>{phase}</td>" in page
    data = json.loads(re.search(r'<script type="application/json" id="run-data">(.*?)</script>', page, re.S).group(1))
    assert data["epochs"]["series"][0]["values"] == [h["accuracy"] for h in res["history"]]
    assert data["phases"]["total"] == list(res["communication"]["by_phase"].values())
    kept = [c["column"] for p in res["selection"]["parties"].values() for c in p["columns"] if c["kept"]]
    assert kept and all(f"<td>{c}</td>" in page for c in kept)
    assert "verticalfs run --method vfl --dataset breast_cancer --parties 2 --noise 0.5" in page


def test_live_run_page_from_events(client, results):
    html = client.get("/live").text
    (rid,) = re.findall(r'<tr data-id="([0-9a-f]{16})"><td><a href="/run/', html)
    page = client.get(f"/run/{rid}").text
    assert 'data-live="yes"' in page and "running" in page
    data = json.loads(re.search(r'id="run-data">(.*?)</script>', page, re.S).group(1))
    assert data["phases"]["parties"] == ["bank", "telecom"] and data["phases"]["bytes"]["telecom"] == [2000]
    assert data["phases"]["seconds"] == [0.5]
    assert data["epochs"]["series"][0]["values"] == [0.8, 0.85]
    assert "plan" in page and "gold" in page  # the selection grouped by source column (plan=gold)
    assert "verticalfs run -m vfl -d breast_cancer --events" in page  # the command of its run_start
    assert "<th>min_key_bits</th>" in page  # the parties' policies


def test_comparison_page_has_every_method_and_seed(client, results):
    (cid,) = _ids(client.get("/").text, "comparison")
    page = client.get(f"/comparison/{cid}").text
    chart = json.loads(re.search(r'id="compare-data">(.*?)</script>', page, re.S).group(1))
    summary = json.loads((results / "cmp" / "results.json").read_text())
    got = sorted((d["method"], d["seed"]) for d in chart["datasets"])
    want = sorted((m, r["seed"]) for m, rs in summary["runs"].items() for r in rs)
    assert got == want
    targets = [r["target"] for rs in summary["runs"].values() for r in rs if r.get("target") is not None]
    assert len(targets) == 4 and chart["target"] == pytest.approx(sum(targets) / 4)
    for row in summary["table"]:
        assert f"<td>{row['method']}</td>" in page
    for rid in _ids(page, "run"):  # each run of the comparison has its page
        assert client.get(f"/run/{rid}").status_code == 200


@pytest.mark.parametrize("path", [
    "/run/../../../../etc/passwd", "/run/..%2f..%2f..%2fetc%2fpasswd", "/run/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "/comparison/..%2f..%2fcmp%2fresults.json", "/run/0123456789abcdef", "/run/ZZZZZZZZZZZZZZZZ",
    "/static/../catalog.py", "/static/..%2fcatalog.py", "/static/%2e%2e/app.py", "/static/..%2f..%2f..%2fetc%2fpasswd",
    "/api/stream?run=../../etc/passwd",
])
def test_path_traversal_fails(client, path):
    r = client.get(path)
    assert r.status_code == 404, (path, r.status_code)
    assert "root:" not in r.text and "def create_app" not in r.text and "import" not in r.text


def test_markup_in_names_and_parameters_is_escaped(client):
    html = client.get("/").text
    assert XSS not in html and "&lt;img src=x onerror=" in html
    rid = next(i for i in _ids(html, "run") if "hostile" in client.get(f"/run/{i}").text)
    page = client.get(f"/run/{rid}").text
    assert XSS not in page and XSS_SCRIPT not in page
    assert "&lt;img src=x onerror=&#34;window.__pwned=1&#34;&gt;" in page
    assert "&lt;/script&gt;&lt;script&gt;window.__pwned=2&lt;/script&gt;" in page
    # nothing but the board's own two scripts and its JSON data blocks
    assert re.findall(r"<script[^>]*>", page) == ['<script src="/static/chart.umd.min.js" defer>',
                                                   '<script src="/static/board.js" defer>',
                                                   '<script type="application/json" id="run-data">']


def test_security_headers_and_read_only(client):
    r = client.get("/")
    assert r.headers["content-security-policy"] == CSP and "script-src 'self'" in CSP and "unsafe" not in CSP
    assert r.headers["x-content-type-options"] == "nosniff" and r.headers["x-frame-options"] == "DENY"
    for method in ("post", "put", "delete", "patch"):
        assert getattr(client, method)("/").status_code == 405


def test_host_header_of_another_site_is_refused(results):
    app = create_app([results], allowed_hosts=frozenset({"127.0.0.1", "localhost"}))
    with TestClient(app, base_url="http://127.0.0.1:8765") as c:
        assert c.get("/").status_code == 200
        assert c.get("/", headers={"host": "evil.example:8765"}).status_code == 400  # DNS rebinding


def test_token(results):
    with TestClient(create_app([results], token=TOKEN)) as c:
        assert c.get("/").status_code == 401
        assert c.get("/api/runs").status_code == 401
        assert c.get("/static/board.js").status_code == 401
        assert c.get("/?token=wrong-token-of-16-chars").status_code == 401
        assert c.get("/", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200
        r = c.get(f"/live?token={TOKEN}&partial=1", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/live?partial=1"
        assert "HttpOnly" in r.headers["set-cookie"] and TOKEN not in r.headers["set-cookie"]
        assert c.get("/live").status_code == 200  # the cookie


def test_a_non_loopback_bind_needs_a_token(tmp_path):
    from verticalfs.board import check_bind, read_token

    with pytest.raises(ConfigError, match="--token"):
        check_bind("0.0.0.0", None)
    check_bind("127.0.0.1", None)
    check_bind("::1", None)
    check_bind("0.0.0.0", TOKEN)
    with pytest.raises(ConfigError, match="16 characters"):
        read_token("short", None)
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n")
    f.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        read_token(None, f)
    f.chmod(0o600)
    assert read_token(None, f) == TOKEN
    out = subprocess.run([sys.executable, "-m", "verticalfs", "board", str(tmp_path), "--host", "0.0.0.0"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--token" in out.stderr


def test_vendored_chart_js_is_the_published_file():
    static = Path(__file__).resolve().parents[2] / "src" / "verticalfs" / "board" / "static"
    digest = hashlib.sha256((static / "chart.umd.min.js").read_bytes()).hexdigest()
    assert digest == "87364cc2b2a76a6684929e7d6b80b18a897794db38400caff1fcf1791c6925d2"  # Chart.js 4.6.1
    assert "MIT License" in (static / "LICENSE-chart.js.md").read_text()


def test_catalog_reads_a_growing_event_file_once(tmp_path):
    live = LiveRun(tmp_path / "a.jsonl")
    cat = Catalog([tmp_path])
    cat.refresh()
    (row,) = cat.rows
    assert row.status == "running" and row.live
    _, n = cat.feed_since(0)
    live.epoch(1, 0.9)
    new = cat.poll()
    assert [e.type for _, e in new] == ["epoch"] and new[0][0] == row.id
    live.end(0.91)
    cat.refresh()
    assert cat.row(row.id).status == "ok" and cat.row(row.id).accuracy == 0.91
    items, _ = cat.feed_since(n)
    assert [e.type for _, e in items] == ["epoch", "run_end"]


def test_board_import_adds_nothing_to_the_library_or_cli():
    from tests.test_packaging import loaded_after

    for code in ("import verticalfs",
                 "from typer.testing import CliRunner\nfrom verticalfs.cli import app\n"
                 "assert CliRunner().invoke(app, ['run', '--help']).exit_code == 0"):
        mods = loaded_after(code + "\nimport sys; assert 'verticalfs.board' not in sys.modules")
        assert not mods & {"fastapi", "uvicorn", "jinja2", "starlette"}


def test_files_of_the_wrong_shape_are_shown_as_far_as_they_go(tmp_path):
    """A results folder from elsewhere: keys of the wrong type, garbage event lines, deep nesting.
    Every page answers (200), none fails."""
    w = tmp_path
    (w / "a").mkdir()
    (w / "a" / "result.json").write_text(json.dumps({
        "method": ["x"], "metrics": "nope", "communication": 5, "parties": "abc", "seed": "zero",
        "selection": {"parties": {"p": {"columns": [1, "x", {"column": None}], "kept": "k"}}, "n_kept": "3"},
        "history": [1, "a", {"epoch": "x", "bytes": "many", "accuracy": "high"}], "config": {"cli": "x"},
        "info": {"deployment": {"policies": {"p": "everything"}, "rows": [1]}}, "warnings": "one", "chance": 3,
        "timings": []}))
    (w / "b" / "runs").mkdir(parents=True)
    runs = {"m": [1, {"history": "x"}, {"seed": "s", "history": [{"bytes": "a"}]}]}
    (w / "b" / "results.json").write_text(json.dumps({"table": "x", "runs": runs, "seeds": 3, "metric": ["acc"]}))
    (w / "b" / "runs" / "config.json").write_text(json.dumps({"methods": "all", "data": []}))
    (w / "c" / "runs").mkdir(parents=True)
    (w / "c" / "runs" / "m__seed0.json").write_text(json.dumps({"seed": 0, "metric_name": 5, "history": {"x": 1}}))
    (w / "d").mkdir()
    (w / "d" / "manifest.json").write_text(json.dumps({"format": 1, "method": {}, "parties": [1, 2]}))
    (w / "e").mkdir()
    (w / "e" / "events.jsonl").write_text('not json\n{"type": "epoch"}\n' + "[" * 100_000 + "\n")
    (w / "f").mkdir()
    (w / "f" / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with TestClient(create_app([w])) as c:
        page = c.get("/")
        assert page.status_code == 200
        ids = _ids(page.text, "run") + _ids(page.text, "comparison")
        assert len(ids) >= 3
        for i in _ids(page.text, "run"):
            assert c.get(f"/run/{i}").status_code == 200, i
        for i in _ids(page.text, "comparison"):
            assert c.get(f"/comparison/{i}").status_code == 200, i
        assert c.get("/live").status_code == 200


def test_a_comparison_known_from_its_events_lists_its_runs(tmp_path):
    """A comparison run with --events: its run_start (kind compare), then each run naming it as its parent."""
    from verticalfs import __version__
    from verticalfs.events import Emitter, EventLog

    with EventLog(tmp_path / "cmp.jsonl") as log:
        parent = Emitter([log])
        parent.emit("run_start", kind="compare", dataset="breast_cancer", parties=["p1", "p2"], version=__version__,
                    command=["verticalfs", "compare", "-d", "breast_cancer", "--events", "cmp.jsonl"])
        for seed in (0, 1):
            child = Emitter([log])
            child.emit("run_start", method="vfl", dataset="breast_cancer", parties=["p1", "p2"], seed=seed,
                       parent=parent.run, version=__version__)
            child.emit("epoch", phase="train", index=1, metrics={"accuracy": 0.9}, bytes=10, bytes_total=10)
    with TestClient(create_app([tmp_path])) as c:
        (cid,) = _ids(c.get("/").text, "comparison")
        page = c.get(f"/comparison/{cid}")
        assert page.status_code == 200
        assert len(_ids(page.text, "run")) == 2
        assert "verticalfs compare -d breast_cancer --events cmp.jsonl" in page.text


def test_a_file_removed_or_swapped_for_a_link_out_after_the_walk(tmp_path, tmp_path_factory):
    """The page of a run whose file went away, or became a link out of the folder, since the walk
    answers 404 naming the file, and reads nothing outside."""
    run = real_run(tmp_path / "r" / "result.json")
    with TestClient(create_app([tmp_path])) as c:
        (rid,) = _ids(c.get("/").text, "run")
        outside = tmp_path_factory.mktemp("elsewhere") / "secret.json"
        d = json.loads(run.read_text())
        d["method"] = "SECRET-OUTSIDE"
        outside.write_text(json.dumps(d))
        run.unlink()
        os.symlink(outside, run)  # same size and time would not be re-read: the page must check again
        r = c.get(f"/run/{rid}")
        assert r.status_code == 404 and "SECRET-OUTSIDE" not in r.text and "outside its folder" in r.text
        run.unlink()
        r = c.get(f"/run/{rid}")
        assert r.status_code == 404 and "SECRET-OUTSIDE" not in r.text


def test_a_result_and_the_events_it_names_are_one_run(tmp_path):
    """`run --events run.jsonl --out result.json`: the result's options name the events file, and
    the run there with its method and seed is the same run (one row: the events' phases and the
    result's figures)."""
    from verticalfs.cli import run_command_line

    live = LiveRun(tmp_path / "out" / "run.jsonl")
    live.phase("train")
    live.epoch(1, 0.9)
    live.end(0.9)
    other = LiveRun(tmp_path / "out" / "run.jsonl", method="feast")  # another run in the same file
    other.end(0.8)
    res = real_run(tmp_path / "out" / "result.json")
    d = json.loads(res.read_text())
    d["config"]["cli"]["events"] = "out/run.jsonl"  # as given on the command line, from another folder
    res.write_text(json.dumps(d))
    with TestClient(create_app([tmp_path], command_line=run_command_line)) as c:
        html = c.get("/").text
        rows = re.findall(r'<tr data-id="([0-9a-f]{16})" class="run"', html)
        assert len(rows) == 2  # vfl (events + result) and feast (events only)
        assert "out/run.jsonl + out/result.json" in html
        (rid,) = [i for i in rows if "out/result.json" in c.get(f"/run/{i}").text]
        page = c.get(f"/run/{rid}").text
        data = json.loads(re.search(r'id="run-data">(.*?)</script>', page, re.S).group(1))
        assert data["phases"]["parties"] == ["bank", "telecom"]  # the events' phases
        assert "<td>party1</td>" in page and data["epochs"]["series"][0]["values"] == [  # the result's history
            h["accuracy"] for h in d["history"]]


@pytest.mark.slow
def test_a_comparison_and_its_events_are_one_comparison(tmp_path):
    """`verticalfs compare --events cmp.jsonl --out cmp`: its results.json and its events are one
    comparison, and each of its runs one run with its events' phases per party."""
    subprocess.run([sys.executable, "-m", "verticalfs", "compare", "-d", "breast_cancer", "--parties", "2", "--seeds",
                    "0", "--epochs", "1", "--methods", "vfl,feast", "--events", str(tmp_path / "cmp.jsonl"),
                    "--out", str(tmp_path / "cmp"), "--no-progress"], check=True, capture_output=True, timeout=600)
    with TestClient(create_app([tmp_path])) as c:
        html = c.get("/").text
        assert len(_ids(html, "comparison")) == 1
        runs = _ids(html, "run")
        assert len(runs) == 2  # vfl, feast (no noise: no reference run): the events' runs are the comparison's
        (cid,) = _ids(html, "comparison")
        assert sorted(_ids(c.get(f"/comparison/{cid}").text, "run")) == sorted(runs)
        for rid in runs:
            page = c.get(f"/run/{rid}").text
            data = json.loads(re.search(r'id="run-data">(.*?)</script>', page, re.S).group(1))
            assert data["phases"]["parties"] == ["party1", "party2"], rid
