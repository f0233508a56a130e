"""The board in a real browser (headless Chromium through Selenium): every page over real results
(the demo's comparison, a run, a deployment run of three party processes), what the user must see
(the table's rows, the charts' series, the tooltip, the live update after an event is appended),
no console error, no script from a hostile results folder. The screenshots of docs/guide/board.md
are taken here.

Skipped, with the reason, where Chromium or its driver is not installed (scripts/install-browser).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from tests.board.conftest import console_errors, screenshot  # noqa: E402
from tests.board.helpers import XSS, LiveRun, injected, real_run  # noqa: E402

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]


def wait(driver, js: str, timeout: float = 15.0):
    """Poll the page's JavaScript expression ``js`` until it is truthy; its value."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: d.execute_script(f"return {js}"))


def open_page(driver, url: str) -> None:
    driver.get(url)
    wait(driver, "document.body && document.body.dataset.ready === 'yes'")


def series(driver, canvas: str) -> list[dict]:
    return driver.execute_script(
        "const c = Chart.getChart(document.getElementById(arguments[0]));"
        "return c ? c.data.datasets.map(d => ({label: d.label, n: d.data.length, method: d.method || null,"
        " seed: d.seed === undefined ? null : d.seed})) : null;", canvas)


def test_live_run_appears_and_updates_without_a_reload(browser, start_board, tmp_path):
    """A run writing its events appears on the Live page and its page follows each new event
    (server-sent events), without reloading (a mark set on the window stays)."""
    board = start_board(tmp_path.name, cwd=tmp_path.parent)  # (the pages show the folder as given)
    open_page(browser, board.url + "live")
    wait(browser, "document.getElementById('live-state').textContent === 'live'")
    assert browser.find_element("id", "no-live").text == "No run is running."
    browser.execute_script("window.__notReloaded = true")
    run = LiveRun(tmp_path / "run.jsonl")  # a new file in the folder: the board finds it while it runs
    run.phase("setup")
    wait(browser, "document.querySelectorAll('#live-runs tbody tr').length === 1")
    assert browser.execute_script("return window.__notReloaded") is True
    row = browser.find_element("css selector", "#live-runs tbody tr")
    assert "vfl" in row.text and "bank, telecom" in row.text
    run.epoch(1, 0.71)  # the row follows: its progress and accuracy
    wait(browser, "(c => c && c.textContent === 'train epoch 1/5')(document.querySelector('#live-runs td.progress'))")
    assert "0.7100" in browser.find_element("css selector", "#live-runs tbody tr").text
    screenshot(browser, "live")
    row = browser.find_element("css selector", "#live-runs tbody tr")
    row.find_element("tag name", "a").click()
    wait(browser, "document.body.dataset.ready === 'yes' && document.getElementById('run-body')")
    browser.execute_script("window.__notReloaded = true")
    assert series(browser, "phases-chart") == [{"label": "bank", "n": 1, "method": None, "seed": None},
                                               {"label": "telecom", "n": 1, "method": None, "seed": None}]
    lags = []
    for k, acc in enumerate((0.71, 0.83, 0.88), start=1):  # the first epoch was written before
        t0 = time.monotonic()
        if k > 1:
            run.epoch(k, acc)
        wait(browser, f"(c => c && c.data.datasets[0].data.length === {k})"
                      "(Chart.getChart(document.getElementById('epochs-chart')))")
        if k > 1:
            lags.append(time.monotonic() - t0)
    assert browser.execute_script("return Chart.getChart(document.getElementById('epochs-chart'))"
                                  ".data.datasets[0].data") == [0.71, 0.83, 0.88]
    run.phase("train", seconds=1.5, per_party=3000)
    run.selection()
    wait(browser, "document.querySelectorAll('.selection').length === 2")
    run.end(0.88)
    wait(browser, "document.getElementById('status').dataset.status === 'ok'")
    assert browser.execute_script("return window.__notReloaded") is True
    assert series(browser, "phases-chart")[0]["n"] == 2
    print(f"live update after each epoch event: {', '.join(f'{x * 1000:.0f} ms' for x in lags)} "
          f"(load {os.getloadavg()[0]:.1f})")
    screenshot(browser, "run-live", full=True)
    assert console_errors(browser) == []


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """The demo's results (./scripts/demo --short, as CI runs it), a run's result and a hostile one."""
    root = tmp_path_factory.mktemp("board-results")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["bash", str(ROOT / "scripts" / "demo"), "--short", str(root / "demo")], check=True, env=env,
                   cwd=ROOT, capture_output=True, timeout=900)
    real_run(root / "less-vfl" / "result.json", method="less-vfl")
    return root


