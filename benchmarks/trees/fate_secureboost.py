"""FATE 2.x's HeteroSecureBoost in its standalone launcher, for ``run.py``'s side-by-side figures.

Runs in a benchmark-only environment with ``pyfate`` (``python -m venv /tmp/fate_venv;
/tmp/fate_venv/bin/pip install pyfate==2.2.0``): pyfate is never a dependency of verticalfs, and
this file imports nothing of it. ``run.py`` writes the guest's file (ids, label, its columns) and
each host's (ids, columns) for the training and the test rows, and a JSON job with the parameters,
then starts::

    /tmp/fate_venv/bin/python benchmarks/trees/fate_secureboost.py --parties guest:9999 host:10000

with ``FATE_JOB`` naming the job file. The guest writes the test AUC and the training seconds to
the job's ``out``.
"""

from __future__ import annotations

import json
import os
import time


def _frame(ctx, path, label):
    import pandas as pd
    from fate.arch.dataframe import PandasReader

    df = pd.read_csv(path)
    df["sample_id"] = list(range(len(df)))
    kw = {"sample_id_name": "sample_id", "match_id_name": "id", "dtype": "float32"}
    if label:
        kw.update(label_name="y", label_type="int32")
    return PandasReader(**kw).to_frame(ctx, df)


def run(ctx) -> None:
    from fate.ml.ensemble.algo.secureboost.hetero.guest import HeteroSecureBoostGuest
    from fate.ml.ensemble.algo.secureboost.hetero.host import HeteroSecureBoostHost

    job = json.loads(open(os.environ["FATE_JOB"]).read())
    p = job["params"]
    if ctx.is_on_guest:
        train, test = _frame(ctx, job["guest_train"], True), _frame(ctx, job["guest_test"], True)
        bst = HeteroSecureBoostGuest(num_trees=p["n_estimators"], max_depth=p["max_depth"], max_bin=p["n_bins"],
                                     learning_rate=p["learning_rate"], l2=p["reg_lambda"], l1=p["reg_alpha"],
                                     min_child_weight=p["min_child_weight"], objective="binary:bce")
    else:
        rank = ctx.local.party_id
        train, test = _frame(ctx, job["hosts_train"][rank], False), _frame(ctx, job["hosts_test"][rank], False)
        bst = HeteroSecureBoostHost(num_trees=p["n_estimators"], max_depth=p["max_depth"], max_bin=p["n_bins"])
    t0 = time.perf_counter()
    bst.fit(ctx.sub_ctx("train"), train)
    seconds = time.perf_counter() - t0
    pred = bst.predict(ctx.sub_ctx("predict"), test)
    if ctx.is_on_guest:
        from sklearn.metrics import roc_auc_score

        df = pred.as_pd_df()
        score = df["predict_score"].astype(float).to_numpy()
        y = df["label"].astype(int).to_numpy()
        with open(job["out"], "w") as f:
            json.dump({"auc": float(roc_auc_score(y, score)), "seconds": seconds,
                       "seconds_per_tree": seconds / p["n_estimators"]}, f)


if __name__ == "__main__":
    from fate.arch.launchers.multiprocess_launcher import launch

    launch(run)
