"""The network benchmarks leave nothing behind when stopped with SIGTERM: no network namespace, no
party process (``shaped.py``), no party or ``serve-model`` process (``serve.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("grpc")
HERE = Path(__file__).parent
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def _children_of(pid: int) -> set[int]:
    """Every descendant of ``pid`` now (from /proc)."""
    parents = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parents[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = {c for c, pp in parents.items() if pp == p}
        out |= kids
        todo += list(kids)
    return out


def _alive(pids: set[int]) -> set[int]:
    return {p for p in pids if Path(f"/proc/{p}").exists() and "zombie" not in
            Path(f"/proc/{p}/status").read_text().lower()}


def _term_when(proc: subprocess.Popen, line_has: str, timeout: float = 300) -> tuple[set[int], str]:
    """SIGTERM ``proc`` once it printed a line containing ``line_has``; its descendants then and its output."""
    out = []
    t0 = time.monotonic()
    for line in proc.stdout:
        out.append(line)
        if line_has in line:
            break
        assert time.monotonic() - t0 < timeout, "".join(out)
    else:
        raise AssertionError("".join(out))
    kids = _children_of(proc.pid)
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=120)
    return kids, "".join(out) + rest


@pytest.mark.skipif(os.geteuid() != 0, reason="shaped.py needs root (network namespaces)")
def test_shaped_removes_namespaces_and_parties_on_sigterm(tmp_path):
    sys.path.insert(0, str(HERE))
    import shaped

    if shaped.can_shape():
        pytest.skip(shaped.can_shape())
    proc = subprocess.Popen([sys.executable, str(HERE / "shaped.py"), "--dataset", "breast_cancer", "--epochs", "1",
                             "--methods", "vfl"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=ENV, cwd=tmp_path)
    kids, out = _term_when(proc, "parties behind")  # the parties serve in their namespaces
    assert kids, out
    assert not _alive(kids), out
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert shaped.PREFIX not in names, names


def test_serve_benchmark_stops_its_processes_on_sigterm(tmp_path):
    pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    proc = subprocess.Popen([sys.executable, "-u", str(HERE / "serve.py"), "--scenarios", "synthetic", "--rows", "300"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV, cwd=tmp_path)
    time.sleep(0.5)
    t0 = time.monotonic()
    while len(_children_of(proc.pid)) < 2:  # the parties started (each importing torch)
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() - t0 < 120
        time.sleep(0.2)
    time.sleep(1.0)
    kids = _children_of(proc.pid)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert not _alive(kids)
