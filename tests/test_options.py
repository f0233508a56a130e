"""Output paths are checked (and their missing folders made) before any work starts."""

from __future__ import annotations

import os

import pytest

from verticalfs.exceptions import ConfigError
from verticalfs.options import check_out


def test_missing_parent_folders_are_created(tmp_path):
    # a fresh clone has no results/: the demo's `--out results/demo` must not fail on it
    out = check_out(tmp_path / "results" / "demo", directory=True)
    assert (tmp_path / "results").is_dir()
    assert not out.exists()  # the output itself is written by the run
    f = check_out(tmp_path / "a" / "b" / "r.json")
    assert (tmp_path / "a" / "b").is_dir() and not f.exists()


def test_a_path_under_a_file_is_refused(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        check_out(tmp_path / "afile" / "sub" / "r.json")
    assert not (tmp_path / "afile" / "sub").exists()


def test_a_directory_where_a_file_is_meant_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        check_out(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes everywhere")
def test_a_read_only_place_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(ConfigError, match="not writable"):
            check_out(ro / "x" / "r.json")
    finally:
        ro.chmod(0o700)
