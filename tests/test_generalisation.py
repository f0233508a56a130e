"""The generalisation suite (issues 40 and 53): every trained method in the registry on many-class
data that no paper used and that needs no files.

Data (3 parties, 50 % Gaussian noise columns, seed 0):

- ``digits``: scikit-learn's 8 x 8 digits, 1,797 rows x 64 features (+32 noise), 10 classes;
- ``synth30``: the built-in ``multiclass-synth``, 1,500 rows x 500 informative and redundant
  features (+250 noise), 30 classes;
- ``wide20`` (issue 53): the built-in ``digit-images``, 1,440 images x 1,024 pixels (+512 noise),
  20 classes: COIL20's shape, on which the defaults of the last wave failed where the narrower
  sets passed (the gated methods kept most noise columns, CompFS fell to .285, the filters kept
  10 features).

For every method (listed from the registry, filters included) and data set:

- test accuracy >= majority + 0.3 x (vfl - majority), where ``vfl`` is plain VFL on the same data
  with the same budget and ``majority`` the rate of the training set's most frequent class;
- a method that removes features is at most 10 points below ``vfl``, and removes at least
  ``NOISE_REMOVED`` (80 %) of the injected noise columns (issue 53; ``KEEP_ALL`` lists the methods
  that keep every feature by design, checked to keep them all; ``random`` is the filters' control
  and removes noise at chance);
- the filters run at their default ``n_select="auto"`` (issue 53: N chosen on the validation rows).

Budget (the methods' defaults otherwise): every epoch-like parameter capped at ``EPOCHS`` (except
for the methods of ``OWN_EPOCHS``, whose schedules are per epoch; see there), mini-
batches of at most ``BATCH`` rows (the methods whose defaults use 1,024-row batches would otherwise
take ``EPOCHS`` steps in all; the methods of ``OWN_EPOCHS`` train at their own epochs and batch
size: the cap, not their defaults, kept them below the bar), Paillier keys of 1,024 bits with
``insecure=true`` (accuracy does not depend on the key), FedSDG-FS, SFFS and MS-GINI with
``secure=false`` (their scores in the clear: their tests check that the secure path computes the
same scores, and encrypted SFFS on 1,536 columns took minutes).
Binary-only methods (``fate-iv``, ``fate-lasso``) refuse multi-class labels with an error; they are
skipped here with that error as the reason.

Run one method with ``pytest tests/test_generalisation.py -k less-vfl``; the whole suite on
digits only with ``-k digits``. ``benchmarks/generalise/run.py`` runs the same methods at their
full defaults (and on USPS and TOX_171). Every case that takes more than a few seconds (``SLOW``,
every ``synth30`` and ``wide20`` case, the ``HEAVY`` ones of minutes) is marked ``slow``:
``./scripts/test`` leaves them out, ``./scripts/test --all`` and CI (``.ci/run``) run them, except
the ``wide20`` cases outside ``WIDE_IN_CI``, also marked ``wide``, which ``./scripts/test -m wide``
runs (CI's 90 minutes do not hold them all).
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from verticalfs import build_data, run
from verticalfs.exceptions import ConfigError
from verticalfs.methods import registry

# ---------------------------------------------------------------------------------------------
# Cases that fail the suite's bar with the defaults on main, each with its figures, marked xfail
# (not strict: a fixed case shows XPASS) until its method is fixed. Empty from 2026-11-26 (issue
# 40) until issue 53 added the noise-removal bar (>= 80 % of the injected noise columns removed)
# and the wide case; the last two cases short of that bar (ICAFS's, below) pass since 2026-11-28.
# Measured in the suite itself (2026-11-28, `pytest tests/test_generalisation.py -m "slow or not
# slow" -k <case>`, one process, load 7-12): every other selecting case run of digits, wide20 and
# synth30 passed, the gates (.948 / .938, 91 % / 90 % of the noise removed on wide20) and CompFS
# (.906, 97 %) included; not run in that sitting: wide20's sbt-filter, secureboost and
# autoencoder, synth30's group-lasso and the trees. Times there (load 7-12): wide20's filters
# 2-13 minutes each (mi 806 s, feast 248 s, sffs ~330 s, ms-gini 123 s, cfeast 109 s), the gates
# 14-62 s, CompFS 21 s. Run the same way later that day (one case a process, each with the module's
# vfl run), wide20's sbt-filter, secureboost and autoencoder and synth30's trees pass. wide20:
# sbt-filter .910 (vfl .917), 28 of 1,535 kept, 100 % of the noise removed, 153 s at load 10-13
# (before the fix of its auto N, see TREES: .938 keeping 384, 356 of them by column position);
# secureboost .830, 115 s at load 3-7; autoencoder .698, 17 s at load 7. synth30: sbt-filter .767
# (vfl .527), 30 of 751 kept, 100 %, 270 s at load 11-15 (before the fix: .833 keeping 94);
# secureboost .543, 85 s at load 7.
# ICAFS's two cases (issue 53) pass since each party ranks its input features by the share of their
# variance the kept components explain (rank="explained"; the path scores removed 63 % / 79 % of the
# noise): synth30 .677 (vfl .527), 376 of 751 kept, 100 % of the noise removed; wide20 .917 (vfl
# .917), 768 of 1,535 kept, 100 % (2026-11-28, 2,170 s and 2,179 s at load 5-10, one pytest process
# a case, both at once)
KNOWN_SHORTFALLS: dict[tuple[str, str], str] = {
}
#: cases that take minutes on 2 cores (measured 2026-11-26, idle: synth30-sffs 267 s, -ms-gini
#: 118 s, -icafs 117 s at the cap (501 s at its own defaults, not idle), -sefs 82 s, digits-sefs
#: 57 s): marked ``slow`` like every case below that takes more than seconds, so ``./scripts/test``
#: leaves them out and ``./scripts/test --all`` and CI run them
HEAVY = {("sffs", "synth30"), ("ms-gini", "synth30"), ("icafs", "synth30"), ("sefs", "synth30"),
         ("sefs", "digits")}
# ---------------------------------------------------------------------------------------------

EPOCHS = 10
BATCH = 64
#: methods trained at their own epochs and batch size (no cap): at the suite's 10 epochs of 64 rows
#: (170 steps on synth30) their networks do not get there, at their defaults (50 epochs of 128, 450
#: steps) they pass. Measured 2026-11-26, seed 0 (benchmarks/fedsdg_fs/README.md, "The gates on many
#: classes"): vflfs on synth30 .157 capped, .537 at its defaults (vfl .527); fedsdg-fs and
#: original-gate on digits .808 / .764 capped, .950 / .922 at their defaults (vfl .931). The
#: FedSDG-FS family's all-features itself reaches .300 on synth30 capped and .600 at its defaults.
EPOCH_PARAMS = ("epochs", "ae_epochs", "ss_epochs", "select_epochs_m", "select_epochs_s", "refit_epochs",
                "synth_steps", "n_estimators")
#: the data sets of the suite: test id -> registered data set
DATA = {"digits": "digits", "synth30": "multiclass-synth", "wide20": "digit-images"}
#: methods that keep every feature by design (no selection): the noise-removal bar does not apply,
#: and the suite checks that they do keep every feature
KEEP_ALL = {"vfl", "all-features", "central", "raw", "dim", "original", "q8", "q16", "top-w", "sparsevfl",
            "sparsevfl-16", "autoencoder", "pca", "secureboost"}  # (secureboost's selection is sbt-filter)
#: the control of the filters: a random selection removes noise columns at the rate it removes any
#: column, so the noise bar does not apply to it (its accuracy bar does)
CHANCE_SELECTION = {"random"}
#: every other method selects: at its defaults it removes at least this share of the injected noise
#: columns (issue 53)
NOISE_REMOVED = 0.8
#: CompFS is run at its own epoch count too: its gates close on a schedule
#: (its penalties and learning rate decay per epoch over 35 epochs); cut to 10 epochs it reached
#: .364 on digits (.853 at its 35) and .090 on synth30 (.540 at its 35), benchmarks/icafs/README.md
#: ICAFS too: at the cap (10 stage-1 iterations of its 250, 10 epochs of its 100) its synth30
#: selection moved 4-8 points with the synthesis's random draws alone (.337-.420, bar .427); at its
#: defaults .597 (vfl .527; 2026-11-26, seed 0, 501 s with CI running beside it); since its networks
#: stride only wide records (one stride here, 44 x 44 -> 22 x 22; digits at full resolution) .640 in
#: 510 s and digits .939 in 234 s (vfl .931; eleventh sitting, load ~2, one pytest process); in CI
#: under xdist beside the other worker's cases 1,234 s and 282 s (fresh clone at 900de69), 1,256 s
#: and 259 s (CI's own run of a6509d1), 586 s and 608 s (fresh clone at fcdb4b7): which cases share
#: the other worker decides it; with rank="explained" (issue 53) .677 with 100 % of the noise removed
#: LESS-VFL and local lasso too (issue 53): at the cap on synth30 their stage 3 kept 32-33 % of the
#: noise columns (less-vfl .490, local-lasso .513; vfl .527): with 64-row batches and 10 epochs the
#: short pre-training leaves a model whose validation accuracy every larger lambda_m candidate
#: lowers by more than tol_val, so the label holder takes 0.03-0.05 (at 50 epochs of 64 rows
#: less-vfl .670 / local-lasso .633, still 32 % / 33 %; at 10 epochs of 256 rows .270 / .293,
#: 0 % / 67 %: 5 epochs of 5 steps of pre-training). At their defaults (50 epochs of 256 rows)
#: synth30 .657 / .660 with 100 % of the noise removed, digits .947 / .956 (100 %), wide20 .944 /
#: .944 (97 %) (2026-11-28, seed 0, benchmarks/less_vfl/README.md "The generalisation suite's
#: budget (issue 53)"). Seed 0 only: with seed 1 at their defaults synth30 loses 57 % of its noise
#: columns (less-vfl .603, local-lasso .597): two parties' every lambda_m candidate is more than
#: tol_val below the pre-trained validation accuracy and the rule falls back to 0.03 (open)
OWN_EPOCHS = {"fedsdg-fs", "original-gate", "vflfs", "compfs", "icafs", "less-vfl", "local-lasso"}
#: SecureBoost's trees: a party returns a ciphertext per (feature, bin) and group of classes, each
#: re-randomised (the dearest Paillier operation), so K classes cost K times the bytes and time of one:
#: secureboost on digits at its defaults (20 trees of depth 3, 32 bins, 10 classes) did not end in 90
#: minutes on the shared machine (load 20-40; 2026-11-28), sbt-filter on digits at its defaults passed.
#: Their budget: depth 2, 8 bins, each tree on at most 64 features (colsample_bytree), 10 trees
#: (n_estimators is capped like an epoch count). At it, on digits: secureboost .878, sbt-filter .961 (vfl .931,
#: bar .349; both cases with vfl in 87 s at load 11-16, 2026-11-28); on synth30: secureboost .543, sbt-filter
#: .820 (vfl .527; both with vfl in 355 s at load 11-14). Those runs predate sbt-filter's n_select='auto'
#: and the packed histograms (432e272); run again on the code of 2026-11-28 07:00 (main at c7830a6), one case
#: a process with vfl: synth30 secureboost .543 again (lossless packing), 85 s at load 7; sbt-filter's
#: search of N took features no tree split on, tied at importance 0, by party and column order (the
#: noise columns come last in each party here, so that passed the noise bar by position): digits .953
#: keeping 24 (23 split on), synth30 .833 keeping 94, wide20 .938 keeping 384 (28 split on). Its search
#: now stops at the features split on: digits .956 keeping 23 (89 s, load 12-15), synth30 .767 keeping
#: 30 (270 s, load 11-15), wide20 .910 keeping 28 (153 s, load 10-13), 100 % of the noise removed in all.
#: No case of the trees came near 25 minutes, so the budget stays.
TREES = {"secureboost", "sbt-filter"}
#: methods whose runs take more than a few seconds on 2 cores
SLOW = {"autoencoder", "cfeast", "compfs", "fedsdg-fs", "group-lasso", "icafs", "less-vfl", "local-lasso",
        "ms-gini", "sefs", "sffs", "vflfs", "original-gate", "secureboost", "sbt-filter"}


def method_params(name: str, n_features: int) -> dict:
    """The suite's budget for ``name`` (see the module docstring)."""
    fields = {f.name: f.default for f in dataclasses.fields(registry.get(name).Params)}
    out: dict = {}
    for k in EPOCH_PARAMS if name not in OWN_EPOCHS else ():
        v = fields.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > EPOCHS and name not in OWN_EPOCHS:
            out[k] = EPOCHS
    if isinstance(fields.get("batch_size"), int) and fields["batch_size"] > BATCH and name not in OWN_EPOCHS:
        out["batch_size"] = BATCH
    if "key_bits" in fields:
        out.update(key_bits=1024, insecure=True)
    if name in ("fedsdg-fs", "sffs", "ms-gini") and fields.get("secure") is True:  # the same scores (their tests)
        out["secure"] = False
    if "pretrain_epochs" in fields and out.get("epochs", fields.get("epochs", 0)) < fields["pretrain_epochs"]:
        out["pretrain_epochs"] = 1
    if name in TREES:  # a party returns (and re-randomises) a ciphertext per bin and class group: see TREES
        out.update(max_depth=2, n_bins=8, colsample_bytree=min(1.0, 64 / n_features))
    return out


