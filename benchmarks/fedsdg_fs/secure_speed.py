"""FedSDG-FS's secure training (Algorithms 2-3): seconds and bytes per training epoch on MADELON with
2 clients and 2048-bit Paillier keys, for ``secure=false``, secure packed and secure unpacked.

The issue's aim: the packed secure epoch under 10 s on this machine, at least 20x faster than the
unpacked one. The unpacked epoch runs over ``--unpacked-batches`` batches and is extrapolated to the
epoch's batches (labelled so). Timings are of the training epoch alone (no evaluation), in one
process: each party's crypto runs in turn, where deployed parties would run in parallel; the rows
"crypto workers" share each key holder's decryptions and obfuscators between worker processes
(``verticalfs.crypto.set_workers``, ``--crypto-workers``). The Gini initialisation (Algorithm 1,
once per run) is timed separately.

The secure epochs run with the masks' floor (every additive mask hides its value by >= 40 bits:
88-bit slots, 23 per 2048-bit ciphertext, at the default precision 12 and value_bits 16) and with
every ciphertext returned to its key holder re-randomised. The re-randomisation's cost alone is
measured in the same run: ``EncryptedArray.rerandomize`` on as many ciphertexts of the same key
size as the packed ``full`` epoch returned to the key holders (``MaskedProducts``,
``MaskedWeightGradient``, ``EncryptedEmbeddingGradient``, counted from the run's ledger).
``--quick`` measures only ``secure=false``, the packed ``full`` epoch and that cost.

``--synthetic30`` (issue 40 item 5): the many-class case instead, a seeded ``make_classification``
set with 30 classes and 500 informative-plus-redundant features over 3 parties; Algorithm 1 (the
secure Gini initialisation, its label matrix packed 31 classes to a 2048-bit ciphertext) timed
with its operation counts beside those of the unpacked protocol (counted, not run), then one
training epoch ``secure=false`` and secure packed, in the same run.

    python benchmarks/fedsdg_fs/secure_speed.py --data-dir ../shared/datasets
    python benchmarks/fedsdg_fs/secure_speed.py --synthetic30
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import verticalfs
from verticalfs.crypto import EncryptedArray, generate_keypair, set_workers
from verticalfs.federation import Federation
from verticalfs.methods import create
from verticalfs.training.split import TrainConfig


def trainer_for(data, seed: int, **params):
    m = create("fedsdg-fs", seed=seed, gini_init=False, prune=False, **params)
    fed = Federation.in_process(data)
    tr = m.trainer_class()(fed, m.name, TrainConfig.from_params(m.params), seed=seed, gates=m.gates(),
                           sgd_interactive=True)
    t0 = time.perf_counter()
    tr.setup()
    return tr, fed, time.perf_counter() - t0


def epoch(tr, fed) -> tuple[float, int, int]:
    b0 = fed.ledger.bytes_where(phase="train")
    t0 = time.perf_counter()
    tr.train_epoch("train")  # the first limit_batches batches only when the trainer's config sets it
    dt = time.perf_counter() - t0
    tr.epoch += 1
    limit = tr.config.limit_batches
    n = tr.plan.n_batches if limit is None else min(limit, tr.plan.n_batches)
    return dt, fed.ledger.bytes_where(phase="train") - b0, n


#: the messages of an epoch that carry ciphertexts back to their key holder (each re-randomised)
RETURNED = ("MaskedProducts", "MaskedWeightGradient", "EncryptedEmbeddingGradient")


def returned_ciphertexts(tr, fed) -> int:
    """Ciphertexts the label holder returned to the parties (their key holders) in phase ``train``:
    the payload bytes of those messages over the ciphertext width."""
    width = {p: tr.server[p].pub.ciphertext_bytes for p in tr.parties}
    total = 0
    for r in fed.ledger.records():
        if r.phase == "train" and r.kind in RETURNED:
            if r.payload % width[r.receiver]:
                raise SystemExit(f"{r.kind} of {r.payload} bytes is not whole ciphertexts")
            total += r.payload // width[r.receiver]
    return total


def rerandomize_seconds(key_bits: int, count: int, randomness: str) -> float:
    """Seconds of ``EncryptedArray.rerandomize`` on ``count`` ciphertexts under a public key alone
    (the label holder re-randomises under a party's key, without its private key)."""
    pub, priv = generate_keypair(key_bits, randomness=randomness)
    cts = EncryptedArray.from_bytes(pub, EncryptedArray.encrypt(priv, np.zeros(count, dtype=np.int64),
                                                                precision=0).to_bytes())
    t0 = time.perf_counter()
    cts.rerandomize()
    return time.perf_counter() - t0


def pooled_epoch(tr, fed, pool: int) -> tuple:
    """An epoch after each party's r^n pool is filled (the offline/online split): its table row."""
    roles = [fed.local_runtime(p).role for p in tr.parties]
    t0 = time.perf_counter()
    for r in roles:
        r.crypto.priv.precompute(pool)
    t_pool = time.perf_counter() - t0
    dt, b, nb = epoch(tr, fed)
    left = min(r.crypto.pub.pool_size for r in roles)
    return ("  same, r^n pool filled offline", dt, b, nb,
            f"online time; the pools ({pool} per party) took {t_pool:.1f} s to fill, "
            f"{left} left after the epoch" + ("" if left else " (EXHAUSTED: raise --pool)"))


def synthetic30(seed: int, rows: int = 1500):
    """30 classes, 500 features (250 informative, 250 redundant), 3 parties, seeded."""
    import pandas as pd
    from sklearn.datasets import make_classification

    from verticalfs.data.table import Table

    X, y = make_classification(n_samples=rows, n_features=500, n_informative=250, n_redundant=250, n_classes=30,
                               n_clusters_per_class=1, random_state=seed)
    t = Table(name="synthetic-30", X=pd.DataFrame(X, columns=[f"x{j}" for j in range(500)]), y=y.astype(np.int64),
              task="multiclass", class_names=[str(k) for k in range(30)])
    return verticalfs.build_data(t, parties=3, seed=seed)


def many_classes(args) -> None:
    """Algorithm 1 and one epoch on the 30-class synthetic set (``--synthetic30``)."""
    from verticalfs.methods.fedsdg_fs import gini as G

    data = synthetic30(args.seed, args.rows)
    n = len(data.labels.y["train"])
    c = int(data.labels.n_classes)
    d = [p.n_features for p in data.parties]
    print(f"synthetic-30: {n} training rows, {c} classes, features per party {d}, {args.key_bits}-bit keys, one "
          "thread\n")
    # Algorithm 1, secure, with the operation counts of the packed and the unpacked protocol
    short = args.key_bits < 2048  # tests of this script only
    m = create("fedsdg-fs", seed=args.seed, epochs=0, key_bits=args.key_bits, insecure=short)
    fed = Federation.in_process(data)
    if not args.epoch_only:
        m.fit(fed)
    S = G.LabelLayout(args.key_bits - 2, 64, c).slots  # bits(n // 3) = key_bits - 2 (or - 1)
    P = -(-c // S)
    D = [10 * k for k in d]
    cells = sum(D)
    rows_src = G.cross_term_source(n, cells) == "rows"
    packed = {"label holder encryptions": n * P + (n * (c - 1) if rows_src else cells * (c - 1)) + cells,
              "re-randomisations (a party, r^n under another's key)": cells * P + sum(d),
              "label holder decryptions": cells * P + sum(d)}
    unpacked = {"label holder encryptions": n * c + cells, "re-randomisations (a party, r^n under another's key)":
                cells * c + sum(d), "label holder decryptions": cells * c + sum(d)}
    pre = fed.ledger.bytes_where(phase="pretrain")
    if not args.epoch_only:
        print(f"Gini initialisation (Algorithm 1, secure, packed {S} classes per ciphertext, {P} per row; cross "
              f"term from the {m.info_.get('cross_term_source', '?')}): {m.info_['init_seconds']:.1f} s, "
              f"{pre / 1e6:.1f} MB")
    print(f"{'operations (all parties)':55s} {'packed':>9s} {'unpacked':>9s}  ratio")
    for k in packed:
        print(f"{k:55s} {packed[k]:9d} {unpacked[k]:9d}  {unpacked[k] / packed[k]:.1f}x")
    rows = []
    tr, fed, _ = trainer_for(data, args.seed, secure=False)
    epoch(tr, fed)  # warm-up
    dt, b, nb = epoch(tr, fed)
    rows.append(("secure=false", dt, b, nb))
    base = dt
    tr, fed, t_setup = trainer_for(data, args.seed, secure=True, key_bits=args.key_bits, insecure=short)
    dt, b, nb = epoch(tr, fed)
    rows.append(("secure packed, randomness full", dt, b, nb))
    print(f"\n{'run':38s} {'s/epoch':>9s} {'x plain':>8s} {'MB/epoch':>9s}  batches")
    for name, t, b, nb in rows:
        print(f"{name:38s} {t:9.2f} {t / base:8.1f} {b / 1e6:9.2f}  {nb:7d}")


def returned_by_party(tr, fed) -> dict:
    """Ciphertexts returned to each party (its key holder) in phase ``train``: what it decrypts
    and what the label holder re-randomised under its key."""
    out = {p: 0 for p in tr.parties}
    for r in fed.ledger.records():
        if r.phase == "train" and r.kind in RETURNED:
            out[r.receiver] += r.payload // tr.server[r.receiver].pub.ciphertext_bytes
    return out


def all_pools_epoch(tr, fed, margin: float = 1.2) -> tuple:
    """An epoch after every r^n it needs was made beforehand: each party's own (its encryptions)
    and the label holder's re-randomisers under each party's key (what a deployed label holder
    computes while it waits for the parties). Counts from the previous epoch's ledger."""
    back = returned_by_party(tr, fed)
    roles = {p: fed.local_runtime(p).role for p in tr.parties}
    t0 = time.perf_counter()
    for p in tr.parties:
        tr.server[p].pub.precompute(int(margin * back[p]))  # re-randomisers, public key only
        roles[p].crypto.priv.precompute(int(margin * back[p]))  # the party's own encryptions (CRT)
    t_pool = time.perf_counter() - t0
    dt, b, nb = epoch(tr, fed)
    left = min(min(tr.server[p].pub.pool_size, roles[p].crypto.pub.pool_size) for p in tr.parties)
    return ("  same, every r^n made offline", dt, b, nb,
            f"online time; the pools ({margin:.1f}x the last epoch's returns) took {t_pool:.1f} s to fill, "
            f"{left} left in the smallest" + ("" if left else " (EXHAUSTED)"))


def _decrypt_worker(key_bits: int, count: int, barrier) -> tuple[float, float, float]:
    """A party's host: its key, ``count`` ciphertexts, then (after the barrier) their decryption."""
    pub, priv = generate_keypair(key_bits, insecure=key_bits < 2048)
    cts = EncryptedArray.encrypt(priv, np.arange(count, dtype=np.int64), precision=0)
    if barrier is not None:
        barrier.wait()
    t0 = time.time()
    cts.decrypt_mantissas(priv)
    t1 = time.time()
    return t0, t1, t1 - t0


def parties_decrypt(key_bits: int, counts: list[int]) -> tuple[float, float]:
    """Seconds for the parties' decryptions of one epoch: one after the other in one process (as
    the in-process run does), and each in its own process at the same time (a deployment)."""
    import multiprocessing as mp

    seq = sum(_decrypt_worker(key_bits, c, None)[2] for c in counts)
    ctx = mp.get_context("spawn")
    barrier = ctx.Manager().Barrier(len(counts))
    with ctx.Pool(len(counts)) as pool:
        res = pool.starmap(_decrypt_worker, [(key_bits, c, barrier) for c in counts])
    return seq, max(r[1] for r in res) - min(r[0] for r in res)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--dataset", default="madelon")
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--unpacked-batches", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pool", type=int, default=2200, help="obfuscators precomputed per party for the pooled row")
    ap.add_argument("--crypto-workers", type=int, default=2,
                    help="worker processes for the rows on several cores (verticalfs.crypto.set_workers; "
                         "0 = one per core, 1 = skip those rows)")
    ap.add_argument("--quick", action="store_true",
                    help="only secure=false, the packed full epoch and the re-randomisation's cost")
    ap.add_argument("--synthetic30", action="store_true",
                    help="the 30-class synthetic set (Algorithm 1 and one epoch) instead of --dataset")
    ap.add_argument("--rows", type=int, default=1500, help="rows of the 30-class synthetic set")
    ap.add_argument("--epoch-only", action="store_true", help="--synthetic30 without timing Algorithm 1")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.synthetic30:
        many_classes(args)
        return
    data = verticalfs.build_data(args.dataset, parties=2, seed=args.seed, data_dir=args.data_dir)
    n_train = len(data.labels.y["train"])
    print(f"{args.dataset}: {n_train} training rows, features per party "
          f"{[p.n_features for p in data.parties]}, batch 128, {args.key_bits}-bit keys, one thread\n")
    rows = []
    tr, fed, _ = trainer_for(data, args.seed, secure=False)
    epoch(tr, fed)  # warm-up
    dt, b, nb = epoch(tr, fed)
    rows.append(("secure=false", dt, b, nb, "measured"))
    base = dt
    timing = {}
    rerand = None
    decrypts = None
    for rnd in ("full",) if args.quick else ("full", "short"):
        # packed, obfuscators r^n computed online
        tr, fed, t_setup = trainer_for(data, args.seed, secure=True, key_bits=args.key_bits, randomness=rnd)
        dt, b, nb = epoch(tr, fed)
        hiding = min(s.hiding for s in tr.server.values())
        pk = tr.server[tr.parties[0]].packing
        timing[("packed", rnd)] = dt
        rows.append((f"secure packed, randomness {rnd}", dt, b, nb,
                     f"measured (keys made and exchanged in {t_setup:.1f} s; {pk.slot_bits}-bit slots, "
                     f"{pk.slots} per ciphertext; masks hide >= {hiding} bits)"))
        if rnd == "full":  # the re-randomisation alone, on as many ciphertexts as this epoch returned
            count = returned_ciphertexts(tr, fed)
            rerand = (count, rerandomize_seconds(args.key_bits, count, rnd), dt)
            per_party = list(returned_by_party(tr, fed).values())
            rows.append(all_pools_epoch(tr, fed))
            timing[("packed", "all pools")] = rows[-1][1]
            decrypts = (per_party, *parties_decrypt(args.key_bits, per_party))
        if args.quick:
            break
        # packed, with each party's r^n pool filled before the epoch (the offline/online split)
        rows.append(pooled_epoch(tr, fed, args.pool))
        # unpacked: over a few batches, extrapolated
        tr, fed, _ = trainer_for(data, args.seed, secure=True, key_bits=args.key_bits, packed=False, randomness=rnd,
                                 limit_batches=args.unpacked_batches)
        dt, b, nb = epoch(tr, fed)
        full = tr.plan.n_batches
        timing[("unpacked", rnd)] = dt * full / nb
        rows.append((f"secure unpacked, randomness {rnd}", dt * full / nb, int(b * full / nb), full,
                     f"EXTRAPOLATED from {nb} batches ({dt:.1f} s)"))
    cores = 1 if args.quick else set_workers(args.crypto_workers)
    if cores > 1:  # the key holders' decryptions and obfuscators on several cores (full randomness)
        epoch(*trainer_for(data, args.seed, secure=True, key_bits=args.key_bits, limit_batches=1)[:2])  # start the pool
        tr, fed, _ = trainer_for(data, args.seed, secure=True, key_bits=args.key_bits)
        dt, b, nb = epoch(tr, fed)
        timing[("packed", "cores")] = dt
        rows.append((f"secure packed, full, {cores} crypto workers", dt, b, nb, "measured"))
        rows.append(pooled_epoch(tr, fed, args.pool))
        timing[("packed", "cores+pool")] = rows[-1][1]
        tr, fed, _ = trainer_for(data, args.seed, secure=True, key_bits=args.key_bits, packed=False,
                                 limit_batches=args.unpacked_batches)
        dt, b, nb = epoch(tr, fed)
        timing[("unpacked", "cores")] = dt * tr.plan.n_batches / nb
        rows.append((f"secure unpacked, full, {cores} crypto workers", dt * tr.plan.n_batches / nb,
                     int(b * tr.plan.n_batches / nb), tr.plan.n_batches, f"EXTRAPOLATED from {nb} batches ({dt:.1f} s)"))
        set_workers(1)
    print(f"{'run':38s} {'s/epoch':>9s} {'x plain':>8s} {'MB/epoch':>9s}  batches  note")
    for name, s, b, nb, note in rows:
        print(f"{name:38s} {s:9.2f} {s / base:8.1f} {b / 1e6:9.2f}  {nb:7d}  {note}")
    if rerand is not None:
        count, t_rr, t_epoch = rerand
        print(f"\nre-randomisation alone: {count} ciphertexts returned to the key holders in the packed full "
              f"epoch, EncryptedArray.rerandomize on {count} {args.key_bits}-bit ciphertexts: {t_rr:.2f} s "
              f"({1e3 * t_rr / max(count, 1):.1f} ms each), {100 * t_rr / t_epoch:.0f} % of that epoch's {t_epoch:.1f} s")
    if decrypts is not None:
        counts, t_seq, t_par = decrypts
        print(f"the parties' decryptions of that epoch ({counts} ciphertexts): {t_seq:.2f} s one after the other "
              f"in one process, {t_par:.2f} s each party in its own process at once (a deployment: "
              f"{t_seq / t_par:.2f}x)")
    if ("packed", "all pools") in timing:
        print(f"packed, full randomness and re-randomisation, every r^n made offline: "
              f"{timing[('packed', 'all pools')]:.1f} s per epoch online (aim: <= 10 s)")
    if args.quick:
        return
    for rnd in ("full", "short", "cores")[:3 if ("packed", "cores") in timing else 2]:
        label = f"{cores} crypto workers, randomness full" if rnd == "cores" else f"randomness {rnd}"
        print(f"\n{label}: packed {timing[('packed', rnd)]:.1f} s per epoch (aim: < 10 s), "
              f"{timing[('unpacked', rnd)] / timing[('packed', rnd)]:.1f}x faster than unpacked (aim: >= 20x)")
    if ("packed", "cores+pool") in timing:  # the most the aim gets here: both cores, every obfuscator made beforehand
        print(f"{cores} crypto workers, pools filled offline: packed {timing[('packed', 'cores+pool')]:.1f} s per "
              f"epoch online (aim: < 10 s); against the unpacked epoch on {cores} workers with its obfuscators "
              f"made online {timing[('unpacked', 'cores')] / timing[('packed', 'cores+pool')]:.1f}x (not like for "
              "like: the pool takes the encryptions' exponentiations off the clock)")
    # Algorithm 1 once, at the same key length
    m = create("fedsdg-fs", seed=args.seed, epochs=0, key_bits=args.key_bits)
    fed = Federation.in_process(data)
    t0 = time.perf_counter()
    m.fit(fed)
    pre = fed.ledger.bytes_where(phase="pretrain")
    print(f"Gini initialisation (Algorithm 1, secure): {m.info_['init_seconds']:.1f} s, {pre / 1e6:.2f} MB "
          f"(whole run with its final evaluation {time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
