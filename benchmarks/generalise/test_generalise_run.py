"""The generalisation benchmark (``run.py``): one row per method and data set, with vfl's and the
majority rate beside each accuracy."""

from __future__ import annotations

import importlib.util
from pathlib import Path

# by its path, under a name of its own (several benchmark folders hold a run.py)
_spec = importlib.util.spec_from_file_location("generalise_run", Path(__file__).resolve().parent / "run.py")
G = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(G)


def test_quick_rows_name_accuracy_vfl_and_majority(capsys):
    G.main(["--quick", "--data", "digits", "--methods", "vfl,mi"])
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| digits |")]
    assert [r.split("|")[2].strip() for r in rows] == ["vfl", "mi"]
    for r in rows:
        cells = [c.strip() for c in r.split("|")]
        acc, vfl, major, bar = (float(cells[i].split()[0]) for i in (3, 4, 5, 6))
        assert 0.05 < major < 0.15  # digits: 10 balanced classes
        assert abs(bar - (major + 0.3 * (vfl - major))) < 2e-3
        assert acc > bar
    mi = [c.strip() for c in rows[1].split("|")]
    kept, total = (int(x) for x in mi[7].split(" / "))
    assert 2 <= kept <= -(-total // 2)  # a filter chooses N (n_select="auto"), at most half of the features


def test_settings_cap_epochs_and_leave_the_filters_at_their_defaults():
    assert G.method_params("vfl", 96, quick=True) == {"epochs": G.QUICK_EPOCHS}
    assert G.method_params("vfl", 96, quick=False) == {}
    assert "n_select" not in G.method_params("mi", 96, quick=True)  # "auto"
    assert G.method_params("sffs", 96, quick=False) == {"key_bits": 1024, "insecure": True}
