"""Packaging: importing the package and asking the CLI for help load nothing heavy.

The timings themselves (under a second) are claimed in the closing notes, not asserted here: a
shared machine makes timed tests flaky. What makes them fast is checked instead: neither loads
torch, pandas, scikit-learn or matplotlib.
"""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "pandas", "sklearn", "matplotlib", "xgboost", "scipy")


def loaded_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True).stdout.split()
    return {m.split(".")[0] for m in out}


def test_import_is_light():
    assert not loaded_after("import verticalfs") & set(HEAVY)


def test_cli_help_is_light_and_lists_method_commands():
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom verticalfs.cli import app\n"
            "r = CliRunner().invoke(app, ['--help'])\nassert r.exit_code == 0, r.output\n"
            "assert 'less-vfl-grid' in r.output and 'run' in r.output\n")
    assert not loaded_after(code) & set(HEAVY)


def test_lazy_names_resolve():
    import verticalfs

    assert callable(verticalfs.run) and callable(verticalfs.build_data)
    assert "vfl" in verticalfs.available_methods()
