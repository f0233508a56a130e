"""A long-running party process's memory: give freed buffers back to the system between bursts.

A party serves requests whose buffers are large and short-lived (a whole split's embeddings and
the hidden activations behind them, the encoded reply, gRPC's copy of it) from several gRPC
worker threads. glibc's allocator raises its ``mmap`` threshold after such a buffer is freed (up
to 32 MiB), so the next ones come from the heap, where freed space stays in the process,
fragmented between the threads' arenas: after a 10 s request flood a party stayed at 930 MiB from
567 (issue 37).

Returning the memory after *every* request costs the next request its page faults (a whole-split
forward pass of 16,000 rows took 1.6 times as long with a fixed 128 KiB or 4 MiB ``mmap``
threshold, or with ``malloc_trim`` after each pass). So the party process keeps freed memory for
reuse while requests come and gives it back once a burst is over: :func:`limit_arenas` makes its
threads share :data:`ARENAS` allocator arena (the gRPC workers' buffers then reuse one heap instead
of fragmenting several; the party handles one message at a time anyway), and :class:`IdleTrimmer`
calls glibc's ``malloc_trim(0)`` when no message has been handled for :data:`IDLE_SECONDS`, which
gives the arena's free pages back. After a 200-request flood (``tests/transport/test_party_process.py``)
a party stayed 245 MiB above its start with neither, 30-69 MiB with the trim alone (two runs),
28 MiB with both. On other C libraries both do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import threading
import time

#: seconds without a handled message after which the freed memory is given back
IDLE_SECONDS = 0.5
#: allocator arenas of a party process (glibc's default: 8 per core)
ARENAS = 1
_M_ARENA_MAX = -8


@functools.cache
def _glibc():
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        lib = ctypes.CDLL(name)
        lib.malloc_trim  # noqa: B018 - glibc only
        lib.mallopt  # noqa: B018
    except (OSError, AttributeError):
        return None
    return lib


def _malloc_trim():
    lib = _glibc()
    return None if lib is None else lib.malloc_trim


def limit_arenas(n: int = ARENAS) -> bool:
    """Let at most ``n`` allocator arenas be created from now on (glibc ``M_ARENA_MAX``); call it
    before the process starts its threads. ``False`` where it cannot."""
    lib = _glibc()
    return lib is not None and lib.mallopt(_M_ARENA_MAX, int(n)) == 1


def trim() -> bool:
    """Give the process's free heap pages back to the system now (glibc); ``False`` elsewhere."""
    fn = _malloc_trim()
    if fn is None:
        return False
    fn(0)
    return True


class IdleTrimmer:
    """Calls :func:`trim` once after each burst of activity, when :meth:`touch` has not been
    called for ``idle`` seconds. A daemon thread; :meth:`stop` ends it."""

    def __init__(self, idle: float = IDLE_SECONDS) -> None:
        self.idle = float(idle)
        self._last = time.monotonic()
        self._dirty = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.trims = 0

    def touch(self) -> None:
        """A message was handled (its buffers may now be free)."""
        self._last = time.monotonic()
        self._dirty = True

    def start(self) -> IdleTrimmer:
        if _malloc_trim() is not None and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="vf-idle-trim", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.idle + 1)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.idle / 2):
            if self._dirty and time.monotonic() - self._last >= self.idle:
                self._dirty = False
                trim()
                self.trims += 1
