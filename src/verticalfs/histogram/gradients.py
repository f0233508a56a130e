"""Packed gradient histograms for the trees (SecureBoost): the layout of the label holder's
plaintexts, the party's sums per (feature, bin) over one node's rows, and their decoding.

**Plaintexts.** A row carries ``V`` fixed-point values (``g`` and ``h`` of each of ``K`` outputs:
``V = 2K``), each a signed mantissa ``round(v * 2**precision)`` with ``|v| <= 1`` (the label holder
scales ``g`` and ``h`` by powers of two first, :func:`quantize`). The values sit in ``w``-bit slots
(:class:`~verticalfs.crypto.SlotPacking`'s signed encoding), ``V`` slots a *group*; a plaintext of a
``b``-bit key holds ``groups = floor(b / (V w))`` groups. ``w`` leaves room for the sum of ``N``
rows (``value_bits = precision + bits(N) + 1``), and, when several rows share a plaintext, for a mask
of :data:`~verticalfs.crypto.HIDING_FLOOR` bits above that (``w = value_bits + hiding + 1``, rounded
up to whole bytes).

**Rows per ciphertext** (``m``). Row ``r`` of the tree sits in ciphertext ``r // m``, group
``r % m``. A party cannot pick one slot out of a ciphertext, so for a node it sums whole ciphertexts
per (feature, bin, position): ``T[f, b, i]`` is the product of the ciphertexts whose row at position
``i`` falls in bin ``b``; its group ``i`` is the bin's sum over those rows, its other groups are
*garbage* (sums of the other rows packed beside them). Horner over positions
(``U = sum_i T_i * 2**(G (m - 1 - i))``, :meth:`~verticalfs.crypto.EncryptedArray.pack`) puts every
meaningful group at position ``m - 1``: the bin's sum over all its rows, with garbage in the ``m - 1``
positions below and above. Several bins then share a returned ciphertext ``m`` groups apart
(``c = floor((groups - m + 1) / m)`` a ciphertext; the bins of every feature one after another,
across features: ``ceil(cells / c)`` ciphertexts a histogram), and the party adds a uniform mask of
``value_bits - 1 + hiding`` bits to every garbage slot (:func:`mask_garbage`): the label holder reads
the meaningful groups and nothing of the garbage (statistical distance ``2**-hiding`` for values within
the layout's bound). With ``m = 1`` there is no garbage and no mask, ``w = value_bits`` and
``c = groups`` bins a returned ciphertext (FATE's cipher compression). When a row's ``V`` values do not
fit one plaintext, they take ``parts`` ciphertexts (``m = 1``).

**Skipped bins.** A party does not sum, and does not return, each feature's bin of most training
rows (FATE's sparse optimisation): the key holder, who knows the node's total, gets it by
subtraction (:func:`fill_skipped`). Which bin a feature skips the party tells once, with its bins
(SecureBoost's ``SBTReady.skip``); leaving its slot out of the returned ciphertexts reveals nothing
beyond that index, and a feature's bins sum to the node's total anyway, so the slot carried no
information (it was always 0). A histogram therefore returns ``sum_f (b_f - 1)`` cells
(:func:`returned_cells`, :meth:`GradientLayout.histogram_ciphertexts`).

What the label holder learns from a decrypted histogram: the sums of its own values per (feature,
bin) over the node's rows, SecureBoost's disclosure, nothing else of the packing.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from verticalfs.crypto import HIDING_FLOOR, EncryptedArray, PrivateKey, PublicKey, SlotPacking
from verticalfs.exceptions import CryptoError, ProtocolError
from verticalfs.histogram.encrypted import encrypt_plaintexts, package_sizes, seal

#: the most fractional bits a gradient value may carry (a slot holds at most 64-bit sums)
MAX_PRECISION = 40
#: operations counted in this process by :func:`node_histogram` (instrumentation for the benchmarks'
#: operation-count bound; a party adds to it, nothing reads it in a run): products mod ``n**2`` of
#: the sums, squarings of Horner and compression, masks added, ciphertexts sealed
OPS = {"additions": 0, "squarings": 0, "masks": 0, "sealed": 0}


def _bytes8(bits: int) -> int:
    return 8 * -(-int(bits) // 8)


@dataclass(frozen=True)
class GradientLayout:
    """The slot layout of one tree's gradient plaintexts (see the module docstring).

    Parameters
    ----------
    values : int
        ``V``, values per row (``2 K``).
    precision : int
        Fractional bits of every value (``|v| <= 1``).
    n_rows : int
        The most rows a sum runs over (the tree's rows).
    plain_bits : int
        The usable bits of a plaintext (``bits(n // 3) - 1``).
    rows_per_ct : int
        ``m``, rows per ciphertext.
    hiding : int
        Hiding bits of the garbage masks (``m > 1``), at least :data:`HIDING_FLOOR`.
    """

    values: int
    precision: int
    n_rows: int
    plain_bits: int
    rows_per_ct: int = 1
    hiding: int = HIDING_FLOOR

    def __post_init__(self) -> None:
        if self.values < 1 or not 1 <= self.precision <= MAX_PRECISION or self.n_rows < 1 or self.rows_per_ct < 1:
            raise CryptoError(f"GradientLayout: values {self.values}, precision {self.precision}, rows {self.n_rows}, "
                              f"rows per ciphertext {self.rows_per_ct} out of range")
        if self.rows_per_ct > 1 and self.hiding < HIDING_FLOOR:
            raise CryptoError(f"GradientLayout: masks of {self.hiding} hiding bits, below the floor of {HIDING_FLOOR}")
        if self.value_bits > 63:
            raise CryptoError(f"GradientLayout: sums of {self.n_rows} rows at {self.precision} fractional bits need "
                              f"{self.value_bits}-bit slots; lower the precision")
        if self.groups < (1 if self.rows_per_ct == 1 else 2 * self.rows_per_ct - 1):
            raise CryptoError(f"GradientLayout: a {self.plain_bits}-bit plaintext holds {self.groups} groups of "
                              f"{self.group_bits} bits, too few for {self.rows_per_ct} rows a ciphertext")

    @classmethod
    def for_key(cls, pub: PublicKey, values: int, precision: int, n_rows: int, rows_per_ct: int = 1,
                hiding: int = HIDING_FLOOR) -> GradientLayout:
        return cls(int(values), int(precision), int(n_rows), pub.max_int.bit_length() - 1, int(rows_per_ct),
                   int(hiding))

    @classmethod
    def max_rows(cls, pub: PublicKey, values: int, precision: int, n_rows: int, hiding: int = HIDING_FLOOR) -> int:
        """The most rows a ciphertext can hold under ``pub`` (1 when a row needs a whole plaintext)."""
        best = 1
        for m in range(2, 64):
            try:
                cls.for_key(pub, values, precision, n_rows, m, hiding)
            except CryptoError:
                break
            best = m
        return best

    # ------------------------------------------------------------------ sizes
    @property
    def value_bits(self) -> int:
        """Bits of a slot's sum, sign included: ``|sum| <= N 2**precision < 2**(value_bits - 1)``."""
        return self.precision + int(self.n_rows).bit_length() + 1

    @property
    def masked(self) -> bool:
        return self.rows_per_ct > 1

    @property
    def slot_bits(self) -> int:
        need = self.value_bits + self.hiding + 1 if self.masked else self.value_bits
        return _bytes8(need)

    @property
    def part_values(self) -> int:
        """Values of a row in one ciphertext (all ``V`` unless a row takes several parts)."""
        return max(1, min(self.values, self.plain_bits // self.slot_bits))

    @property
    def parts(self) -> int:
        """Ciphertexts a row (group of ``m`` rows) takes."""
        return -(-self.values // self.part_values)

    @property
    def group_bits(self) -> int:
        return self.part_values * self.slot_bits

    @property
    def groups(self) -> int:
        return self.plain_bits // self.group_bits

    @property
    def bins_per_ct(self) -> int:
        """Bins a returned ciphertext holds."""
        m = self.rows_per_ct
        return max(1, (self.groups - m + 1) // m)

    @property
    def mask_bits(self) -> int:
        """Width of a garbage slot's mask (uniform in ``[0, 2**mask_bits)``)."""
        return self.value_bits - 1 + self.hiding

    @property
    def bound(self) -> int:
        """The largest magnitude of a meaningful slot (a sum of ``N`` values of at most ``2**precision``)."""
        return self.n_rows << self.precision

    def n_ciphertexts(self, n_rows: int) -> int:
        """Ciphertexts of ``n_rows`` rows: ``ceil(n_rows / m) * parts``."""
        return -(-int(n_rows) // self.rows_per_ct) * self.parts

    def histogram_sizes(self, cells: int) -> np.ndarray:
        """Bins per returned ciphertext of a histogram of ``cells`` (feature, bin) sums: runs of
        ``bins_per_ct`` across features (:func:`~verticalfs.histogram.encrypted.package_sizes` of
        the one vector), the last one shorter; none for no cells."""
        return package_sizes(np.asarray([int(cells)], dtype=np.int64), self.bins_per_ct)

    def histogram_ciphertexts(self, bin_nums: np.ndarray, skipped: bool = True) -> int:
        """Ciphertexts of one returned histogram of features of ``bin_nums`` bins:
        ``ceil(cells / bins_per_ct) * parts``, ``cells = sum_f (b_f - 1)`` with each feature's
        skipped bin left out (``sum_f b_f`` without)."""
        nums = np.asarray(bin_nums, dtype=np.int64).reshape(-1)
        cells = int(nums.sum()) - (int((nums > 0).sum()) if skipped else 0)
        return -(-cells // self.bins_per_ct) * self.parts

    def packing(self) -> SlotPacking:
        """The signed slots of one plaintext (all its groups)."""
        return SlotPacking(self.slot_bits, self.groups * self.part_values, 0)

    def describe(self) -> dict:
        return {"values": self.values, "precision": self.precision, "rows_per_ciphertext": self.rows_per_ct,
                "parts": self.parts, "slot_bits": self.slot_bits, "groups": self.groups,
                "bins_per_ciphertext": self.bins_per_ct, "masked": self.masked,
                "hiding_bits": self.hiding if self.masked else None}

    # ------------------------------------------------------------ plaintexts
    def pack_rows(self, mantissas: np.ndarray) -> np.ndarray:
        """Signed mantissas ``(n, V)`` (int64, ``|m| <= 2**precision``) -> plaintexts
        ``(ceil(n / m), parts)`` (object): row ``r`` in ciphertext ``r // m``, group ``r % m``."""
        M = np.asarray(mantissas, dtype=np.int64)
        n, V = M.shape
        if V != self.values:
            raise CryptoError(f"GradientLayout.pack_rows: {V} values a row, the layout has {self.values}")
        if M.size and int(np.abs(M).max()) > (1 << self.precision):
            raise CryptoError("GradientLayout.pack_rows: a value beyond the layout's precision bound")
        k, P = self.part_values, self.parts
        full = np.zeros((n, P * k), dtype=np.int64)
        full[:, :V] = M
        sp = SlotPacking(self.slot_bits, self.rows_per_ct * k, 0)
        cols = [sp.pack(full[:, p * k:(p + 1) * k].reshape(-1)) for p in range(P)]
        return np.stack(cols, axis=1) if n else np.zeros((0, P), dtype=object)


def quantize(g: np.ndarray, h: np.ndarray, precision: int) -> tuple[np.ndarray, np.ndarray, float, float]:
    """``(Mg, Mh, sg, sh)``: the fixed-point mantissas (int64) of ``g / sg`` and ``h / sh`` at
    ``precision`` fractional bits, ``sg`` and ``sh`` the least powers of two with ``|g| <= sg``
    and ``|h| <= sh``; a sum of mantissas ``S`` stands for ``S * s * 2**-precision``. The same
    rounding on every side: the federated trees and the central reference sum the same integers."""
    g = np.asarray(g, dtype=np.float64)
    h = np.asarray(h, dtype=np.float64)
    if not (np.all(np.isfinite(g)) and np.all(np.isfinite(h))):
        raise CryptoError("quantize: the gradients or hessians are not finite")

    def scale(a: np.ndarray) -> float:
        top = float(np.max(np.abs(a))) if a.size else 0.0
        return 1.0 if top == 0 else float(2.0 ** math.ceil(math.log2(top)))

    sg, sh = scale(g), scale(h)
    Mg = np.rint(np.ldexp(g / sg, int(precision))).astype(np.int64)
    Mh = np.rint(np.ldexp(h / sh, int(precision))).astype(np.int64)
    return Mg, Mh, sg, sh


def encrypt_rows(private_key: PrivateKey, layout: GradientLayout, mantissas: np.ndarray) -> EncryptedArray:
    """The label holder's ciphertexts ``(ceil(n / m), parts)`` of the rows' mantissas ``(n, V)``."""
    return encrypt_plaintexts(private_key, layout.pack_rows(mantissas))


# ------------------------------------------------------------------------- the party's side
def node_histogram(enc: EncryptedArray, layout: GradientLayout, positions: np.ndarray, codes: np.ndarray,
                   bin_nums: np.ndarray, skip: np.ndarray | None = None) -> tuple[EncryptedArray, np.ndarray]:
    """A party's histogram of one node, ready to return: ``(packages, sizes)``.

    ``enc`` is the tree's ciphertexts ``(ceil(N / m), parts)``; ``positions`` the node's rows as
    positions in the tree's row order (``(k,)`` ints in ``[0, N)``); ``codes`` their bin codes
    ``(k, d)``; ``bin_nums`` each feature's number of bins. The sums of every returned bin,
    Horner-combined over positions, compressed ``bins_per_ct`` to a ciphertext (``sizes``: bins per
    package, :meth:`GradientLayout.histogram_sizes`), garbage masked, sealed (re-randomised):
    ``(len(sizes), parts)``.

    ``skip``: per feature, a bin whose rows are not summed and whose sum is not returned (the
    packages hold :func:`returned_cells` only): the key holder, who knows the node's total and
    which bin each feature skips, gets it as the total minus the other bins (:func:`fill_skipped`).
    With the bin of most rows skipped (FATE's sparse optimisation, for one-hot columns the zeros) a
    party adds a fraction of the ciphertexts: the cost of a histogram is its rows outside that bin.
    The returned cells are packed one after another across features (``bins_per_ct`` a package,
    :meth:`GradientLayout.histogram_sizes`).
    """
    m, P = layout.rows_per_ct, layout.parts
    positions = np.asarray(positions, dtype=np.int64)
    codes = np.asarray(codes)
    bin_nums = np.asarray(bin_nums, dtype=np.int64)
    k, d = codes.shape
    if positions.shape != (k,) or enc.ndim != 2 or enc.shape[1] != P:
        raise ProtocolError(f"node_histogram: {positions.shape} positions, codes {codes.shape}, ciphertexts "
                            f"{enc.shape} (parts {P})")
    if k and (positions.min() < 0 or positions.max() >= enc.shape[0] * m):
        raise ProtocolError("node_histogram: a row position beyond the tree's ciphertexts")
    B = int(bin_nums.max(initial=1))
    keep = returned_cells(bin_nums, skip, flat=False)  # (d, B): the cells returned
    n_cells = int(keep.sum())
    sizes = layout.histogram_sizes(n_cells)
    if not n_cells:  # every feature has one bin, the skipped one: nothing to sum or return
        return EncryptedArray(enc.public_key, np.zeros((0, P), dtype=object), enc.exponent), sizes
    sums: EncryptedArray | None = None
    step = max(1, (1 << 20) // max(1, d))  # a block of rows: about a million (row, feature) cells
    for s in range(0, k, step):
        pos = positions[s:s + step]
        C = codes[s:s + step].astype(np.int64)
        r, f = np.nonzero(C != (-1 if skip is None else np.asarray(skip, dtype=np.int64)[None, :]))
        if not len(r):  # every row of the block in its features' skipped bins
            continue
        gid = (f * B + C[r, f]) * m + pos[r] % m  # (feature, bin, position) of each summed value
        part = enc[pos[r] // m].group_sum(gid, d * B * m)  # (d * B * m, P)
        OPS["additions"] += len(r) * P
        sums = part if sums is None else sums + part
    if sums is None:  # no rows summed: every bin holds the trivial encryption of 0 (sealed below)
        sums = EncryptedArray(enc.public_key, np.full((d * B * m, P), 1, dtype=object), enc.exponent)
    sums = sums.reshape(d, B, m, P)
    cells = sums[keep]  # (returned cells, m, P)
    out = []
    for p in range(P):
        if m > 1:  # every bin's sum into group m - 1 (Horner over positions)
            U = cells[:, :, p].reshape(n_cells * m).pack(np.full(n_cells, m, dtype=np.int64), layout.group_bits)
        else:
            U = cells[:, 0, p]
        out.append(U.pack(sizes, m * layout.group_bits))
    packages = _stack(out)
    OPS["squarings"] += P * ((m - 1) * n_cells * layout.group_bits
                             + m * layout.group_bits * int((sizes - 1).clip(min=0).sum()))
    if layout.masked and packages.size:
        packages = packages.add_mantissas(mask_garbage(layout, sizes)[:, None])
        OPS["masks"] += packages.size
    OPS["sealed"] += packages.size
    return seal(packages), sizes


def _stack(cols: list[EncryptedArray]) -> EncryptedArray:
    first = cols[0]
    if len(cols) == 1:
        return first.reshape(first.size, 1)
    n = first.size
    flat = np.empty((n, len(cols)), dtype=object)
    for p, c in enumerate(cols):
        flat[:, p] = np.asarray(c.ciphertexts(), dtype=object)
    return EncryptedArray(first.public_key, flat, first.exponent)


def _meaningful_groups(layout: GradientLayout, size: int) -> np.ndarray:
    """Group positions of a package's ``size`` bins (first bin highest): ``(m - 1) + m (size - 1 - t)``."""
    m = layout.rows_per_ct
    t = np.arange(int(size))
    return (m - 1) + m * (int(size) - 1 - t)


def mask_garbage(layout: GradientLayout, sizes: np.ndarray) -> np.ndarray:
    """The party's masks of the returned packages (object ints, one per package): a uniform
    ``mask_bits``-bit integer in every slot of every garbage group of a package's span, zero in its
    meaningful groups and above its span (drawn from the operating system's CSPRNG)."""
    m, k, w = layout.rows_per_ct, layout.part_values, layout.slot_bits
    wb = w // 8
    out = np.empty(len(sizes), dtype=object)
    mb = layout.mask_bits
    nb = -(-mb // 8)
    for q, size in enumerate(np.asarray(sizes, dtype=np.int64).tolist()):  # one big integer per package
        span = m * size + m - 1  # groups 0 .. span - 1
        raw = np.zeros((span, k, wb), dtype=np.uint8)
        raw[:, :, :nb] = np.frombuffer(os.urandom(span * k * nb), dtype=np.uint8).reshape(span, k, nb)
        if mb % 8:
            raw[:, :, nb - 1] &= (1 << (mb % 8)) - 1
        raw[_meaningful_groups(layout, size)] = 0
        out[q] = int.from_bytes(raw.tobytes(), "little")
    return out


def returned_cells(bin_nums: np.ndarray, skip: np.ndarray | None = None, flat: bool = True) -> np.ndarray:
    """The (feature, bin) cells a party's histogram returns: every bin of every feature but, with
    ``skip``, each feature's skipped bin. A bool vector over ``sum(bin_nums)`` cells in (feature,
    bin) order (``flat``), or a ``(features, max bins)`` mask. A ``skip`` of another shape or outside
    a feature's bins is a :class:`ProtocolError`."""
    nums = np.asarray(bin_nums, dtype=np.int64).reshape(-1)
    B = int(nums.max(initial=1))
    cols = np.arange(B)[None, :]
    keep = cols < nums[:, None]
    if skip is not None:
        sk = np.asarray(skip, dtype=np.int64).reshape(-1)
        if sk.shape != nums.shape or (sk < 0).any() or (sk >= nums).any():
            raise ProtocolError(f"skipped bins {sk.tolist()[:8]} do not match features of {nums.tolist()[:8]} bins")
        keep &= cols != sk[:, None]
    if not flat:
        return keep
    return keep[cols < nums[:, None]]


# --------------------------------------------------------------------- the label holder's side
def fill_skipped(sums: np.ndarray, bin_nums: np.ndarray, skip: np.ndarray, total: np.ndarray) -> np.ndarray:
    """The decoded sums ``(cells, V)`` with each feature's skipped bin set to the node's ``total``
    ``(V,)`` minus the feature's other bins (exact integers)."""
    out = np.array(sums, dtype=np.int64, copy=True)
    nums = np.asarray(bin_nums, dtype=np.int64)
    if not len(nums):
        return out
    starts = np.r_[0, np.cumsum(nums)[:-1]]
    feat = np.repeat(np.arange(len(nums)), nums)
    per = np.zeros((len(nums), out.shape[1]), dtype=np.int64)
    np.add.at(per, feat, out)
    cell = starts + np.asarray(skip, dtype=np.int64)
    out[cell] = np.asarray(total, dtype=np.int64)[None, :] - (per - out[cell])
    return out



def decode_histogram(private_key: PrivateKey, layout: GradientLayout, packages: EncryptedArray,
                     bin_nums: np.ndarray, skip: np.ndarray | None = None) -> np.ndarray:
    """The label holder's sums ``(sum of bins, V)`` (int64, features in order, bins in order) from
    a party's packages, which hold the :func:`returned_cells` of ``bin_nums`` and ``skip`` (each
    feature's skipped bin is 0 here: :func:`fill_skipped` sets it); a slot beyond the layout's bound
    is a :class:`ProtocolError`."""
    bin_nums = np.asarray(bin_nums, dtype=np.int64)
    kept = returned_cells(bin_nums, skip)
    n_cells = int(kept.sum())
    sizes = layout.histogram_sizes(n_cells)
    P, k = layout.parts, layout.part_values
    if packages.shape != (len(sizes), P):
        raise ProtocolError(f"a histogram of {packages.shape} ciphertexts, expected {(len(sizes), P)} for "
                            f"{n_cells} returned bins")
    full = np.zeros((len(kept), layout.values), dtype=np.int64)
    if not n_cells:
        return full
    sp = layout.packing()
    plain = packages.decrypt_mantissas(private_key)  # (packages, P) signed
    # slot index of every (bin, value) in its package
    pkg = np.repeat(np.arange(len(sizes)), sizes)
    first = np.r_[0, np.cumsum(sizes)[:-1]]
    t = np.arange(n_cells) - np.repeat(first, sizes)
    group = (layout.rows_per_ct - 1) + layout.rows_per_ct * (np.repeat(sizes, sizes) - 1 - t)
    out = np.zeros((n_cells, P * k), dtype=np.int64)
    for p in range(P):
        try:
            slots = sp.unpack(plain[:, p].tolist(), len(sizes) * sp.slots, wrap=True).reshape(len(sizes), sp.slots)
        except CryptoError as exc:
            raise ProtocolError(f"a histogram ciphertext does not decode in the gradient layout ({exc})") from None
        idx = group[:, None] * k + np.arange(k)[None, :]
        out[:, p * k:(p + 1) * k] = slots[pkg[:, None], idx]
    vals = out[:, :layout.values]
    if vals.size and int(np.abs(vals).max()) > layout.bound:
        raise ProtocolError("a histogram slot decoded beyond the gradient layout's bound (overflow or tampering)")
    full[kept] = vals
    return full
