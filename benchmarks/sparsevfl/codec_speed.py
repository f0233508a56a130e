"""Speed of the SparseVFL run-length codec (sparsevfl.md §4.3/§4.4): numpy versus plain Python.

    python benchmarks/sparsevfl/codec_speed.py [--repeat 5] [--large-python-repeat 1]

For a 1024x8 and a 65536x64 float32 batch with 50 % and 90 % zeros (placed at random, as a ReLU
leaves them), times ``rle_encode`` + ``rle_decode`` of :mod:`verticalfs.codecs.rle` and of a
straightforward per-element Python implementation of the *same* wire format (below; asserted to
produce identical bytes and identical decoded arrays), in the same run. Throughput is in MB/s of
dense input: ``N * D * 4`` bytes (MB = 10**6 bytes) divided by the median encode + decode time.
The vectorised codec is timed ``--repeat`` times on every batch; the Python one ``--repeat``
times on the small batch and ``--large-python-repeat`` times on the large one (seconds per call).
"""

from __future__ import annotations

import argparse
import statistics
import struct
import sys
import time
from pathlib import Path

import numpy as np

try:
    from verticalfs.codecs.rle import rle_decode, rle_encode
except ImportError:  # running from a checkout without an installed package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from verticalfs.codecs.rle import rle_decode, rle_encode

_HEAD = struct.Struct("<BII")
_RUNS = struct.Struct("<I")


# ------------------------------------------------------------- plain Python reference implementation


def py_encode(a: np.ndarray, *, bits: int = 32, order: str = "vertical") -> bytes:
    """Per-element Python version of :func:`rle_encode` (same bytes; see rle.py for the format)."""
    n, d = a.shape
    size = n * d
    rows = a.tolist()
    fmt = struct.Struct("<f" if bits == 32 else "<e")
    vb = fmt.size
    flags = (2 if bits == 16 else 0) | (0 if order == "vertical" else 4)
    flat = []
    if order == "vertical":
        for j in range(d):
            for i in range(n):
                flat.append(rows[i][j])
    else:
        for i in range(n):
            for j in range(d):
                flat.append(rows[i][j])
    values = bytearray()
    quantised = []
    heads: list[int] = []
    ends: list[int] = []
    nnz = 0
    prev = False
    for k in range(size):
        try:
            b = fmt.pack(flat[k])
        except OverflowError:  # beyond float16's range: +-inf, as numpy rounds
            b = fmt.pack(float("inf") if flat[k] > 0 else float("-inf"))
        quantised.append(b)
        nz = fmt.unpack(b)[0] != 0
        if nz:
            values += b
            nnz += 1
            if not prev:
                heads.append(k)
        elif prev:
            ends.append(k - 1)
        prev = nz
    if prev:
        ends.append(size - 1)
    runs = len(heads)
    q2 = (size - 1).bit_length() if size > 1 else 0
    coded_len = 13 + nnz * vb + (2 * runs * q2 + 7) // 8
    dense_len = 9 + size * vb
    if coded_len > dense_len:  # §4.4: send dense, row-major
        out = bytearray(_HEAD.pack(flags | 1, n, d))
        for i in range(n):
            for j in range(d):
                k = j * n + i if order == "vertical" else i * d + j
                out += quantised[k]
        return bytes(out)
    out = bytearray(_HEAD.pack(flags, n, d) + _RUNS.pack(runs))
    out += values
    acc = 0
    nacc = 0
    for v in heads + ends:  # q2 bits each, MSB first
        acc = (acc << q2) | v
        nacc += q2
        while nacc >= 8:
            nacc -= 8
            out.append((acc >> nacc) & 0xFF)
        acc &= (1 << nacc) - 1
    if nacc:
        out.append((acc << (8 - nacc)) & 0xFF)
    return bytes(out)


