"""Data a run goes on with but a user must hear about (issue 37): each warning is printed exactly
once and recorded in the result's ``warnings`` (results.json for compare; predict's result)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.bad_inputs import FILES, people, write
from verticalfs.cli import app

runner = CliRunner()
RUN = ["run", "--no-progress", "-m", "vfl", "-e", "1"]


def _files(tmp: Path, mutate=None) -> list[str]:
    frames = people()
    if mutate is not None:
        mutate(frames)
    paths = write(tmp, frames)
    return [a.format(**paths) for a in FILES]


def _run(tmp: Path, mutate=None, *extra: str) -> tuple[str, list[str]]:
    out = tmp / "r.json"
    res = runner.invoke(app, [*RUN, *_files(tmp, mutate), "--out", str(out), *extra])
    assert res.exit_code == 0, res.output
    return res.output, json.loads(out.read_text())["warnings"]


def _once(output: str, needle: str) -> None:
    """``needle`` on exactly one ``warning:`` line of the output."""
    lines = [ln for ln in output.splitlines() if needle in ln]
    assert len(lines) == 1, output
    assert lines[0].startswith("warning:"), lines[0]


def _one_of(notes: list[str], needle: str) -> str:
    hits = [w for w in notes if needle in w]
    assert len(hits) == 1, notes
    return hits[0]


def _extreme(frames):
    c = frames["insurer"]["claims"].copy()
    c[:6] = 1e12  # a few extreme values among counts of 0..8
    frames["insurer"]["claims"] = c


def test_extreme_values_under_minmax_warn_and_robust_scaling_keeps_the_column(tmp_path):
    output, notes = _run(tmp_path, _extreme)
    w = _one_of(notes, "extreme values")
    assert "'insurer'" in w and "'claims'" in w and "--scaling robust" in w and "--scaling quantile" in w
    _once(output, "extreme values")
    output, notes = _run(tmp_path, _extreme, "--scaling", "robust")
    assert not any("extreme values" in n for n in notes) and "extreme values" not in output


def _constant_telecom(frames):
    frames["telecom"]["calls"] = 5
    frames["telecom"]["plan"] = "a"


def test_a_party_with_only_constant_columns_warns(tmp_path):
    output, notes = _run(tmp_path, _constant_telecom)
    w = _one_of(notes, "constant")
    assert "'telecom'" in w and "no informative column" in w
    _once(output, "no informative column")


def _spaced_half(frames):
    ids = frames["insurer"]["id"].to_numpy().astype(str)
    ids = ids.astype("<U8")
    ids[::2] = np.char.add(" ", ids[::2])
    frames["insurer"]["id"] = ids


def _zeros_half(frames):
    ids = frames["telecom"]["id"].to_numpy().astype(str)
    ids = ids.astype("<U8")
    ids[1::2] = np.char.zfill(ids[1::2], 5)
    frames["telecom"]["id"] = ids


@pytest.mark.parametrize("mutate, example", [(_spaced_half, "' 1'"), (_zeros_half, "'000")])
def test_ids_that_match_after_stripping_warn_and_strip_ids_aligns_them(tmp_path, mutate, example):
    output, notes = _run(tmp_path, mutate)
    w = _one_of(notes, "--strip-ids")
    assert w.startswith("60 more rows would align") and example in w
    _once(output, "--strip-ids")
    assert "aligned 60 samples" in output
    output, notes = _run(tmp_path, mutate, "--strip-ids")
    assert "aligned 120 samples" in output and not any("--strip-ids" in n for n in notes)


def _label_copy(frames):
    frames["telecom"]["Default"] = frames["bank"]["default"]


def _label_renamed(frames):
    frames["insurer"]["status"] = np.where(frames["bank"]["default"] == 1, "late", "paid")


def test_a_feature_named_like_the_label_warns(tmp_path):
    output, notes = _run(tmp_path, _label_copy)
    w = _one_of(notes, "named like the label")
    assert "'telecom'" in w and "'Default'" in w and "'default'" in w
    _once(output, "named like the label")


def test_a_feature_holding_the_label_under_other_values_warns(tmp_path):
    output, notes = _run(tmp_path, _label_renamed, "--categorical", "insurer:status")
    w = _one_of(notes, "holds the label")
    assert "'insurer'" in w and "'status'" in w and "renaming its values" in w
    _once(output, "holds the label")


def test_clean_files_warn_nothing(tmp_path):
    output, notes = _run(tmp_path)
    # no data warning; the labels of these files are random draws, so the model is (rightly) at
    # chance: that warning (tests/evaluation/test_chance.py) is the only one
    chance = "at or near chance"
    assert [n for n in notes if chance not in n] == []
    assert [ln for ln in output.splitlines() if ln.startswith("warning:") and chance not in ln] == []


def test_compare_prints_each_warning_once_over_seeds_and_writes_them(tmp_path):
    out = tmp_path / "c"
    res = runner.invoke(app, ["compare", "--no-progress", "--methods", "vfl", "-e", "1", "--seeds", "0,1",
                              *_files(tmp_path, _constant_telecom), "-o", str(out)])
    assert res.exit_code == 0, res.output
    _once(res.output, "no informative column")
    summary = json.loads((out / "results.json").read_text())
    _one_of(summary["warnings"], "no informative column")


def test_predict_counts_category_levels_it_never_saw(tmp_path):
    files = _files(tmp_path)
    model = tmp_path / "model"
    res = runner.invoke(app, [*RUN, *files, "--save-model", str(model)])
    assert res.exit_code == 0, res.output
    new = tmp_path / "new"
    new.mkdir()
    frames = people()
    plan = frames["telecom"]["plan"].to_numpy(copy=True)
    plan[:7] = "platinum"
    frames["telecom"]["plan"] = plan
    paths = write(new, frames)
    pf = [x for p in ("bank", "telecom", "insurer") for x in ("--party-file", f"{p}={paths[p]}")]
    res = runner.invoke(app, ["predict", "--model", str(model), *pf, "--out", str(tmp_path / "p.csv")])
    assert res.exit_code == 0, res.output
    _once(res.output, "never saw")
    line = next(ln for ln in res.output.splitlines() if "never saw" in ln)
    assert "'telecom'" in line and "'plan' in 7 of 120 rows" in line

    from verticalfs.model import predict

    with pytest.warns(UserWarning, match="never saw"):
        out = predict(model, {p: paths[p] for p in ("bank", "telecom", "insurer")})
    assert len([w for w in out["warnings"] if "'plan' in 7 of 120 rows" in w]) == 1