@pytest.mark.slow
def test_pages_over_the_demo(browser, start_board, demo, tmp_path):
    board = start_board(demo.name, cwd=demo.parent)
    summary = json.loads((demo / "demo" / "results.json").read_text())
    n_runs = sum(len(v) for v in summary["runs"].values())
    # Runs: every run and the comparison, sortable and filterable
    open_page(browser, board.url)
    rows = browser.find_elements("css selector", "#runs tbody tr")
    assert len(rows) == 1 + n_runs + 1
    browser.find_element("id", "filter").send_keys("feast")
    wait(browser, "document.getElementById('shown').textContent !== ''")
    visible = [r.text for r in rows if r.is_displayed()]
    assert visible and all("feast" in t for t in visible)
    browser.find_element("id", "filter").clear()
    browser.execute_script("document.getElementById('filter').dispatchEvent(new Event('input'))")
    head = browser.find_element("css selector", "#runs th[data-key='accuracy']")
    head.click()  # sorted by accuracy, highest first
    accs = [c.get_attribute("data-v") for c in browser.find_elements("css selector", "#runs tbody tr td:nth-child(6)")]
    nums = [float(a) for a in accs if a]
    assert nums == sorted(nums, reverse=True) and len(nums) == n_runs + 1
    screenshot(browser, "runs")
    assert console_errors(browser) == []
    # the comparison: one series per method and seed, the target line, a tooltip with seed, epoch, MB
    browser.find_element("css selector", "#runs tbody tr.comparison a").click()
    wait(browser, "document.body.dataset.page === 'comparison' && document.body.dataset.ready === 'yes'")
    got = series(browser, "compare-chart")
    methods = {s["method"] for s in got}
    assert set(summary["runs"]) <= methods and "target" in methods
    assert browser.execute_script("return Chart.getChart(document.getElementById('compare-chart'))"
                                  ".options.scales.x.type") == "logarithmic"
    k = next(i for i, s in enumerate(got) if s["method"] == "vfl")
    from selenium.webdriver.common.action_chains import ActionChains

    canvas = browser.find_element("id", "compare-chart")
    x, y = browser.execute_script(
        "const c = Chart.getChart(arguments[0]); const p = c.getDatasetMeta(arguments[1]).data[1];"
        "return [p.x, p.y];", canvas, k)
    w, h = canvas.size["width"], canvas.size["height"]
    ActionChains(browser).move_to_element_with_offset(canvas, int(x - w / 2), int(y - h / 2)).perform()
    tip = wait(browser, "(c => c.tooltip && c.tooltip.opacity > 0 && c.tooltip.body"
                        " && c.tooltip.body.map(b => b.lines.join(' ')).join(' '))"
                        "(Chart.getChart(document.getElementById('compare-chart')))")
    assert "vfl, seed 0" in tip and "epoch 2" in tip and "MB" in tip, tip
    table = browser.find_element("id", "compare-table").text
    assert all(m in table for m in summary["runs"])
    screenshot(browser, "comparison")
    assert console_errors(browser) == []
    # each run's page
    links = [a.get_attribute("href") for a in browser.find_elements("css selector", "#compare-runs a")]
    assert len(links) == n_runs
    for link in links:
        open_page(browser, link)
        assert browser.find_element("id", "metrics").is_displayed()
        assert series(browser, "epochs-chart")[0]["n"] >= 1
        assert console_errors(browser) == []
    # a run of `run --out`: phases, selection grouped by column, the command
    open_page(browser, board.url + "?q=less-vfl")
    browser.find_element("css selector", "#runs tbody tr:not([hidden]) td:nth-child(2) a").click()
    wait(browser, "document.body.dataset.page === 'run' && document.body.dataset.ready === 'yes'")
    assert series(browser, "phases-chart")[0]["label"] == "all parties"
    assert browser.find_elements("css selector", ".selection-table tr.kept")
    assert "verticalfs run --method less-vfl" in browser.find_element("id", "command").text
    screenshot(browser, "run", full=True)
    # a hostile folder: its markup is shown as text and never runs
    injected(demo / "less-vfl" / "result.json", tmp_path / "hostile" / "result.json")
    hostile = start_board(str(tmp_path / "hostile"))
    open_page(browser, hostile.url)
    assert XSS in browser.find_element("css selector", "#runs tbody").text
    assert browser.execute_script("return window.__pwned === undefined")
    browser.find_element("css selector", "#runs tbody tr:not([hidden]) td:nth-child(2) a").click()
    wait(browser, "document.body.dataset.page === 'run' && document.body.dataset.ready === 'yes'")
    assert XSS in browser.find_element("tag name", "h1").text
    assert XSS in browser.find_element("css selector", ".selection-table").text
    assert browser.execute_script("return window.__pwned === undefined && document.images.length === 0")
    assert console_errors(browser) == []