#: the wide case's methods CI runs (``.ci/run``: ``-m "slow and not wide"``): the rules issue 53 made
#: for wide many-class data (the gates' penalty path, CompFS's refit) and a filter's auto N; every
#: other method's wide case is marked ``wide`` as well (``./scripts/test -m wide``): together they
#: took over an hour on 2 shared cores (mi alone 806 s at load 7-12), beyond CI's budget
WIDE_IN_CI = {"original-gate", "fedsdg-fs", "compfs", "ms-gini"}


def _case(method: str, data: str):
    marks = []
    if method in SLOW or data != "digits" or (method, data) in HEAVY:
        marks.append(pytest.mark.slow)
    if data == "wide20" and method not in WIDE_IN_CI:
        marks.append(pytest.mark.wide)
    else:  # the fast cases on one xdist worker: the other would repeat the module's data and vfl run
        marks.append(pytest.mark.xdist_group("generalisation-fast"))
    if (method, data) in KNOWN_SHORTFALLS:
        marks.append(pytest.mark.xfail(strict=False, reason=KNOWN_SHORTFALLS[(method, data)]))
    return pytest.param(method, data, id=f"{data}-{method}", marks=marks)


CASES = [_case(m, d) for d in DATA for m in registry.available()]


@pytest.fixture(scope="module")
def prepared():
    cache: dict = {}

    def get(key: str):
        if key not in cache:
            data = build_data(DATA[key], parties=3, noise=0.5, seed=0)
            n_features = sum(p.n_features for p in data.parties)
            y_train, y_test = data.labels.y["train"], data.labels.y["test"]
            majority = float(np.mean(y_test == np.bincount(y_train).argmax()))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                vfl = run("vfl", data, seed=0, params=method_params("vfl", n_features)).metrics["accuracy"]
            cache[key] = (data, n_features, majority, vfl)
        return cache[key]

    return get


