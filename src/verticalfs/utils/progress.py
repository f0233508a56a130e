"""Progress lines of long steps that are not epochs (issue 53): reading a file, preparing its
rows, scoring columns under encryption. A :class:`Ticker` logs one line on the
``verticalfs.progress`` logger every :data:`EVERY` seconds while its step runs, with what is done
of the total, the time elapsed and an estimate of what is left, and a last line with the step's
time; a step shorter than :data:`EVERY` seconds prints nothing.

Nothing is printed unless a handler listens: ``verticalfs run`` (with its progress on) and
``verticalfs party serve`` attach one to standard error (:func:`to_stderr`); the Python API stays
silent unless the caller configures logging.
"""

from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger("verticalfs.progress")
#: seconds between two lines of one step
EVERY = 5.0


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Ticker:
    """``ticker(done)`` logs ``"<what>: <done> of <total> <unit>, 0:12 elapsed, ETA 0:30"`` when
    :data:`EVERY` seconds passed since its last line (``every`` to change it); ``ticker.end()``
    logs the total time. ``total`` may be None (unknown: no ETA)."""

    def __init__(self, what: str, total: float | None = None, unit: str = "", every: float | None = None) -> None:
        self.what, self.total, self.unit = what, total, unit
        self.every = EVERY if every is None else float(every)
        self.t0 = time.monotonic()
        self.last = self.t0  # the first line after `every` seconds: a quick step prints nothing
        self.done = 0.0
        self.printed = False

    @staticmethod
    def _n(v: float) -> str:
        return f"{v:,.0f}" if float(v).is_integer() or abs(v) >= 100 else f"{v:,.1f}"

    def due(self) -> bool:
        """Whether the next call would print (to skip computing its ``extra``)."""
        return time.monotonic() - self.last >= self.every

    def __call__(self, done: float, extra: str = "") -> None:
        self.done = done
        now = time.monotonic()
        if now - self.last < self.every or not log.isEnabledFor(logging.INFO):
            return
        self.last, self.printed = now, True
        elapsed = now - self.t0
        of = f" of {self._n(self.total)}" if self.total else ""
        eta = ""
        if self.total and 0 < done < self.total and elapsed > 0:
            eta = f", ETA {_clock(elapsed / done * (self.total - done))}"
        unit = f" {self.unit}" if self.unit else ""
        log.info(f"{self.what}: {self._n(done)}{of}{unit}{extra}, {_clock(elapsed)} elapsed{eta}")

    def end(self, extra: str = "") -> None:
        """The step's last line, what was done and how long it took, if it took :data:`EVERY`
        seconds or more."""
        if (self.printed or time.monotonic() - self.t0 >= self.every) and log.isEnabledFor(logging.INFO):
            unit = f" {self.unit}" if self.unit else ""
            log.info(f"{self.what}: {self._n(self.done)}{unit}{extra} in {_clock(time.monotonic() - self.t0)}")


class _CliHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The command line's handler of the progress lines (one at a time)."""


def to_stderr(fmt: str = "%(message)s") -> logging.Handler:
    """Print the progress lines on standard error (the command line's choice); returns the
    handler (remove it with ``log.removeHandler``)."""
    for h in [h for h in log.handlers if isinstance(h, _CliHandler)]:
        log.removeHandler(h)  # one at a time (a command run twice in one process writes once)
    handler = _CliHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(fmt))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    return handler
