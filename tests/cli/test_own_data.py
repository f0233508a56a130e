"""A user's own files, end to end from the command line: categoricals, '?' for unknown values,
misaligned ids; run, save the model, predict on held-out rows; the printed selection names the
user's columns; a tampered model is refused."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import verticalfs
from verticalfs.cli import app
from verticalfs.data.user import load_party_files

runner = CliRunner()
N = 600


def make_files(tmp):
    """A bank, a telecom and an insurer about overlapping customers: shuffled rows, ids missing in
    some files, text categoricals, '?' for unknown values; the label (default) at the bank."""
    rng = np.random.default_rng(7)
    ids = np.arange(1000, 1000 + N)
    income = rng.normal(50, 15, N)
    job = rng.choice(["clerk", "manager", "self-employed", "retired"], N)
    calls = rng.poisson(20, N).astype(float)
    plan = rng.choice(["basic", "plus", "premium"], N, p=[0.5, 0.3, 0.2])
    claims = rng.poisson(1.5, N).astype(float)
    logit = 0.08 * (income - 50) + 1.2 * (job == "self-employed") - 0.9 * (plan == "premium") + 0.5 * (claims - 1.5)
    default = (logit + rng.logistic(size=N) > 0).astype(int)
    bank = pd.DataFrame({"customer": ids, "income": income.round(2), "job": job, "default": default})
    telecom = pd.DataFrame({"customer": ids, "calls": calls, "plan": plan, "noise": rng.normal(size=N)})
    insurer = pd.DataFrame({"customer": ids, "claims": claims})
    for df, col in ((bank, "income"), (telecom, "calls")):
        v = df[col].astype(object)
        v[rng.choice(N, 15, replace=False)] = "?"
        df[col] = v
    frames = {"bank": bank, "telecom": telecom.drop(index=rng.choice(N, 20, replace=False)),
              "insurer": insurer.drop(index=rng.choice(N, 30, replace=False))}
    paths = {}
    for name, df in frames.items():
        p = tmp / f"{name}.csv"
        df.sample(frac=1.0, random_state=1).to_csv(p, index=False)  # shuffled rows
        paths[name] = p
    return paths, frames


OPTS = ["--id-column", "customer", "--label-party", "bank", "--label-column", "default",
        "--categorical", "auto", "--na-values", "?", "--impute", "median"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("own")
    paths, frames = make_files(tmp)
    files = [a for p, f in paths.items() for a in ("--party-file", f"{p}={f}")]
    res = runner.invoke(app, ["run", "-m", "vfl", "-e", "5", "--seed", "3", "--no-progress", *files, *OPTS,
                              "--save-model", str(tmp / "model"), "--out", str(tmp / "r.json")])
    assert res.exit_code == 0, res.output
    return tmp, paths, frames, res.output


def test_run_reports_categoricals_and_selection_by_column(trained):
    tmp, paths, frames, output = trained
    flat = " ".join(output.split())
    assert "chosen automatically" in flat and "job" in flat and "plan" in flat
    d = json.loads((tmp / "r.json").read_text())
    cols = {c["column"]: c for c in d["selection"]["parties"]["bank"]["columns"]}
    assert set(cols) == {"income", "job"}
    assert sorted(cols["job"]["levels"]) == ["clerk", "manager", "retired", "self-employed"]
    assert cols["income"]["score"] is not None  # vfl reports each input group's weight norm
    assert d["selection"]["parties"]["telecom"]["kept_columns"] == ["calls", "noise", "plan"]
    assert "selection by column" in output and "job [4/4 levels]" in flat
    assert d["config"]["cli"]["categorical"] == ["auto"] and d["config"]["cli"]["method"] == "vfl"


def test_predict_equals_the_in_memory_model(trained):
    tmp, paths, frames, _ = trained
    # the same run from Python (deterministic): its test rows and its model's probabilities
    vds, _ = load_party_files(paths, label_party="bank", label_column="default", id_column="customer",
                              categorical="auto", na_values=["?"], impute="median")
    data = verticalfs.build_data(vds, seed=3)
    res = verticalfs.run("vfl", data, seed=3, params={"epochs": 5})
    expected = res.method_obj.predict_proba(res.federation, "test")
    test_ids = data.ids["test"]
    # held-out rows: only the test ids, shuffled differently in each file, plus unrelated rows
    new = {}
    for name, df in frames.items():
        rows = df[df["customer"].astype(str).isin(test_ids)].drop(columns=["default"], errors="ignore")
        extra = df.drop(columns=["default"], errors="ignore").head(3).assign(customer=lambda f: f["customer"] + 10**6) \
            if name == "telecom" else rows.iloc[:0]
        p = tmp / f"new_{name}.csv"
        pd.concat([rows, extra]).sample(frac=1.0, random_state=5).to_csv(p, index=False)
        new[name] = p
    out = tmp / "predictions.csv"
    r = runner.invoke(app, ["predict", "--model", str(tmp / "model"), "--out", str(out), "--id-column", "customer",
                            "--na-values", "?", *[a for p, f in new.items() for a in ("--party-file", f"{p}={f}")]])
    assert r.exit_code == 0, r.output
    assert "kB in" in r.output  # the bytes of federated inference are reported
    pred = pd.read_csv(out, dtype={"customer": str}).set_index("customer").loc[test_ids]
    np.testing.assert_allclose(pred[["prob_0", "prob_1"]].to_numpy(), expected, rtol=1e-5, atol=1e-6)
    assert (pred["prediction"].astype(str).to_numpy() == np.where(expected[:, 1] > 0.5, "1", "0")).all()


def test_tampered_or_foreign_models_are_refused(trained, tmp_path):
    tmp, paths, _, _ = trained
    import shutil

    bad = tmp_path / "model"
    shutil.copytree(tmp / "model", bad)
    raw = bytearray((bad / "telecom.pt").read_bytes())
    raw[-20] ^= 0xFF
    (bad / "telecom.pt").write_bytes(bytes(raw))
    args = ["predict", "--model", str(bad), "--out", str(tmp_path / "p.csv"), "--id-column", "customer",
            "--na-values", "?", *[a for p, f in paths.items() for a in ("--party-file", f"{p}={f}")]]
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "checksum" in r.output
    shutil.copy(tmp / "model" / "telecom.pt", bad / "telecom.pt")
    m = json.loads((bad / "manifest.json").read_text())
    m["verticalfs_version"] = "0.0.1"
    (bad / "manifest.json").write_text(json.dumps(m))
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "saved by verticalfs 0.0.1" in r.output


def test_the_manifest_hash_printed_at_save_refuses_a_consistently_tampered_model(trained, tmp_path):
    """The manifest holds every file's checksum; someone who changes a file and its checksum is
    caught only by the manifest's own hash, printed at save and given to predict."""
    import hashlib
    import re
    import shutil

    import torch

    tmp, paths, _, output = trained
    found = re.search(r"model saved to (\S+), manifest sha256 ([0-9a-f]{64})", " ".join(output.split()))
    assert found and found.group(1) == str(tmp / "model"), output
    sha = found.group(2)
    assert sha == hashlib.sha256((tmp / "model" / "manifest.json").read_bytes()).hexdigest()
    args = ["--out", str(tmp_path / "p.csv"), "--id-column", "customer", "--na-values", "?",
            *[a for p, f in paths.items() for a in ("--party-file", f"{p}={f}")]]
    r = runner.invoke(app, ["predict", "--model", str(tmp / "model"), "--expect-sha256", sha.upper(), *args])
    assert r.exit_code == 0, r.output
    clean = pd.read_csv(tmp_path / "p.csv")
    # a valid edit of telecom's part (its bottom model's weights) with its checksum updated in the manifest
    bad = tmp_path / "model"
    shutil.copytree(tmp / "model", bad)
    part = torch.load(bad / "telecom.pt", weights_only=True)
    tensors = [v for v in part["role"].values() if isinstance(v, dict)] or [part["role"]]
    edited = 0
    for d in tensors:
        for k, v in d.items():
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                d[k] = v * -3.0
                edited += 1
    assert edited
    torch.save(part, bad / "telecom.pt")
    m = json.loads((bad / "manifest.json").read_text())
    m["parties"]["telecom"]["sha256"] = hashlib.sha256((bad / "telecom.pt").read_bytes()).hexdigest()
    (bad / "manifest.json").write_text(json.dumps(m, indent=2))
    r = runner.invoke(app, ["predict", "--model", str(bad), *args])
    assert r.exit_code == 0, r.output  # the manifest's checksums alone cannot see it...
    assert not np.allclose(pd.read_csv(tmp_path / "p.csv")["prob_1"], clean["prob_1"])  # ...and it predicts otherwise
    r = runner.invoke(app, ["predict", "--model", str(bad), "--expect-sha256", sha, *args])
    assert r.exit_code == 2 and "not the expected" in " ".join(r.output.split()), r.output
    r = runner.invoke(app, ["predict", "--model", str(tmp / "model"), "--expect-sha256", "abc", *args])
    assert r.exit_code == 2 and "64 hex digits" in " ".join(r.output.split()), r.output


def test_a_config_file_runs_a_pipeline_on_party_files(trained, tmp_path):
    """The TOML of docs/guide/own-data.md: every option from a file, a pipeline, party files as a table."""
    _, paths, _, _ = trained
    files = "\n".join(f'{p} = "{f}"' for p, f in paths.items())
    (tmp_path / "run.toml").write_text(f'''pipeline = ["feast", "sparsevfl-16"]
id_column = "customer"
label_party = "bank"
label_column = "default"
categorical = ["auto"]
na_values = "?"
impute = "median"
out = "{tmp_path / 'result.json'}"
progress = false
[party_file]
{files}
[param]
"feast.n_select" = 3
"sparsevfl-16.epochs" = 2
''')
    r = runner.invoke(app, ["run", "--config", str(tmp_path / "run.toml")])
    assert r.exit_code == 0, r.output
    d = json.loads((tmp_path / "result.json").read_text())
    assert d["method"] == "feast+sparsevfl-16" and d["config"]["cli"]["method"] == "feast+sparsevfl-16"
    assert d["selection"]["n_kept"] == 3
    assert {"selection", "train"} <= set(d["communication"]["by_phase"])
