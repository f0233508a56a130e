"""CPU seconds of the command line's quick answers (issue 53: every ``--help`` and every error
before work under 0.5 s of CPU): each command's ``--help`` and a set of errors found before work,
each run as its own ``python -m verticalfs`` process, its user + system CPU time from the kernel
(``resource.RUSAGE_CHILDREN``), the median of ``--repeat`` runs.

    python benchmarks/core/cli_speed.py              # the table, and the load average beside it
    python benchmarks/core/cli_speed.py --repeat 5

What each command imports is tested (``tests/cli/test_import_time.py``: no torch, no method);
the seconds are measured here, on a quiet machine, not asserted in a test.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile

import typer.main

from verticalfs.cli import app

GOAL = 0.5
ERRORS = [
    ["run", "-m", "nosuch", "-d", "digits"],
    ["run", "-m", "vfl", "-d", "nosuch"],
    ["run", "-m", "vfl", "-d", "digits", "--epochs", "0"],
    ["run", "-m", "vfl", "--party-file", "a=missing.csv"],
    ["party", "serve", "--config", "missing.toml", "--name", "a"],
    ["run", "-m", "vfl", "-d", "digits", "-p", "nosuch=1"],  # a method's parameter: the method is imported
]


def cpu(args: list[str], cwd: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "verticalfs", *args], capture_output=True, cwd=cwd, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    paths: list[list[str]] = [[]]

    def walk(cmd, path):
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            paths.append([*path, name])
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    rows = [[*p, "--help"] for p in paths] + ERRORS
    print(f"load average {os.getloadavg()[0]:.1f} (2 cores); CPU seconds, median of {a.repeat}")
    print("| command | CPU s | under 0.5 s |\n| --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for args in rows:
            s = statistics.median(cpu(args, tmp) for _ in range(a.repeat))
            print(f"| `verticalfs {' '.join(args)}` | {s:.2f} | {'yes' if s < GOAL else 'NO'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
