"""FedSDG-FS's secure forward and backward (fedsdg-fs.md Algorithms 2 and 3), with slot packing.

Each party holds its own Paillier key pair; the label holder (the paper's server) holds the noisy
interactive-layer weights ``W~_m = w_m + eps_acc`` (``k x e_m``: ``k`` interactive outputs, ``e_m``
embedding components), the party the accumulated noise ``eps_acc``. Nobody holds ``w_m``. Per
mini-batch, with ``g`` the party's gated embeddings (open components only):

==========  =====================================================================  ==========
step        what                                                                    Algorithm
==========  =====================================================================  ==========
party       ``[[g]]`` packed twice: per column over the rows (forward) and in row     2: 9
            blocks, ``R <= slots // e`` rows of ``e`` components per ciphertext
            (backward); sends both
server      ``[[z~]] = [[g]] W~^T`` on the column packing, plus masks ``eps_s``       2: 11-14
party       decrypts, removes ``g eps_acc^T``, sends ``z + eps_s``                    2: 15-18
server      removes ``eps_s``: ``z_m``; loss on ``sum_m z_m + b`` and the layers      2: 19-21
            after it; ``delta = dL/dz``
server      ``[[dL/dw + eps_s']] = delta^T [[g]]`` on the row blocks: one linear map  3: 2-4
            per block (the other blocks of its output are masked junk)
party       decrypts, subtracts ``eps_m / eta_0``, encrypts ``eps_acc``, then         3: 5-10
            ``eps_acc += eps_m``; sends both
server      removes ``eps_s'``; ``W~ -= eta_0 dL~/dw``; ``[[dL/dg]] = delta W~ -      3: 11-15
            [[eps_acc]] delta`` (block packing: ``R`` rows per ciphertext)
party       decrypts ``dL/dg`` and steps its model and gates                          3: 16-20
==========  =====================================================================  ==========

Fixed point. Embeddings, weights, noise and ``n * delta`` (the per-row gradient, O(1)) are
integers ``round(x * 2**precision)``; products carry ``2 * precision`` fractional bits. Every
linear map on packed ciphertexts goes through :func:`~verticalfs.crypto.packed_combination`, which
refuses before any work a result that could leave its slot.

Masks with a floor (our reading of sections IV-D's "random noises eps_s", which the paper leaves
unsized). The server's masks ``eps_s`` (forward, Algorithm 2 line 13) and ``eps_s'`` (backward,
Algorithm 3 line 3) are uniform in ``[-2**mask_bits, 2**mask_bits)``; the party, who decrypts,
sees ``value + mask``. A masked value below ``2**b`` in magnitude is then hidden statistically:
the distance between the distributions of ``value + mask`` and ``mask`` is at most
``2**b / 2**(mask_bits + 1)``. We call ``mask_bits - b`` the *hiding bits* (``b`` = bits of the
largest masked magnitude) and require at least :data:`HIDING_FLOOR` = 40 at every masked step. The
slots are sized for it (:func:`slot_bits_for`): a masked value at ``2 * precision`` fractional bits
whose real magnitude stays below ``2**value_bits`` has ``b <= 2 * precision + value_bits``, so
``slot_bits = 8 ceil((2 precision + value_bits + 40 + 2) / 8)`` (two bits for the sign and the
carry of value + mask) and ``mask_bits = slot_bits - 2``: 88-bit slots at the defaults (precision
12, value_bits 16), 23 per 2048-bit ciphertext (64-bit slots, 31 per ciphertext, gave 31-34 bits of
hiding before 2026-11-26). A step whose actual bound leaves fewer than 40 bits is a
:class:`~verticalfs.exceptions.CryptoError` naming ``value_bits`` and ``precision`` before that
step's masks are drawn; a key too short for ``embedding_dim`` slots of that width is refused when
the run is configured (:func:`check_layout`). The minimum over the run is reported as
``info_["mask_hiding_bits"]`` (per step: ``info_["mask_hiding_bits_by_step"]``).

Shares in the ring ``Z / 2**64``. Slots wider than 64 bits hold ``value + mask`` beyond int64; the
party reads every decrypted slot modulo ``2**64`` (``SlotPacking.unpack(..., wrap=True)``) and
returns ``z + eps_s`` (and ``dL/dw + eps_s' - eps_m / eta_0``) as int64 residues modulo ``2**64``,
strictly less than the paper's full values. The server subtracts its masks' residues and gets the
value exactly, because every unmasked value stays below ``2**INT_BITS`` (checked on both sides), so
the messages keep their int64 dtype and strict shape checks.

Every ciphertext the server returns to the party (the key holder) is re-randomised first
(:meth:`~verticalfs.crypto.EncryptedArray.rerandomize`: times a fresh ``r**n``). Without it the
party, which made every obfuscator of ``[[g]]``, strips the plaintext and reads ``W~``'s entries as
exponents of its own obfuscators (``tests/crypto/test_returned_ciphertexts.py`` runs that attack).

Interpretations (documented here, fedsdg-fs.md sections IV-D and V-A):

- ``w_m`` moves by plain SGD with ``eta_0 = lr`` (Algorithm 3 line 13): the server only ever sees
  ``dL/dw - eps_m / eta_0``, so it cannot keep Adam's moments of the true gradient. Everything else
  (the layers after ``w``, the parties' models and gates) uses Adam as section V-A says. The
  plaintext mode (``secure=False``) uses the same split, so both compute the same model.
- ``eps_acc`` starts at 0 (the server initialises ``w`` at random, as any top model); every step
  adds ``eps_m ~ N(0, noise_scale**2)`` on the open components' columns.
- ``eps_m`` is per party (the paper's ``eps_acc = sum_m sum_t eps_m^t`` names one sum; each party's
  block of ``w`` needs only its own noise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from verticalfs.crypto import (
    HIDING_FLOOR,
    EncryptedArray,
    PublicKey,
    SlotPacking,
    generate_keypair,
    packed_combination,
)
from verticalfs.crypto.backends import BACKENDS, RANDOMNESS
from verticalfs.exceptions import CryptoError, ProtocolError
from verticalfs.params import Checked, Constraints, Interval, Options

#: default bits of the largest real magnitude of a masked value (FedSDGParams.value_bits)
VALUE_BITS = 16
#: every value unmasked in the clear (z, dL/dw, dL/dg, the party's noise terms) stays below
#: 2**INT_BITS in magnitude: exact in int64 after a sum of two
INT_BITS = 61


def slot_bits_for(precision: int, value_bits: int) -> int:
    """Slot width giving masks of ``slot_bits - 2 >= 2 precision + value_bits + 40`` bits."""
    return 8 * -(-(2 * int(precision) + int(value_bits) + HIDING_FLOOR + 2) // 8)


def slots_for(plain_bits: int, precision: int, value_bits: int) -> int:
    """Slots per ciphertext for a plaintext range of ``plain_bits`` bits (``bits(n // 3)``)."""
    return (int(plain_bits) - 1) // slot_bits_for(precision, value_bits)


def _layout_error(key: str, key_bits: int, slots: int, e: int, precision: int, value_bits: int) -> str:
    b = slot_bits_for(precision, value_bits)
    return (f"FedSDG-FS secure mode: a {key_bits}-bit key holds {slots} slots of {b} bits (masks hiding "
            f">= {HIDING_FLOOR} bits at precision {precision}, value_bits {value_bits}), fewer than the "
            f"{e} embedding components of a row; raise {key} (2048 bits hold "
            f"{slots_for(2046, precision, value_bits)}), or lower precision, value_bits or embedding_dim")


def check_layout(key_bits: int, precision: int, value_bits: int, e: int) -> None:
    """Before any work: can a ``key_bits`` key give ``e`` slots whose masks hide >= 40 bits?"""
    if 2 * int(precision) + int(value_bits) > INT_BITS:
        raise CryptoError(f"FedSDG-FS secure mode: 2 * precision + value_bits = "
                          f"{2 * int(precision) + int(value_bits)} bits exceed the {INT_BITS} bits a value "
                          "may have in the clear; lower precision or value_bits")
    slots = slots_for(int(key_bits) - 2, precision, value_bits)  # bits(n // 3) >= key_bits - 2
    if slots < max(1, int(e)):
        raise CryptoError(_layout_error("key_bits", int(key_bits), slots, int(e), precision, value_bits))


class Layout:
    """A key's slot packing for secure training and its masks' width (``slot_bits - 2``)."""

    def __init__(self, pub: PublicKey, precision: int, value_bits: int) -> None:
        self.precision, self.value_bits = int(precision), int(value_bits)
        b = slot_bits_for(precision, value_bits)
        slots = slots_for(pub.max_int.bit_length(), precision, value_bits)
        if slots < 1:
            raise CryptoError(_layout_error("key_bits", pub.bits, slots, 1, precision, value_bits))
        self.packing = SlotPacking(b, slots, 0)
        self.mask_bits = b - 2

    def hiding(self, bound: int, what: str) -> int:
        """Hiding bits of this layout's masks on a value bounded by ``bound`` (a slot's magnitude);
        below :data:`HIDING_FLOOR`, or beyond int64 once unmasked, a :class:`CryptoError`."""
        bits = max(1, int(bound)).bit_length()
        h = self.mask_bits - bits
        if h < HIDING_FLOOR or bits > INT_BITS:
            raise CryptoError(f"FedSDG-FS secure mode: {what} could reach 2**{bits} in a slot; "
                              f"{self.mask_bits}-bit masks ({self.packing.slot_bits}-bit slots) would hide it "
                              f"by {h} bits, below the floor of {HIDING_FLOOR} (or beyond int64): raise "
                              f"value_bits (now {self.value_bits}) or lower precision (now {self.precision})")
        return h


def mantissas(x: np.ndarray, precision: int, what: str) -> np.ndarray:
    """``round(x * 2**precision)`` as int64, refusing values past ``2**INT_BITS``."""
    x = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise CryptoError(f"FedSDG-FS secure mode: {what} holds NaN or infinite values")
    m = np.rint(np.ldexp(x, int(precision)))
    if m.size and float(np.max(np.abs(m))) >= 2.0 ** INT_BITS:
        raise CryptoError(f"FedSDG-FS secure mode: {what} reaches {float(np.max(np.abs(x))):g}, too large at "
                          f"precision {precision}; lower the precision")
    return m.astype(np.int64)


def _check_clear(bound: int, what: str) -> None:
    """A value the party reads unmasked must stay exact in int64."""
    if int(bound) >= 1 << INT_BITS:
        raise CryptoError(f"FedSDG-FS secure mode: {what} could reach 2**{int(bound).bit_length()}, beyond "
                          f"2**{INT_BITS}; lower precision or noise_scale")


def ring(values) -> np.ndarray:
    """Integers (object or int64) modulo ``2**64``, as int64 (two's complement)."""
    a = np.asarray(values)
    if a.dtype == object:
        return (a % (1 << 64)).astype(np.uint64).view(np.int64)
    return a.astype(np.int64)


def row_blocks(slots: int, e_open: int, n: int, k: int) -> int:
    """Rows per ciphertext ``R`` of the backward's block packing (a row's ``e_open`` components fill
    one block; at most ``slots // e_open`` blocks). ``R`` sets the backward's ciphertexts: ``k R``
    weight-gradient outputs and ``k R`` of ``[[eps_acc]]``, ``ceil(n / R)`` row blocks and
    embedding-gradient outputs; the ``R`` minimising ``k R + ceil(n / R)`` (the larger on a tie)
    needs the fewest encryptions, decryptions and re-randomisations, with the same values. The
    most blocks that fit, the choice before, cost 374 against 91 a batch of 128 rows with one
    component open and ``k = 16``."""
    top = max(1, int(slots) // max(1, int(e_open)))
    n, k = max(1, int(n)), max(1, int(k))
    return min(range(1, top + 1), key=lambda R: (k * R + -(-n // R), -R))


def _packed(packing: SlotPacking, M: np.ndarray) -> np.ndarray:
    """Rows of ``M`` (``(P, slots)`` int64) -> ``P`` packed plaintexts."""
    return packing.pack(np.ascontiguousarray(M, dtype=np.int64).reshape(-1))


def _unpacked(packing: SlotPacking, values, count: int) -> np.ndarray:
    """Decrypted packed plaintexts -> ``(count, slots)`` int64, each slot modulo ``2**64``."""
    return packing.unpack(list(values), count * packing.slots, wrap=True).reshape(count, packing.slots)


class ClientCrypto:
    """A party's key pair, its accumulated noise ``eps_acc`` and its side of every step."""

    def __init__(self, *, k: int, e: int, key_bits: int, insecure: bool, backend: str, randomness: str,
                 precision: int, noise_scale: float, rng: np.random.Generator,
                 value_bits: int = VALUE_BITS) -> None:
        check_layout(int(key_bits), precision, value_bits, 1)
        self.pub, self.priv = generate_keypair(int(key_bits), backend=backend, randomness=randomness,
                                               insecure=insecure)
        self.layout = Layout(self.pub, precision, value_bits)
        self.packing = self.layout.packing
        self.S = self.packing.slots
        self.P = int(precision)
        self.k, self.e = int(k), int(e)
        if self.S < self.e:
            raise CryptoError(_layout_error("key_bits", self.pub.bits, self.S, self.e, precision, value_bits))
        self.eps = np.zeros((self.k, self.e), dtype=np.int64)  # eps_acc, mantissas at 2**-P
        self.noise_scale = float(noise_scale)
        self.rng = rng
        self.pending: dict | None = None

    def _encrypt(self, plain: np.ndarray) -> bytes:
        return EncryptedArray.encrypt(self.priv, plain, precision=0).to_bytes() if plain.size else b""

    def _decrypt(self, data: bytes, count: int) -> np.ndarray:
        cts = EncryptedArray.from_bytes(self.pub, data, (count,))
        return _unpacked(self.packing, cts.decrypt_mantissas(self.priv).ravel().tolist(), count)

    # -------------------------------------------------------------- forward
    def encrypt_embeddings(self, g: np.ndarray, open_idx: np.ndarray, train: bool) -> tuple[bytes, bytes, int]:
        """Algorithm 2 line 9: ``[[g]]`` column-packed (and row-packed when training), and the
        bound of the embedding mantissas."""
        gm = mantissas(g, self.P, "the embeddings")
        n, eo = gm.shape
        S = self.S
        C = -(-n // S)
        col = np.zeros((eo, C * S), dtype=np.int64)
        col[:, :n] = gm.T
        plain = _packed(self.packing, col.reshape(eo * C, S))
        rows = b""
        if train and eo:  # R rows per ciphertext, row c R + r in block r
            R = row_blocks(S, eo, n, self.k)
            Cr = -(-n // R)
            B = np.zeros((Cr * R, eo), dtype=np.int64)
            B[:n] = gm
            M = np.zeros((Cr, S), dtype=np.int64)
            M[:, :R * eo] = B.reshape(Cr, R * eo)
            rows = self._encrypt(_packed(self.packing, M))
        self.pending = {"gm": gm, "open": np.asarray(open_idx, dtype=np.int64), "n": n}
        return self._encrypt(plain), rows, int(np.max(np.abs(gm))) if gm.size else 0

    def remove_forward_noise(self, data: bytes) -> np.ndarray:
        """Algorithm 2 lines 16-17: ``z + eps_s`` (int64 mantissas at ``2**-2P``, ``(n, k)``)."""
        st = self._state()
        gm, n = st["gm"], st["n"]
        C = -(-n // self.S)
        u = self._decrypt(data, C * self.k).reshape(C, self.k, self.S).transpose(0, 2, 1).reshape(C * self.S, self.k)[:n]
        return u - self._noise_products(gm, st["open"])  # modulo 2**64: (z + eps_s) mod 2**64

    def _noise_products(self, gm: np.ndarray, op: np.ndarray) -> np.ndarray:
        """``g eps_acc^T`` (mantissas at ``2**-2P``), checked to stay exact in int64."""
        E = self.eps[:, op]
        if gm.size and E.size:
            _check_clear(int(np.max(np.abs(gm))) * int(np.abs(E).sum(1).max()), "g eps_acc")
        return gm @ E.T

    def _noise_term(self, eps_m: np.ndarray, n: int, lr: float) -> np.ndarray:
        """``eps_m / eta_0`` in the units of ``n 2**2P dL/dw``, checked to stay exact in int64."""
        t = np.rint(eps_m.astype(np.float64) * (n * 2.0 ** self.P / float(lr)))
        if t.size and float(np.max(np.abs(t))) >= 2.0 ** INT_BITS:
            raise CryptoError("FedSDG-FS secure mode: eps_m / eta_0 goes beyond int64; lower noise_scale or "
                              "precision, or raise lr")
        return t.astype(np.int64)

    # ------------------------------------------------------------- backward
    def noisy_weight_gradient(self, data: bytes, lr: float) -> tuple[np.ndarray, bytes, int, int]:
        """Algorithm 3 lines 6-10: ``n 2**2P (dL/dw + eps_s' - eps_m / eta_0)`` (int64, ``(k, e_open)``),
        ``[[eps_acc]]`` in the block packing (``R`` blocks), ``R`` and the bound of ``eps_acc``; then
        ``eps_acc += eps_m``."""
        st = self._state()
        op, n = st["open"], st["n"]
        eo = len(op)
        R = row_blocks(self.S, eo, n, self.k)
        u = np.zeros((self.k, eo), dtype=np.int64)
        if eo:  # output (r, l) holds sum over rows = r mod R of delta g in block r
            U = self._decrypt(data, R * self.k).reshape(R, self.k, self.S)
            for r in range(R):  # R <= slots / e: a short loop over blocks
                u += U[r, :, r * eo:(r + 1) * eo]
        eps_m = np.zeros_like(self.eps)
        if eo:
            eps_m[:, op] = mantissas(self.rng.normal(0.0, self.noise_scale, (self.k, eo)), self.P, "the noise")
        # eps_m / eta_0 in the units of u (n 2**2P): eps_m 2**-P / eta_0 * n 2**2P; modulo 2**64
        v = u - self._noise_term(eps_m[:, op], n, lr)
        blocks = np.zeros((R, self.k, self.S), dtype=np.int64)
        for r in range(R):  # R <= slots: a short loop over blocks, not over values
            blocks[r, :, r * eo:(r + 1) * eo] = self.eps[:, op]
        eps_bytes = self._encrypt(_packed(self.packing, blocks.reshape(R * self.k, self.S)))
        bound = int(np.max(np.abs(self.eps[:, op]))) if eo else 0
        self.eps += eps_m
        return v, eps_bytes, R, bound

    def embedding_gradient(self, data: bytes, R: int) -> np.ndarray:
        """Algorithm 3 line 17: ``dL/dg`` of the open components, float ``(n, e_open)``."""
        st = self._state()
        n, eo = st["n"], len(st["open"])
        self.pending = None
        if not eo:  # every component closed: the server sent no ciphertext (Algorithm 3 has nothing to send back)
            return np.zeros((n, 0), dtype=np.float64)
        Cg = -(-n // R)
        T = self._decrypt(data, Cg)[:, :R * eo].reshape(Cg * R, eo)[:n]
        return np.ldexp(T.astype(np.float64), -2 * self.P) / n

    def _state(self) -> dict:
        if self.pending is None:
            raise ProtocolError("FedSDG-FS secure mode: a step message arrived without a pending forward pass")
        return self.pending


class ServerCrypto:
    """The label holder's side for one party: the party's public key, ``W~`` and this step's masks."""

    def __init__(self, pub: PublicKey, W: np.ndarray, precision: int, value_bits: int = VALUE_BITS) -> None:
        self.pub = pub
        self.layout = Layout(pub, precision, value_bits)
        self.packing = self.layout.packing
        self.S = self.packing.slots
        self.P = int(precision)
        self.W = np.asarray(W, dtype=np.float64).copy()  # W~ = w + eps_acc (k x e)
        self.k = self.W.shape[0]
        self.st: dict = {}
        #: the least hiding bits of the masks of each step so far (``forward``, ``weight_gradient``)
        self.hiding_by_step: dict[str, int] = {}

    @property
    def hiding(self) -> int | None:
        """The least hiding bits of any mask drawn so far (None: none yet)."""
        return min(self.hiding_by_step.values(), default=None)

    def _floor(self, bound: int, step: str, what: str) -> None:
        """The floor check, before the step's masks are drawn, and its record."""
        h = self.layout.hiding(bound, what)
        self.hiding_by_step[step] = min(h, self.hiding_by_step.get(step, h))

    def _masks(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Masks for ``count`` packed ciphertexts: plaintexts and residues ``(count, S)`` mod 2**64."""
        plain, low = self.packing.random_masks(count * self.S, self.layout.mask_bits)
        return plain, low.reshape(count, self.S)

    def masked_products(self, data: bytes, open_idx: np.ndarray, n: int, bound_g: int) -> bytes:
        """Algorithm 2 lines 11-14: ``[[g W~^T + eps_s]]`` per row chunk, ``(C, k)`` ciphertexts."""
        op = np.asarray(open_idx, dtype=np.int64)
        eo, S, k = len(op), self.S, self.k
        C = -(-n // S)
        Wm = mantissas(self.W[:, op], self.P, "the interactive layer")
        cts = EncryptedArray.from_bytes(self.pub, data, (eo, C)) if eo else None
        outs, bound = [], 0
        for c in range(C):  # chunks of S rows: one linear map each
            if eo:
                o, b = packed_combination(cts[:, c], Wm.T, bound_g, self.packing)
            else:
                o, b = EncryptedArray.encrypt(self.pub, np.zeros(k, dtype=np.int64), precision=0), 0
            outs.append(o)
            bound = max(bound, b)
        self._floor(bound, "forward", "the interactive layer's output")
        plain, masks = self._masks(C * k)
        out = EncryptedArray.from_bytes(self.pub, b"".join(o.to_bytes() for o in outs), (C * k,)).add_mantissas(plain)
        self.st = {"eps_s": masks.reshape(C, k, S).transpose(0, 2, 1).reshape(C * S, k)[:n], "Wm": Wm,
                   "open": op, "n": n, "bound_g": bound_g}
        return out.rerandomize().to_bytes()

    def interactive_output(self, shares: np.ndarray) -> np.ndarray:
        """Algorithm 2 line 20: ``z_m`` (float, ``(n, k)``) from the party's ``z + eps_s``."""
        st = self.st
        shares = np.asarray(shares)
        if shares.dtype != np.int64 or shares.shape != st["eps_s"].shape:
            raise ProtocolError(f"ForwardShares must be int64 of shape {st['eps_s'].shape}, got "
                                f"{shares.dtype} {shares.shape}")
        return np.ldexp((shares - st["eps_s"]).astype(np.float64), -2 * self.P)

    def masked_weight_gradient(self, rows: bytes, delta: np.ndarray) -> bytes:
        """Algorithm 3 lines 2-4: ``[[n 2**2P dL/dw + eps_s']]``, ``k`` ciphertexts (slots: components)."""
        st = self.st
        n, op = st["n"], st["open"]
        D = mantissas(np.asarray(delta, dtype=np.float64) * n, self.P, "the loss gradient")
        st["D"] = D
        if not len(op):
            st["eps_w"] = np.zeros((self.k, 0), dtype=np.int64)
            return b""
        eo = len(op)
        R = row_blocks(self.S, eo, n, self.k)
        Cr = -(-n // R)
        cts = EncryptedArray.from_bytes(self.pub, rows, (Cr,))
        Dp = np.zeros((Cr * R, self.k), dtype=np.int64)
        Dp[:n] = D
        outs, bound = [], 0
        for r in range(R):  # block r of output (r, l): sum over the rows c R + r of delta[., l] g
            o, b = packed_combination(cts, Dp[r::R], st["bound_g"], self.packing)
            outs.append(o.to_bytes())
            bound = max(bound, b)
        self._floor(bound, "weight_gradient", "the weight gradient")
        plain, masks = self._masks(R * self.k)
        M = masks.reshape(R, self.k, self.S)
        st["eps_w"] = sum(M[r, :, r * eo:(r + 1) * eo] for r in range(R))  # modulo 2**64
        out = EncryptedArray.from_bytes(self.pub, b"".join(outs), (R * self.k,))
        return out.add_mantissas(plain).rerandomize().to_bytes()

    def update_and_embedding_gradient(self, v: np.ndarray, eps: bytes, R: int, eps_bound: int, lr: float) -> bytes:
        """Algorithm 3 lines 12-15: ``W~ -= eta_0 dL~/dw``, then ``[[n 2**2P dL/dg]]`` in ``R``-row blocks."""
        st = self.st
        n, op, D, Wm = st["n"], st["open"], st["D"], st["Wm"]
        eo, S, k = len(op), self.S, self.k
        v = np.asarray(v)
        if v.dtype != np.int64 or v.shape != (k, eo):
            raise ProtocolError(f"NoisyWeightGradient must be int64 of shape {(k, eo)}, got {v.dtype} {v.shape}")
        if int(R) != row_blocks(S, eo, n, k) or int(eps_bound) < 0:
            raise ProtocolError(f"NoisyWeightGradient: block count {R} or bound {eps_bound} out of range")
        R = int(R)
        grad = np.ldexp((v - st["eps_w"]).astype(np.float64), -2 * self.P) / n
        self.W[:, op] -= float(lr) * grad  # Algorithm 3 line 13 (plain SGD on W~)
        if not eo:
            return b""
        Cg = -(-n // R)
        Dp = np.zeros((Cg * R, k), dtype=np.int64)
        Dp[:n] = D
        # output c holds rows c R .. c R + R - 1; input (r, l) is eps_acc's row l in block r
        K = Dp.reshape(Cg, R, k).transpose(1, 2, 0).reshape(R * k, Cg)
        E = EncryptedArray.from_bytes(self.pub, eps, (R * k,))
        enc, bound = packed_combination(E, K, int(eps_bound), self.packing)
        plain = np.zeros((Cg * R, eo), dtype=np.int64)  # delta W~ (the old W~, as in the forward)
        plain[:n] = D @ Wm
        _check_clear(bound + (int(np.max(np.abs(plain))) if plain.size else 0), "the embedding gradient")
        P = np.zeros((Cg, S), dtype=np.int64)
        P[:, :R * eo] = plain.reshape(Cg, R * eo)
        return ((-enc) + _packed(self.packing, P)).rerandomize().to_bytes()



# ------------------------------------------------------------------ one value per ciphertext
class UnpackedClientCrypto(ClientCrypto):
    """The same protocol with one value per ciphertext (``packed=False``): the straight
    implementation the packed one is measured against (benchmarks/fedsdg_fs/secure_speed.py)."""

    def encrypt_embeddings(self, g: np.ndarray, open_idx: np.ndarray, train: bool) -> tuple[bytes, bytes, int]:
        gm = mantissas(g, self.P, "the embeddings")
        self.pending = {"gm": gm, "open": np.asarray(open_idx, dtype=np.int64), "n": gm.shape[0]}
        return self._encrypt(gm), b"", int(np.max(np.abs(gm))) if gm.size else 0

    def _plain(self, data: bytes, shape) -> np.ndarray:
        """Decrypted values modulo ``2**64`` (int64)."""
        cts = EncryptedArray.from_bytes(self.pub, data, shape)
        return ring(cts.decrypt_mantissas(self.priv))

    def remove_forward_noise(self, data: bytes) -> np.ndarray:
        st = self._state()
        u = self._plain(data, (st["n"], self.k))
        return u - self._noise_products(st["gm"], st["open"])

    def noisy_weight_gradient(self, data: bytes, lr: float) -> tuple[np.ndarray, bytes, int, int]:
        st = self._state()
        op, n = st["open"], st["n"]
        eo = len(op)
        u = self._plain(data, (self.k, eo)) if eo else np.zeros((self.k, 0), dtype=np.int64)
        eps_m = np.zeros_like(self.eps)
        if eo:
            eps_m[:, op] = mantissas(self.rng.normal(0.0, self.noise_scale, (self.k, eo)), self.P, "the noise")
        v = u - self._noise_term(eps_m[:, op], n, lr)
        eps_bytes = self._encrypt(self.eps[:, op])
        bound = int(np.max(np.abs(self.eps[:, op]))) if eo else 0
        self.eps += eps_m
        return v, eps_bytes, 1, bound

    def embedding_gradient(self, data: bytes, R: int) -> np.ndarray:
        st = self._state()
        n, eo = st["n"], len(st["open"])
        T = self._plain(data, (n, eo)) if eo else np.zeros((n, 0), dtype=np.int64)
        self.pending = None
        return np.ldexp(T.astype(np.float64), -2 * self.P) / n


class UnpackedServerCrypto(ServerCrypto):
    """The label holder's side with one value per ciphertext (element-wise exponentiations)."""

    def _masked(self, enc: EncryptedArray, bound: int, step: str, what: str) -> tuple[EncryptedArray, np.ndarray]:
        """``enc`` plus masks of the packed layout's width (one per ciphertext), and the masks'
        residues modulo ``2**64``."""
        self._floor(bound, step, what)
        one = SlotPacking(self.packing.slot_bits, 1, 0)  # a one-slot "packing": the masks themselves
        plain, low = one.random_masks(enc.size, self.layout.mask_bits)
        return enc.add_mantissas(plain.reshape(enc.shape)), low.reshape(enc.shape)

    def masked_products(self, data: bytes, open_idx: np.ndarray, n: int, bound_g: int) -> bytes:
        op = np.asarray(open_idx, dtype=np.int64)
        eo, k = len(op), self.k
        Wm = mantissas(self.W[:, op], self.P, "the interactive layer")
        if eo:
            cts = EncryptedArray.from_bytes(self.pub, data, (n, eo, 1))
            z = (cts * Wm.T[None, :, :]).sum(axis=1)  # (n, k): n e k exponentiations
        else:
            z = EncryptedArray.encrypt(self.pub, np.zeros((n, k), dtype=np.int64), precision=0)
        bound = int(np.abs(Wm).sum(1).max()) * int(bound_g) if eo else 0
        out, masks = self._masked(z, bound, "forward", "the interactive layer's output")
        self.st = {"eps_s": masks, "Wm": Wm, "open": op, "n": n, "bound_g": bound_g, "cols": data}
        return out.rerandomize().to_bytes()

    def masked_weight_gradient(self, rows: bytes, delta: np.ndarray) -> bytes:
        st = self.st
        n, op = st["n"], st["open"]
        eo = len(op)
        D = mantissas(np.asarray(delta, dtype=np.float64) * n, self.P, "the loss gradient")
        st["D"] = D
        if not eo:
            st["eps_w"] = np.zeros((self.k, 0), dtype=np.int64)
            return b""
        cts = EncryptedArray.from_bytes(self.pub, st["cols"], (n, 1, eo))
        gw = (cts * D[:, :, None]).sum(axis=0)  # (k, e_open): n k e exponentiations
        bound = int(np.abs(D).sum(0).max()) * int(st["bound_g"])
        out, st["eps_w"] = self._masked(gw, bound, "weight_gradient", "the weight gradient")
        return out.rerandomize().to_bytes()

    def update_and_embedding_gradient(self, v: np.ndarray, eps: bytes, R: int, eps_bound: int, lr: float) -> bytes:
        st = self.st
        n, op, D, Wm = st["n"], st["open"], st["D"], st["Wm"]
        eo, k = len(op), self.k
        v = np.asarray(v)
        if v.dtype != np.int64 or v.shape != (k, eo):
            raise ProtocolError(f"NoisyWeightGradient must be int64 of shape {(k, eo)}, got {v.dtype} {v.shape}")
        grad = np.ldexp((v - st["eps_w"]).astype(np.float64), -2 * self.P) / n
        self.W[:, op] -= float(lr) * grad
        if not eo:
            return b""
        E = EncryptedArray.from_bytes(self.pub, eps, (1, k, eo))
        dE = (E * D[:, :, None]).sum(axis=1)  # (n, e_open): n k e exponentiations
        return ((-dE) + (D @ Wm).astype(object)).rerandomize().to_bytes()


# ------------------------------------------------------------------------- the methods' parameters
@dataclass
class SecureScoreParams(Checked):
    """The encrypted feature scores' parameters (Algorithm 1's Gini scores, SFFS's F statistic).

    Parameters
    ----------
    secure : bool
        Compute the scores under Paillier (default); False sends the training labels to the parties
        in the clear and gives the same scores (for comparison and fast benchmarks; declared as a
        disclosure).
    key_bits : int
        Paillier modulus length (2048).
    insecure : bool
        Allow ``key_bits < 2048`` (tests only).
    backend : str
        Paillier back end (``auto``, ``python``, ``phe``, ``pypaillier``, ``heu``).
    randomness : str
        Paillier randomness, ``full`` or ``short`` (see :mod:`verticalfs.crypto.backends`).
    mask_bits : int
        Bits of the random masks of the squaring step (64): uniform in ``[0, 2**mask_bits)``. They
        hide the class counts, at most the ``N`` training rows, by ``mask_bits - bits(N)`` bits,
        which must be at least 40 (checked before any work: 64 bits serve up to 2**24 rows). SFFS
        widens its masks by ``bits(N) + 40`` for its fixed-point class sums, and each party checks
        the 40 bits against its own columns.
    target_bins : int
        A regression target is cut into this many equal-frequency classes (2; fedsdg-fs.md Table I
        lists the regression set FRIEDMAN with 2 classes).
    """

    secure: bool = True
    key_bits: int = 2048
    insecure: bool = False
    backend: str = "auto"
    randomness: str = "full"
    mask_bits: int = 64
    target_bins: int = 2

    #: the values each field may take (:mod:`verticalfs.params`)
    constraints: ClassVar[Constraints] = {
        "key_bits": [Interval(int, 1, None)],
        "backend": [Options("auto", *BACKENDS)],
        "randomness": [Options(*RANDOMNESS)],
        "mask_bits": [Interval(int, 16, 256)],
        "target_bins": [Interval(int, 2, None)],
    }
