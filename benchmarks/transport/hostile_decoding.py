"""Decoding cost of hostile small-item messages against the item budget of
:mod:`verticalfs.transport.serde` (issue 37: 3 MB of nested empty messages took 8.7 s to decode).

For each kind of small item, two messages: 3 MB of the item (refused by the budget: the time to
refuse) and the largest list of it the budget admits in a message of that size (decoded: its
MB/s). A float32 ``Embeddings`` message of 3 MB is the reference. Prints one table, measured in
one run::

    PYTHONPATH=src python benchmarks/transport/hostile_decoding.py
"""

from __future__ import annotations

import struct
import time

import numpy as np

from verticalfs.exceptions import TransportError
from verticalfs.transport import Embeddings, decode, encode, message
from verticalfs.transport.messages import Ack, kind_id_of, wire_name
from verticalfs.transport.serde import VERSION, item_budget, seal

SIZE = 3_000_000


@message("bench.Anything")
class Anything:
    """Benchmark message: one field of any type."""

    value: object


def frame(body: bytes) -> bytes:
    return seal(struct.pack("<2sBBHIIII", b"VF", VERSION, 6, kind_id_of(wire_name(Anything)), 0, 0, 0, 0) + body)


def list_of(item: bytes, n: int) -> bytes:
    return frame(b"\x08" + struct.pack("<I", n) + item * n)


ITEMS = {  # name: (bytes of one item, items it costs of the budget)
    "None": (b"\x00", 1),
    "bool": (b"\x01\x01", 1),
    "int": (b"\x02" + bytes(8), 1),
    "empty str": (b"\x05" + bytes(4), 1),
    "3-char str": (b"\x05\x03\x00\x00\x00abc", 1),
    "empty list": (b"\x08" + bytes(4), 5),
    "empty message": (b"\x0b" + struct.pack("<H", kind_id_of(wire_name(Ack))), 5),
    "empty array": (b"\x07\x00\x04\x01" + bytes(4), 9),
    "nested lists (11 deep)": (b"\x08\x01\x00\x00\x00" * 10 + b"\x08" + bytes(4), 55 + 10),
}


def timed(data: bytes) -> tuple[float, str]:
    t0 = time.perf_counter()
    try:
        decode(data)
        out = "decoded"
    except TransportError:
        out = "refused"
    return time.perf_counter() - t0, out


def main() -> None:
    ref = encode(Embeddings(np.ones((SIZE // 4 // 64, 64), np.float32))).data
    t_ref, _ = timed(ref)
    print(f"reference: {len(ref) / 1e6:.1f} MB float32 Embeddings, {len(ref) / 1e6 / t_ref:,.0f} MB/s")
    print(f"{'item':24s} {'3 MB of it':>22s} {'largest admitted list':>34s}")
    for name, (item, cost) in ITEMS.items():
        n = SIZE // len(item)
        t_big, what = timed(list_of(item, n))
        # the largest count the budget admits in a message of this item
        k = n
        while k and cost * k + 4 > item_budget(26 + 5 + k * len(item)):
            k = int(k * 0.9)
        data = list_of(item, k)
        t_ok, ok = timed(data)
        rate = len(data) / 1e6 / t_ok
        print(f"{name:24s} {what} in {t_big * 1e3:7.1f} ms   {k:>9,} items ({len(data) / 1e6:5.2f} MB) {ok} "
              f"at {rate:6.1f} MB/s ({rate / (len(ref) / 1e6 / t_ref):.4f} x reference)")


if __name__ == "__main__":
    main()
