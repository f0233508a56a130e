"""Progress a user can see when the output is not a terminal (issue 42, item 4), drawn from the
run's events (issue 49: the lines and bars consume the same events as an --events file)."""

from __future__ import annotations

import io
import re
import subprocess
import sys

from verticalfs.api import build_data, run
from verticalfs.events import Emitter
from verticalfs.training.history import ProgressCallback


def test_lines_report_each_epoch_with_elapsed_eta_and_bytes():
    out = io.StringIO()
    cb = ProgressCallback("vfl", lines=True, min_interval=0.0, stream=out)
    data = build_data("breast_cancer", parties=2, seed=0)
    run("vfl", data, seed=0, params={"epochs": 3, "embedding_dim": 4}, callbacks=[cb])
    lines = out.getvalue().splitlines()
    assert lines[0] == "[vfl] train: 3 epoch(s)"
    epochs = [ln for ln in lines if " epoch " in ln and "/3" in ln]
    assert [re.search(r"epoch (\d)/3", ln).group(1) for ln in epochs] == ["1", "2", "3"]
    assert all("elapsed" in ln and " MB sent" in ln and "accuracy=" in ln for ln in epochs)
    assert all("ETA" in ln for ln in epochs[:-1]) and "ETA" not in epochs[-1]  # nothing left at the end


def test_lines_are_throttled_but_first_and_last_kept():
    """The lines are drawn from the run's events (a consumer like any other)."""
    out = io.StringIO()
    cb = ProgressCallback("m", lines=True, min_interval=3600.0, stream=out)
    em = Emitter([cb.on_event])
    em.emit("phase", name="train", state="start", total=50, unit="epoch")
    for e in range(50):
        em.emit("epoch", phase="train", index=e + 1, total=50, bytes=1_000_000 * (e + 1))
    epochs = [ln for ln in out.getvalue().splitlines() if "epoch " in ln and "epoch(s)" not in ln]
    assert len(epochs) == 2 and "epoch 1/50" in epochs[0] and "epoch 50/50" in epochs[1]
    assert "50.00 MB sent" in epochs[1]


def test_stage_steps_print_lines():
    out = io.StringIO()
    cb = ProgressCallback("icafs", lines=True, min_interval=0.0, stream=out)
    em = Emitter([cb.on_event])
    for t in range(1, 4):
        em.emit("stage", name="synthesis", done=t, total=3)
    assert [ln.split(":")[0] for ln in out.getvalue().splitlines()] == [
        "[icafs] synthesis step 1/3", "[icafs] synthesis step 2/3", "[icafs] synthesis step 3/3"]


def test_rounds_print_lines_and_the_description_follows_the_run():
    out = io.StringIO()
    cb = ProgressCallback(lines=True, min_interval=0.0, stream=out)
    em = Emitter([cb.on_event])
    em.emit("run_start", method="fate-lasso", version="0")
    em.emit("phase", name="selection", state="start", total=2, unit="round")
    em.emit("round", phase="selection", index=1, total=2, metrics={"nonzero": 7.0}, bytes=2_000_000)
    assert out.getvalue().splitlines() == ["[fate-lasso] selection: 2 round(s)",
                                           out.getvalue().splitlines()[1]]
    assert out.getvalue().splitlines()[1].startswith("[fate-lasso] selection round 1/2: ")


ARGS = ["run", "-m", "vfl", "-d", "breast_cancer", "-k", "2", "-e", "2", "--param", "embedding_dim=4"]


def test_cli_to_a_pipe_prints_lines_on_stderr():
    loud = subprocess.run([sys.executable, "-m", "verticalfs", *ARGS], capture_output=True, text=True, timeout=300)
    assert loud.returncode == 0, loud.stderr
    assert "[vfl] train epoch 2/2" in loud.stderr and "[vfl]" not in loud.stdout


def test_quiet_silences_the_lines(monkeypatch, tmp_path):
    """In process (a second interpreter costs seconds): the same command prints its lines to a
    captured stderr, and --quiet prints none."""
    from typer.testing import CliRunner

    from verticalfs.cli import app

    monkeypatch.chdir(tmp_path)
    loud, quiet = (CliRunner().invoke(app, ARGS + extra) for extra in ([], ["--quiet"]))
    assert loud.exit_code == 0 and quiet.exit_code == 0, (loud.output, quiet.output)
    assert "[vfl] train epoch 2/2" in loud.stderr
    assert "[vfl]" not in quiet.stderr and "[vfl]" not in quiet.stdout


def test_an_entry_after_the_phase_is_not_one_more_epoch():
    """LESS-VFL records its selection after pre-training's last epoch: it printed "pretrain epoch
    10/9", then "selection epoch 2/2" (issue 53); now a line of its own."""
    import verticalfs

    data = verticalfs.build_data("breast_cancer", parties=2, seed=0)
    out = io.StringIO()
    cb = ProgressCallback("less-vfl", lines=True, min_interval=0.0, stream=out)
    verticalfs.run("less-vfl", data, seed=0, params={"epochs": 2, "pretrain_epochs": 2}, callbacks=[cb])
    lines = out.getvalue().splitlines()
    assert "[less-vfl] pretrain epoch 2/2" in "\n".join(lines), lines
    assert not any("3/2" in ln or "selection epoch" in ln for ln in lines), lines
    sel = [ln for ln in lines if ln.startswith("[less-vfl] selection: ")]
    assert len(sel) == 1 and "accuracy=" in sel[0] and sel[0].endswith(" MB sent"), lines


