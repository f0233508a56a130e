"""Secure FedSDG-FS's Algorithm 1 with many classes (issue 40 item 5): the label holder encrypts the
one-hot label matrix as one ciphertext per row whatever the classes (counted on the ledger), and the
secure Gini initialisation equals the plaintext one."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_classification

import verticalfs
from verticalfs.data.table import Table
from verticalfs.federation import Federation
from verticalfs.methods import create
from verticalfs.methods.fedsdg_fs import gini as G


def classes_data(c: int, d: int = 8, rows: int = 240):
    """``c`` classes, ``rows`` rows, ``d`` features over 2 parties (seeded make_classification)."""
    X, y = make_classification(n_samples=rows, n_features=d, n_informative=5, n_redundant=2, n_classes=c,
                               n_clusters_per_class=1, random_state=0)
    t = Table(name=f"{c}-classes", X=pd.DataFrame(X, columns=[f"x{j}" for j in range(d)]), y=y.astype(np.int64),
              task="multiclass", class_names=[str(k) for k in range(c)])
    return verticalfs.build_data(t, parties=2, seed=0)


# the shortest keys whose plaintext holds c slots of 65 bits (64-bit masks): 7 slots at 512 bits, 11 at
# 768, 31 at 2048 (the default key: 30 classes at the real setting)
@pytest.mark.parametrize("c, key_bits", [(2, 512), (10, 768), pytest.param(30, 2048, marks=pytest.mark.slow)])
def test_algorithm_1_encrypts_one_label_ciphertext_per_row_and_agrees_with_the_clear(c, key_bits):
    """MS-GINI runs FedSDG-FS's Algorithm 1 by the same function (``method.ask_gini``) without the
    training that follows it (whose secure evaluation would cost most of the test's time); the
    FedSDG-FS run with ``epochs=0`` below checks that fedsdg-fs uses it too."""
    data = classes_data(c, rows=max(240, 20 * c))  # every class in the stratified splits
    n = len(data.labels.y["train"])
    # more training rows than the 2 x 4 features x 10 bins = 80 cells: the cross term comes from the
    # cells, so GiniLabels carries the packed label matrix alone
    assert G.cross_term_source(n, 80) == "cells"
    fed = Federation.in_process(data)
    assert G.LabelLayout(key_bits - 2, 64, c).per_row == 1
    sec = create("ms-gini", seed=0, key_bits=key_bits, insecure=key_bits < 2048).fit(fed)
    clr = create("ms-gini", seed=0, secure=False).fit(Federation.in_process(data))
    width = 2 * key_bits // 8  # bytes of one ciphertext
    labels = [r for r in fed.ledger.records() if r.kind == "GiniLabels"]
    assert len(labels) == len(data.party_names)
    for r in labels:  # the ciphertexts, the public key (half a ciphertext) and a few small fields
        assert r.payload // width == n
    assert sec.info_["label_matrix_ciphertexts"] == sec.info_["label_ciphertexts"] == n
    masked = {r.sender: r.payload // width for r in fed.ledger.records() if r.kind == "MaskedCounts"}
    assert masked == {p: data.party(p).n_features * 10 for p in data.party_names}  # one per (feature, bin)
    for p in data.party_names:
        np.testing.assert_allclose(sec.info_["gini"][p], clr.info_["gini"][p], atol=1e-12)
        X = np.asarray(data.party(p).X["train"], dtype=np.float64)
        np.testing.assert_allclose(sec.info_["gini"][p], G.gini_clear(X, data.labels.y["train"], c), atol=1e-12)


def test_fedsdg_fs_initialises_by_the_same_packed_algorithm_1_with_many_classes():
    """FedSDG-FS itself, 10 classes, secure against plaintext: the same Gini scores (hence the same
    gates' start), one label ciphertext per row on the ledger."""
    data = classes_data(10)
    n = len(data.labels.y["train"])
    small = {"seed": 0, "epochs": 0, "hidden": (8,), "embedding_dim": 4, "batch_size": 64}
    fed = Federation.in_process(data)
    sec = create("fedsdg-fs", key_bits=768, insecure=True, **small).fit(fed)
    clr = create("fedsdg-fs", secure=False, **small).fit(Federation.in_process(data))
    assert sec.info_["label_matrix_ciphertexts"] == sec.info_["label_ciphertexts"] == n
    assert all(r.payload // (2 * 768 // 8) == n for r in fed.ledger.records() if r.kind == "GiniLabels")
    for p in data.party_names:
        np.testing.assert_allclose(sec.gini_[p], clr.gini_[p], atol=1e-12)