@pytest.mark.parametrize(("method", "data_name"), CASES)
def test_method_generalises_to_many_classes(method, data_name, prepared):
    data, n_features, majority, vfl = prepared(data_name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            res = run(method, data, seed=0, params=method_params(method, n_features))
        except ConfigError as exc:
            if "binary" in str(exc):
                pytest.skip(f"binary-only method: {exc}")
            raise
    acc = res.metrics["accuracy"]
    bar = majority + 0.3 * (vfl - majority)
    sel = res.selection
    removed = float(sel.get("spurious_removed", float("nan")))
    figures = (f"{method} on {data_name}: accuracy {acc:.3f}, vfl {vfl:.3f}, majority {majority:.3f}, kept "
               f"{sel['n_kept']} of {sel['n_features']}, noise removed {removed:.2f}")
    print(figures)  # shown by pytest -rA: the figures of every method, passed or not
    assert acc >= bar, f"{figures}: below majority + 0.3 x (vfl - majority) = {bar:.3f}"
    if method in KEEP_ALL:
        assert sel["n_kept"] == sel["n_features"], f"{figures}: {method} is listed as keeping every feature"
        return
    # a selection: at most 10 points below vfl, and most of the injected noise columns gone
    assert acc >= vfl - 0.10, f"{figures}: a selection {vfl - acc:.3f} below vfl"
    if method not in CHANCE_SELECTION:
        assert removed >= NOISE_REMOVED, f"{figures}: removed {removed:.0%} of the noise columns, bar " \
                                         f"{NOISE_REMOVED:.0%}"