def test_a_ticker_prints_every_few_seconds_and_nothing_for_a_quick_step(caplog, monkeypatch):
    import logging

    from verticalfs.utils import progress

    clock = iter([0.0, 1.0, 6.0, 7.0, 12.5, 13.0, 20.0, 21.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    with caplog.at_level(logging.INFO, logger="verticalfs.progress"):
        t = progress.Ticker("scoring", 100, "columns")  # t0 = 0
        for done, _now in ((10, 1.0), (50, 6.0), (60, 7.0), (90, 12.5)):
            t(done)
        t.end()  # at 13 s
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["scoring: 50 of 100 columns, 0:06 elapsed, ETA 0:06",
                     "scoring: 90 of 100 columns, 0:12 elapsed, ETA 0:01",
                     "scoring: 90 columns in 0:13"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="verticalfs.progress"):
        quick = progress.Ticker("quick", 10)  # t0 = 20: no line before 5 s have passed
        quick.end()
    assert caplog.records == [] or all("quick" not in r.getMessage() for r in caplog.records)


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "verticalfs.progress"]


def test_reading_and_preparing_print_progress(caplog, monkeypatch, tmp_path):
    """A 236 MB CSV printed nothing for 900 s, and `party serve` nothing for 100-150 s while it
    prepared (issue 53): reading counts megabytes and rows, preparing counts rows, in lines."""
    import logging

    import numpy as np
    import pandas as pd

    import verticalfs.data.vertical as V
    from verticalfs.data.user import load_party_files
    from verticalfs.deploy.party import DeployedParty
    from verticalfs.utils import progress

    monkeypatch.setattr(progress, "EVERY", 0.0)
    monkeypatch.setattr(V, "PREPARE_ROWS", 50)
    rng = np.random.default_rng(0)
    ids = np.arange(300)
    pd.DataFrame({"id": ids, "a": rng.normal(size=300), "y": rng.integers(0, 2, 300)}).to_csv(tmp_path / "p1.csv",
                                                                                             index=False)
    pd.DataFrame({"id": ids, "b": rng.normal(size=300)}).to_csv(tmp_path / "p2.csv", index=False)
    with caplog.at_level(logging.INFO, logger="verticalfs.progress"):
        vds, _ = load_party_files({"p1": tmp_path / "p1.csv", "p2": tmp_path / "p2.csv"}, id_column="id",
                                  label_party="p1", label_column="y")
        vds.prepare(seed=0)
    lines = _lines(caplog)
    assert any(ln.startswith("party 'p2': reading p2.csv: ") and " MB (300 rows x 2 columns) in " in ln
               for ln in lines), lines
    steps = [ln for ln in lines if ln.startswith("party 'p2': preparing its rows: ") and " of 300 rows" in ln]
    assert len(steps) >= 5 and any(", ETA " in ln for ln in steps), lines
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="verticalfs.progress"):  # a deployed party reads its file so too
        DeployedParty("p2", tmp_path / "p2.csv")
    assert any(ln.startswith("party 'p2': reading p2.csv") for ln in _lines(caplog))


def test_encrypted_sffs_scoring_prints_progress(caplog, monkeypatch):
    """Encrypted SFFS on 1,536 columns printed nothing for 20 minutes (issue 53)."""
    import logging

    from verticalfs.utils import progress

    monkeypatch.setattr(progress, "EVERY", 0.0)
    data = build_data("breast_cancer", parties=2, seed=0)
    with caplog.at_level(logging.INFO, logger="verticalfs.progress"):
        run("sffs", data, seed=0, params={"n_select": 5, "key_bits": 512, "insecure": True})
    lines = _lines(caplog)
    assert any(ln.startswith("party 'party1': SFFS class sums of its 15 columns under encryption: ") and "ETA" in ln
               for ln in lines), lines
    assert any(ln.startswith("SFFS: decrypting party 'party2''s masked class sums") for ln in lines), lines


def test_a_phase_estimated_beyond_the_bound_stops_after_its_first_epoch(monkeypatch):
    """``--epochs 100000000000000000000`` ran with an ETA of millions of years (issue 53)."""
    import pytest

    from verticalfs.exceptions import ConfigError
    from verticalfs.training import history

    clock = iter([0.0, 2.0, 10.0, 12.0, 13.0])
    monkeypatch.setattr(history.time, "monotonic", lambda: next(clock))
    guard = history.EtaGuard(bound=100.0)
    guard.on_train_begin(None, 5, "pretrain")  # 2 s an epoch x 4 left: 8 s, within the bound
    guard.on_epoch_end(None, {})
    guard.on_train_begin(None, 10**20, "train")
    with pytest.raises(ConfigError, match=r"^train: 100,000,000,000,000,000,000 epochs would take about 6\.34e\+12 "
                                          r"years \(the first took 2\.00 s\), more than the bound of 1\.67 minutes; "
                                          r"give fewer epochs \(--epochs\), or pass --force to run anyway$"):
        guard.on_epoch_end(None, {})
    guard.on_epoch_end(None, {})  # checked once per phase


def test_force_lifts_the_bound():
    from typer.testing import CliRunner

    from verticalfs.cli import app

    res = CliRunner().invoke(app, ["run", "-m", "vfl", "-d", "wine", "-e", "2", "--no-progress", "--force"])
    assert res.exit_code == 0, res.output
