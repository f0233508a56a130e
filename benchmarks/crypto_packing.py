"""Slot packing against one ciphertext per value (crypto/packing.py; FedSDG-FS issue, item 4).

    python benchmarks/crypto_packing.py [--bits 2048] [--rows 256] [--width 8] [--backend python]

One mini-batch of embeddings (``rows`` x ``width`` values in [-4, 4], 16 fractional bits, headroom
for a sum of 4 terms) encrypted, added to a second one, masked with a plaintext and decrypted,
once with one ciphertext per value (:class:`~verticalfs.crypto.EncryptedArray`) and once packed
(:class:`~verticalfs.crypto.PackedEncryptedArray`). Prints the seconds of each step, the bytes of
the ciphertexts and the ratios measured in this run, and checks that both decrypt to the same
values. One thread; a fresh key per run (a 2048-bit key takes a few seconds to generate, not
counted).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bits", type=int, default=2048)
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--backend", default="python")
    args = ap.parse_args(argv)
    from verticalfs.crypto import (
        EncryptedArray,
        PackedEncryptedArray,
        SlotPacking,
        generate_keypair,
    )

    pub, priv = generate_keypair(args.bits, backend=args.backend, insecure=args.bits < 2048)
    rng = np.random.default_rng(0)
    a, b, mask = (rng.uniform(-4, 4, size=(args.rows, args.width)) for _ in range(3))
    packing = SlotPacking.for_key(pub, value_bound=4.0, precision=16, headroom=4)
    rows = {}
    for name in ("one per value", "packed"):
        t = {}
        t0 = time.perf_counter()
        if name == "packed":
            A, B = PackedEncryptedArray.encrypt(pub, a, packing), PackedEncryptedArray.encrypt(pub, b, packing)
        else:
            A, B = EncryptedArray.encrypt(pub, a, precision=16), EncryptedArray.encrypt(pub, b, precision=16)
        t["encrypt (2 arrays)"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        S = A + B + mask
        t["add + mask"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = S.decrypt(priv)
        t["decrypt"] = time.perf_counter() - t0
        rows[name] = (t, S.nbytes, out)
    same = np.array_equal(rows["packed"][2], rows["one per value"][2])
    print(f"{args.rows} x {args.width} values, {args.bits}-bit key, back end {pub.backend.name}, "
          f"{packing.slots} slots of {packing.slot_bits} bits per plaintext; both decrypt the same: {same}")
    print("| step | one per value (s) | packed (s) | ratio |")
    print("| --- | --- | --- | --- |")
    for step in rows["packed"][0]:
        u, p = rows["one per value"][0][step], rows["packed"][0][step]
        print(f"| {step} | {u:.3f} | {p:.3f} | {u / p:.1f}x |")
    ub, pb = rows["one per value"][1], rows["packed"][1]
    print(f"| ciphertext bytes | {ub:,} | {pb:,} | {ub / pb:.1f}x |")
    if not same:
        raise SystemExit("packed and unpacked decryptions differ")


if __name__ == "__main__":
    main()