def py_decode(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Per-element Python version of :func:`rle_decode` (no corruption checks)."""
    flags, n, d = _HEAD.unpack_from(data, 0)
    size = n * d
    fmt = struct.Struct("<e" if flags & 2 else "<f")
    vb = fmt.size
    vertical = not flags & 4
    flat = [0.0] * size
    mask = [False] * size
    if flags & 1:  # dense, row-major
        rows = []
        mrows = []
        for i in range(n):
            row = []
            for j in range(d):
                row.append(fmt.unpack_from(data, 9 + (i * d + j) * vb)[0])
            rows.append(row)
            mrows.append([x != 0 for x in row])
        return np.array(rows, dtype=np.float32).reshape(n, d), np.array(mrows, dtype=bool).reshape(n, d)
    (runs,) = _RUNS.unpack_from(data, 9)
    q2 = (size - 1).bit_length() if size > 1 else 0
    nidx = (2 * runs * q2 + 7) // 8
    idx: list[int] = []
    if q2 == 0:
        idx = [0] * (2 * runs)
    else:
        acc = 0
        nacc = 0
        for byte in data[len(data) - nidx :]:
            acc = (acc << 8) | byte
            nacc += 8
            while nacc >= q2 and len(idx) < 2 * runs:
                nacc -= q2
                idx.append((acc >> nacc) & ((1 << q2) - 1))
            acc &= (1 << nacc) - 1
    pos = 13
    for r in range(runs):
        for k in range(idx[r], idx[runs + r] + 1):
            flat[k] = fmt.unpack_from(data, pos)[0]
            mask[k] = True
            pos += vb
    rows = []
    mrows = []
    for i in range(n):
        ks = [j * n + i if vertical else i * d + j for j in range(d)]
        rows.append([flat[k] for k in ks])
        mrows.append([mask[k] for k in ks])
    return np.array(rows, dtype=np.float32).reshape(n, d), np.array(mrows, dtype=bool).reshape(n, d)


# ----------------------------------------------------------------------------------- benchmark


def relu_batch(shape: tuple[int, int], zeros: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = np.abs(rng.standard_normal(shape)).astype(np.float32)
    a[rng.random(shape) < zeros] = 0
    return a


def time_pair(encode, decode, a: np.ndarray, repeat: int) -> tuple[float, float, bytes]:
    """Median encode and decode seconds over ``repeat`` calls (after one warm-up for numpy)."""
    te, td = [], []
    data = b""
    for _ in range(repeat):
        t0 = time.perf_counter()
        data = encode(a)
        t1 = time.perf_counter()
        decode(data)
        t2 = time.perf_counter()
        te.append(t1 - t0)
        td.append(t2 - t1)
    return statistics.median(te), statistics.median(td), data


def check_same(a: np.ndarray, bits: int, order: str) -> None:
    ours = rle_encode(a, bits=bits, order=order)
    ref = py_encode(a, bits=bits, order=order)
    assert ours == ref, f"byte mismatch for shape {a.shape}, Q={bits}, {order}"
    v1, m1 = rle_decode(ours)
    v2, m2 = py_decode(ref)
    assert np.array_equal(v1.view(np.uint32), v2.view(np.uint32)) and np.array_equal(m1, m2)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="timed calls of the numpy codec (and of Python on the small batch)")
    ap.add_argument("--large-python-repeat", type=int, default=1, help="timed calls of the Python codec on the large batch")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.large_python_repeat < 1:
        ap.error("--repeat and --large-python-repeat must be >= 1")

    # the format is the same: every mode on small batches, including the dense fallback
    for shape, zeros in (((1024, 8), 0.5), ((1024, 8), 0.9), ((64, 8), 0.0), ((300, 7), 0.3)):
        a = relu_batch(shape, zeros, args.seed)
        for bits in (32, 16):
            for order in ("vertical", "horizontal"):
                check_same(a, bits, order)
    print("reference Python implementation: identical bytes and decoded arrays (Q = 32/16, both orders)")
    print(f"numpy {np.__version__}, Python {sys.version.split()[0]}; Q = 32, vertical traversal; "
          f"MB/s = N*D*4 bytes / (encode + decode), median of the timed calls\n")

    head = (f"{'batch':>9} {'zeros':>5} {'size/dense':>10} {'form':>5} | {'numpy enc ms':>12} {'dec ms':>8} "
            f"{'MB/s':>8} | {'python enc s':>12} {'dec s':>7} {'MB/s':>6} {'calls':>5} | {'speed-up':>8}")
    print(head)
    print("-" * len(head))
    t_start = time.perf_counter()
    for shape in ((1024, 8), (65536, 64)):
        for zeros in (0.5, 0.9):
            a = relu_batch(shape, zeros, args.seed)
            mb = a.size * 4 / 1e6
            rle_decode(rle_encode(a))  # warm-up
            ne, nd, data = time_pair(rle_encode, rle_decode, a, args.repeat)
            py_rep = args.repeat if a.size <= 1 << 16 else args.large_python_repeat
            pe, pd, ref = time_pair(py_encode, py_decode, a, py_rep)
            assert ref == data, f"byte mismatch for shape {shape}, zeros {zeros}"
            form = "dense" if data[0] & 1 else "rle"
            np_mbs = mb / (ne + nd)
            py_mbs = mb / (pe + pd)
            print(f"{shape[0]:>5}x{shape[1]:<3} {zeros:>5.0%} {len(data) / (a.size * 4):>10.3f} {form:>5} | "
                  f"{ne * 1e3:>12.2f} {nd * 1e3:>8.2f} {np_mbs:>8.1f} | {pe:>12.3f} {pd:>7.3f} {py_mbs:>6.2f} "
                  f"{py_rep:>5} | {np_mbs / py_mbs:>7.0f}x", flush=True)
    print(f"\ntotal {time.perf_counter() - t_start:.1f} s")


if __name__ == "__main__":
    main()
