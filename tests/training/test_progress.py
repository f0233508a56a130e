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
    10/9" (issue 53); now a line of its own."""
    out = io.StringIO()
    cb = ProgressCallback("less-vfl", lines=True, min_interval=0.0, stream=out)
    cb.on_train_begin(None, 2, "pretrain")
    for e in range(2):
        cb.on_epoch_end(None, {"phase": "pretrain", "bytes": 1_000_000 * (e + 1)})
    cb.on_epoch_end(None, {"phase": "selection", "bytes": 3_000_000, "accuracy": 0.5})
    lines = out.getvalue().splitlines()
    assert not any("3/2" in ln for ln in lines), lines
    assert lines[-1].startswith("[less-vfl] selection: ") and "accuracy=0.5000" in lines[-1]
