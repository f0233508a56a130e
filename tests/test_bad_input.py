"""Every bad input a new user meets gets exit code 2 and one line naming the problem, no traceback.

The table is in ``tests/bad_inputs.py`` (files, options and data values; it can also be run
against another checkout to count how each case ended before a change). Hostile *messages* are
the decoders' business: ``tests/transport/test_fuzz.py``.
"""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from tests.bad_inputs import cases, classify, render
from verticalfs.cli import app

CASES = cases()


def test_the_table_is_large_and_distinct():
    assert len(CASES) >= 60
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    values = case.setup(tmp_path) if case.setup else {}
    res = CliRunner().invoke(app, render(case.args, values))
    output = res.output
    assert "Traceback" not in output
    assert res.exit_code == 2, f"exit code {res.exit_code}: {output[-600:]}"
    assert not isinstance(res.exception, Exception) or isinstance(res.exception, SystemExit)
    lines = [ln for ln in output.splitlines() if ln.startswith("error:")]
    if lines:  # our own errors: exactly one line, naming the problem
        assert len(lines) == 1, output
        assert re.search(case.expect, lines[0]), lines[0]
    else:  # a usage error of the command line parser: its message names the option
        assert re.search(case.expect, " ".join(output.split())), output
    assert classify(res.exit_code, output, case.expect) == "clear"
