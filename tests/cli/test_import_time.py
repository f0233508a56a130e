"""A quick command line (issue 53): ``--help`` and the errors found before any work import neither
torch nor a method, measured with ``python -X importtime`` (what was imported, not how long it took:
the seconds are the benchmark's, ``benchmarks/core/cli_speed.py``)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer.main

from verticalfs.cli import app
from verticalfs.methods import registry


def command_paths() -> list[list[str]]:
    """Every command of the CLI, nested ones included (``party serve``), and the top level."""
    out: list[list[str]] = [[]]

    def walk(cmd, path):
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            out.append([*path, name])
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return out


def imported(*args: str, cwd=None) -> tuple[int, str, set[str]]:
    """Exit code, stderr and the modules ``python -m verticalfs ARGS`` imported."""
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "verticalfs", *args], capture_output=True,
                       text=True, timeout=120, cwd=cwd)
    mods = {ln.rsplit("|", 1)[-1].strip() for ln in r.stderr.splitlines() if ln.startswith("import time:")}
    text = "\n".join(ln for ln in r.stderr.splitlines() if not ln.startswith("import time:"))
    return r.returncode, text, mods


def heavy(mods: set[str]) -> list[str]:
    """torch, and any module of a method (the registry and the method folders' ``cli.py`` aside)."""
    return sorted(m for m in mods if m == "torch" or m.startswith("torch.")
                  or (m.startswith("verticalfs.methods.") and m != "verticalfs.methods.registry"))


def test_run_help_imports_neither_torch_nor_the_methods():
    code, out, mods = imported("run", "--help")
    assert code == 0, out
    assert "verticalfs.cli" in mods  # the measurement sees our imports
    assert heavy(mods) == []
    assert not {"pandas", "sklearn"} & mods


def test_every_help_stays_light():
    paths = command_paths()
    assert ["party", "serve"] in paths and ["run"] in paths and len(paths) >= 10
    for path in paths:
        code, out, mods = imported(*path, "--help")
        assert code == 0, (path, out)
        assert heavy(mods) == [], (path, heavy(mods)[:5])


@pytest.mark.parametrize("args,message", [
    (["run", "-m", "nosuch", "-d", "digits"], "unknown method 'nosuch'"),
    (["run", "-m", "feast+nosuch", "-d", "digits"], "unknown method 'nosuch'"),
    (["run", "-m", "vfl", "-d", "nosuch"], "unknown data set 'nosuch'"),
    (["run", "-m", "vfl", "-d", "digits", "--epochs", "0"], "--epochs must be"),
    (["run", "-m", "vfl", "--party-file", "a=missing.csv"], "--label-party"),
    (["party", "serve", "--config", "missing.toml", "--name", "a"], "does not exist"),
])
def test_errors_before_work_import_no_torch(args, message, tmp_path):
    code, out, mods = imported(*args, cwd=tmp_path)
    assert code == 2 and message in out, out
    assert heavy(mods) == [], heavy(mods)[:5]


def test_the_method_names_are_read_without_importing_the_methods():
    """``registry.names()`` scans the method folders' sources for ``@register`` and ``name = ``;
    it must list what importing them registers."""
    code = ("import sys; from verticalfs.methods import registry; n = registry.names(); "
            "assert not any(m.startswith('verticalfs.methods.') and m != 'verticalfs.methods.registry' "
            "for m in sys.modules), sorted(sys.modules); print(','.join(n))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().split(",") == registry.available()
