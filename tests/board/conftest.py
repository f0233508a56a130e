"""Fixtures of the board's tests: a board process on 127.0.0.1 and a headless Chromium.

The browser tests (marker ``browser``) use Debian's ``chromium`` and ``chromium-driver`` through
Selenium, with the driver and the browser named explicitly (Selenium's own manager downloads
nothing). Where either is missing they are skipped with a reason that says so and how to install
them (``scripts/install-browser``), and the session's summary repeats it in one line.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")


def browser_paths() -> tuple[str | None, str | None]:
    browser = next((shutil.which(b) for b in CHROMIUM if shutil.which(b)), None)
    return browser, shutil.which("chromedriver")


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install 'verticalfs[dev]')"
    browser, driver = browser_paths()
    if browser is None or driver is None:
        what = " and ".join(n for n, p in (("chromium", browser), ("chromedriver", driver)) if p is None)
        return f"{what} not installed: scripts/install-browser installs Debian's chromium and chromium-driver"
    return None


@pytest.fixture(scope="session")
def browser():
    why = _missing()
    if why is not None:
        pytest.skip(f"browser test skipped: {why}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    b, d = browser_paths()
    profile = tempfile.mkdtemp(prefix="vf-board-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = b
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-default-apps",
              "--window-size=1400,1000", "--hide-scrollbars", "--force-device-scale-factor=1",
              f"--user-data-dir={profile}"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(d))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def pytest_terminal_summary(terminalreporter):
    """One line when browser tests were skipped for want of the browser (also under xdist, where
    the skips happen in the workers)."""
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if "browser test skipped" in str(getattr(r, "longrepr", ""))]
    if skipped:
        why = str(skipped[0].longrepr).split("browser test skipped: ", 1)[-1].rstrip("')\"")
        terminalreporter.write_line(f"board: {len(skipped)} browser test(s) SKIPPED: {why}", yellow=True)


class Board:
    """A ``verticalfs board`` process (its address read from what it prints)."""

    def __init__(self, *args: str, env: dict | None = None, cwd: Path | None = None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "verticalfs", "board", "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                                     env={**os.environ, "COLUMNS": "300", **(env or {})})
        line = self.proc.stdout.readline()
        m = re.search(r"board on (http://\S+?/)(\?token=\S+)? over", line)
        if m is None:
            self.stop()
            raise AssertionError(f"the board did not start: {line!r} {self.proc.stderr.read()}")
        self.url = m.group(1)
        self.signin = m.group(2) or ""

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for s in (self.proc.stdout, self.proc.stderr):
            if s is not None:
                s.close()
        return self.proc.returncode


@pytest.fixture
def start_board():
    started: list[Board] = []

    def start(*args: str, env: dict | None = None, cwd: Path | None = None) -> Board:
        """A board over ``args`` (run in ``cwd``: the pages then show the folders as given there)."""
        b = Board(*args, env=env, cwd=cwd)
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop()


def console_errors(driver) -> list[dict]:
    """The page's console messages of level SEVERE (errors, failed loads, CSP refusals)."""
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "guide" / "img"


def screenshot(driver, name: str, full: bool = False) -> Path:
    """A screenshot for the documentation (docs/guide/img/board-<name>.png), written by the test
    itself so that the docs never show an old board. It replaces the file when any pixel differs
    outside the page's ``data-volatile`` elements (times, durations, temporary paths, ports): a
    run that changes nothing else leaves the work tree clean, any other change is written."""
    import io

    import numpy as np
    from PIL import Image

    DOCS_IMG.mkdir(parents=True, exist_ok=True)
    path = DOCS_IMG / f"board-{name}.png"
    size = driver.get_window_size()
    if full:  # the whole page: as tall as its content (the width, and so the charts' layout, unchanged)
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(size["width"], min(int(height) + 140, 4000))
    boxes = driver.execute_script(
        "return Array.from(document.querySelectorAll('[data-volatile]')).map(e => {"
        " const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; });")
    png = driver.get_screenshot_as_png()
    if full:
        driver.set_window_size(size["width"], size["height"])
    if path.is_file():
        old = np.asarray(Image.open(path).convert("RGB")).copy()
        new = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).copy()
        if old.shape == new.shape:
            for x0, y0, x1, y1 in boxes:
                for img in (old, new):
                    img[max(0, int(y0) - 1):int(y1) + 2, max(0, int(x0) - 1):int(x1) + 2] = 0
            if np.array_equal(old, new):
                return path
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(png)
    os.replace(tmp, path)
    return path
