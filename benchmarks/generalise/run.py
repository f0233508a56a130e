"""Every trained method on many-class data no paper used (issue 40): accuracy against ``vfl``'s
and the majority rate.

    python benchmarks/generalise/run.py --quick                       # digits+noise, 30-class synthetic
    python benchmarks/generalise/run.py --data usps,tox_171           # the shared sets ($VERTICALFS_DATA)
    python benchmarks/generalise/run.py --methods less-vfl,vfl --data digits

Data (3 parties, 50 % Gaussian noise columns, seed 0): scikit-learn's ``digits`` (10 classes, 64
features), the built-in ``multiclass-synth`` (30 classes, 500 informative and redundant features),
and the shared ``usps`` (10 classes, 256 features) and ``tox_171`` (4 classes, 5,748 features).

Every method runs at its defaults (a filter's ``n_select`` too: ``"auto"`` since issue 53, N
chosen on the validation rows; before, this script set half of the features, as the default 10
was a paper's setting for tens of features), except: Paillier
keys are 1,024 bits with ``insecure=true`` (the accuracy does not depend on the key), FedSDG-FS
runs with ``secure=false`` (the same Gini initialisation in the clear), and with
``--quick`` every ``epochs``-like parameter is capped at ``QUICK_EPOCHS`` and USPS is subsampled
to 2,000 rows. Prints one row per method and data set: test accuracy, ``vfl``'s, the majority
rate, the bar of the generalisation suite (majority + 0.3 x (vfl - majority)), features kept, and
the run's warnings (a chance-level model says so).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
import warnings

import numpy as np

from verticalfs import build_data, run
from verticalfs.data.registry import load_dataset
from verticalfs.data.table import Table
from verticalfs.methods import registry

DATA = ("digits", "multiclass-synth", "usps", "tox_171")
QUICK_DATA = ("digits", "multiclass-synth")
QUICK_EPOCHS = 20
#: epoch-like parameters capped by --quick
EPOCH_PARAMS = ("epochs", "ae_epochs", "ss_epochs", "select_epochs_m", "select_epochs_s", "refit_epochs")
USPS_QUICK_ROWS = 2000


def method_params(name: str, n_features: int, quick: bool) -> dict:
    """The settings a method runs with here (see the module docstring)."""
    fields = {f.name: f.default for f in dataclasses.fields(registry.get(name).Params)}
    out: dict = {}
    if "key_bits" in fields:
        out.update(key_bits=1024, insecure=True)
    if name == "fedsdg-fs" and fields.get("secure") is True:  # the same model, initialised in the clear
        out["secure"] = False
    if quick:
        for k in EPOCH_PARAMS:
            if isinstance(fields.get(k), int) and fields[k] > QUICK_EPOCHS:
                out[k] = QUICK_EPOCHS
    return out


def subsample(table: Table, rows: int, seed: int = 0) -> Table:
    """``rows`` rows of ``table``, stratified by nothing but a seeded permutation."""
    idx = np.sort(np.random.default_rng(seed).permutation(len(table.y))[:rows])
    return Table(name=table.name, X=table.X.iloc[idx].reset_index(drop=True), y=table.y[idx], task=table.task,
                 class_names=table.class_names, spurious=table.spurious)


def build(name: str, quick: bool, seed: int = 0):
    """The prepared data set ``name`` with 50 % noise columns over 3 parties."""
    source = name
    if name == "usps" and quick:
        source = subsample(load_dataset("usps"), USPS_QUICK_ROWS, seed)
    return build_data(source, parties=3, noise=0.5, seed=seed)


def majority_rate(data) -> float:
    """The test accuracy of always predicting the training set's most frequent class."""
    y_train, y_test = data.labels.y["train"], data.labels.y["test"]
    top = np.bincount(y_train).argmax()
    return float(np.mean(y_test == top))


def bar(vfl: float, majority: float) -> float:
    """The generalisation suite's floor for every method."""
    return majority + 0.3 * (vfl - majority)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"epochs capped at {QUICK_EPOCHS}, digits and the "
                    "synthetic set only (unless --data)")
    ap.add_argument("--data", default=None, help=f"comma-separated, from {','.join(DATA)}")
    ap.add_argument("--methods", default=None, help="comma-separated (default: every registered method)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    datasets = a.data.split(",") if a.data else (QUICK_DATA if a.quick else DATA)
    methods = a.methods.split(",") if a.methods else registry.available()
    warnings.simplefilter("ignore")
    print("| data | method | accuracy | vfl | majority | bar | kept / features | seconds | warnings |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for ds in datasets:
        data = build(ds, a.quick, a.seed)
        n_features = sum(p.n_features for p in data.parties)
        major = majority_rate(data)
        vfl = run("vfl", data, seed=a.seed, params=method_params("vfl", n_features, a.quick)).metrics["accuracy"]
        for m in methods:
            t0 = time.perf_counter()
            try:
                res = run(m, data, seed=a.seed, params=method_params(m, n_features, a.quick))
            except Exception as exc:  # noqa: BLE001 -- a benchmark row, not a crash of the table
                print(f"| {ds} | {m} | error: {' '.join(str(exc).split())[:120]} | | | | | | |", flush=True)
                continue
            acc = res.metrics.get("accuracy", float("nan"))
            sel = res.selection
            notes = "; ".join(w[:80] for w in res.warnings)
            flag = " (below bar)" if acc < bar(vfl, major) else ""
            print(f"| {ds} | {m} | {acc:.3f}{flag} | {vfl:.3f} | {major:.3f} | {bar(vfl, major):.3f} | "
                  f"{sel.get('n_kept')} / {sel.get('n_features')} | {time.perf_counter() - t0:.1f} | {notes} |",
                  flush=True)


if __name__ == "__main__":
    main()