@pytest.mark.slow
def test_deployment_page_over_three_party_processes(browser, start_board, tmp_path):
    """The test deployment's three processes (two `verticalfs party serve`, mutual TLS, and the label
    holder's `verticalfs run --config`, which serves the label party's own columns while it runs),
    then a prediction (which opens the saved model at each party): the board's Deployment page
    shows each feature party reachable with its policy and the model it has open, asked with the
    label holder's certificate, and the label party's block not served now; the run's page shows
    the policies the parties reported."""
    pytest.importorskip("grpc")
    from tests.deploy.test_deployment import PARTIES, _files, _listening, _start, _stop

    site = tmp_path / "site"
    site.mkdir()
    files = _files(site)
    subprocess.run([sys.executable, "-m", "verticalfs", "certs", "make", "--parties", ",".join(PARTIES),
                    "--out", str(site / "certs")], check=True, capture_output=True)
    from tests.deploy.test_deployment import _free_port

    lines = ['label_party = "bank"', 'label_column = "default"', 'id_column = "customer_id"', 'certs = "certs"',
             "connect_timeout = 5"]
    for p in PARTIES:
        lines += [f"[parties.{p}]", f'address = "127.0.0.1:{_free_port()}"', f'file = "{files[p].name}"']
    lines += ["[parties.insurer.policy]", "min_key_bits = 3072", "max_sessions = 3"]
    (site / "deployment.toml").write_text("\n".join(lines) + "\n")
    procs = {p: _start(site, p) for p in PARTIES if p != "bank"}
    try:
        for p, proc in procs.items():
            _listening(proc, p)
        results = tmp_path / "results"
        run = subprocess.run([sys.executable, "-m", "verticalfs", "run", "--config", str(site / "deployment.toml"),
                              "-m", "vfl", "-p", "epochs=2", "-p", "batch_size=64", "--no-progress",
                              "--out", str(results / "deployment" / "result.json"),
                              "--save-model", str(results / "models" / "scorer")],
                             cwd=site, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        pred = subprocess.run([sys.executable, "-m", "verticalfs", "predict", "--config", str(site / "deployment.toml"),
                               "--model", str(results / "models" / "scorer"), "--out", str(tmp_path / "p.csv")],
                              cwd=site, capture_output=True, text=True, timeout=300)
        assert pred.returncode == 0, pred.stderr
        board = start_board("results", "--deployment", "site/deployment.toml", cwd=tmp_path)
        open_page(browser, board.url + "deployment")
        wait(browser, "Number(document.getElementById('deployment').dataset.polls || 0) >= 1", timeout=30)
        cells = {r.get_attribute("data-party"): {c.get_attribute("class"): c.text for c in
                                                 r.find_elements("tag name", "td") if c.get_attribute("class")}
                 for r in browser.find_elements("css selector", "#deployment tbody tr")}
        assert set(cells) == set(PARTIES)
        assert cells["bank"]["reachable"].startswith("no:") and "bank" in cells["bank"]["reachable"]
        for p in ("telecom", "insurer"):
            assert cells[p]["reachable"].startswith("yes"), cells[p]
            assert "release_columns false" in cells[p]["policy"] and "methods all" in cells[p]["policy"]
            assert cells[p]["models"] == "scorer", cells[p]
            assert cells[p]["rows"].isdigit() and int(cells[p]["rows"]) > 500
        assert "min_key_bits 3072" in cells["insurer"]["policy"] and cells["insurer"]["sessions"].startswith("0 of 3")
        screenshot(browser, "deployment")
        assert console_errors(browser) == []
        # the run's page: the policies each party reported, the rows it kept
        open_page(browser, board.url + "?q=deployment")
        browser.find_element("css selector", "#runs tbody tr:not([hidden]) td:nth-child(2) a").click()
        wait(browser, "document.body.dataset.page === 'run' && document.body.dataset.ready === 'yes'")
        parties = browser.find_element("id", "parties").text
        assert "min_key_bits" in parties and "3072" in parties and " of " in parties
        assert console_errors(browser) == []
    finally:
        for proc in procs.values():
            _stop(proc)
            if proc.stdout is not None:
                proc.stdout.close()


@pytest.mark.slow
def test_a_real_run_with_events_appears_and_updates_live(browser, start_board, tmp_path):
    """`verticalfs run ... --events FILE` (a real training run, its own process): it appears on the
    Live page while it runs, its page's chart grows epoch by epoch without a reload, and when it ends
    its result file and its events are one run."""
    board = start_board(str(tmp_path))
    open_page(browser, board.url + "live")
    wait(browser, "document.getElementById('live-state').textContent === 'live'")
    browser.execute_script("window.__notReloaded = true")
    run = subprocess.Popen([sys.executable, "-m", "verticalfs", "run", "-m", "vfl", "-d", "breast_cancer", "--parties",
                            "2", "-e", "40", "-p", "batch_size=16", "--events", str(tmp_path / "run.jsonl"),
                            "--out", str(tmp_path / "result.json"), "--no-progress"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait(browser, "document.querySelectorAll('#live-runs tbody tr').length === 1", timeout=120)
        assert browser.execute_script("return window.__notReloaded") is True
        browser.find_element("css selector", "#live-runs tbody tr a").click()
        wait(browser, "document.body.dataset.page === 'run' && document.body.dataset.ready === 'yes'")
        browser.execute_script("window.__notReloaded = true")
        points = ("(c => c ? c.data.datasets[0].data.length : 0)"
                  "(Chart.getChart(document.getElementById('epochs-chart')))")
        first = wait(browser, points, timeout=120)
        if run.poll() is None:  # still running: the chart grows while it does
            wait(browser, f"{points} > {first}", timeout=120)
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        wait(browser, "document.getElementById('status').dataset.status === 'ok'", timeout=30)
        assert wait(browser, points) == 40
        assert browser.execute_script("return window.__notReloaded") is True
        assert console_errors(browser) == []
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    open_page(browser, board.url)
    rows = browser.find_elements("css selector", "#runs tbody tr")
    assert len(rows) == 1 and "run.jsonl + result.json" in rows[0].text  # the events and the result: one run
