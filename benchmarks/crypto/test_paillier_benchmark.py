"""The Paillier benchmark (``paillier_bench.py`` beside this file) on a short insecure key: every row is
measured, positive and printed, and the JSON holds the same figures."""

from __future__ import annotations

import json

import paillier_bench as paillier  # not "paillier": that is the pypaillier wheel's module name


def test_quick_run_prints_every_row(tmp_path, capsys):
    out = tmp_path / "rates.json"
    res = paillier.main(["--quick", "--bits", "512", "--n", "6", "--json", str(out)], pin=False)
    text = capsys.readouterr().out
    for key, label, _ in paillier.ROWS:
        assert res["verticalfs"][key] > 0 and label in text
    assert set(res["bounds"]) <= {k for k, _, _ in paillier.ROWS}
    assert "goal owner encryption" in text and "goal decryption" in text
    assert json.loads(out.read_text())["verticalfs"] == res["verticalfs"]
    if "phe" in res:
        assert res["phe"]["decrypt"] > 0
