"""FedSDG-FS's secure forward and backward (fedsdg-fs.md Algorithms 2 and 3), with slot packing.

Each party holds its own Paillier key pair; the label holder (the paper's server) holds the noisy
interactive-layer weights ``W~_m = w_m + eps_acc`` (``k x e_m``: ``k`` interactive outputs, ``e_m``
embedding components), the party the accumulated noise ``eps_acc``. Nobody holds ``w_m``. Per
mini-batch, with ``g`` the party's gated embeddings (open components only):

==========  =====================================================================  ==========
step        what                                                                    Algorithm
==========  =====================================================================  ==========
party       ``[[g]]`` packed twice: per column over the rows (forward) and in row     2: 9
            blocks, ``R = slots // e`` rows of ``e`` components per ciphertext
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
integers ``round(x * 2**precision)``; products carry ``2 * precision`` fractional bits. Slots are
64 bits (:class:`~verticalfs.crypto.SlotPacking`, ``(bits(n) - 1) // 64`` per ciphertext: 31 at
2048 bits). Every linear map on packed ciphertexts goes through
:func:`~verticalfs.crypto.packed_combination`, which refuses before any work a result that could
leave its slot; a value bound above ``2**61`` (so a mask of up to ``2**61`` still fits) is a
:class:`~verticalfs.exceptions.CryptoError` naming the fix. Masks are uniform in ``[-2**61,
2**61)``: a masked value hides ``61 - log2(bound)`` bits (reported as ``mask_hiding_bits``); this is
statistical hiding limited by the 64-bit slots, not the key length (see the README).

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

import numpy as np

from verticalfs.crypto import (
    EncryptedArray,
    PublicKey,
    SlotPacking,
    generate_keypair,
    packed_combination,
    slot_masks,
)
from verticalfs.exceptions import CryptoError, ProtocolError

SLOT_BITS = 64
#: masks are uniform in [-2**MASK_BITS, 2**MASK_BITS); a masked value must stay below 2**MASK_BITS
MASK_BITS = 61


def layout(pub: PublicKey) -> SlotPacking:
    """64-bit slots, as many as the key's plaintext range holds (integers: precision 0)."""
    slots = (pub.max_int.bit_length() - 1) // SLOT_BITS
    if slots < 2:
        raise CryptoError(f"FedSDG-FS secure mode: a {pub.bits}-bit key holds {slots} 64-bit slot(s); use "
                          "key_bits >= 256")
    return SlotPacking(SLOT_BITS, slots, 0)


def mantissas(x: np.ndarray, precision: int, what: str) -> np.ndarray:
    """``round(x * 2**precision)`` as int64, refusing values past ``2**MASK_BITS``."""
    x = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise CryptoError(f"FedSDG-FS secure mode: {what} holds NaN or infinite values")
    m = np.rint(np.ldexp(x, int(precision)))
    if m.size and float(np.max(np.abs(m))) >= 2.0 ** MASK_BITS:
        raise CryptoError(f"FedSDG-FS secure mode: {what} reaches {float(np.max(np.abs(x))):g}, too large for "
                          f"64-bit slots at precision {precision}; lower the precision")
    return m.astype(np.int64)


def _check_masked(bound: int, what: str) -> None:
    if bound >= 1 << MASK_BITS:
        raise CryptoError(f"FedSDG-FS secure mode: {what} could reach 2**{bound.bit_length()} in a slot, "
                          f"above the 2**{MASK_BITS} a mask can hide in 64 bits; lower the precision "
                          "(or noise_scale)")


def _hiding(bound: int) -> int:
    return MASK_BITS - max(1, int(bound)).bit_length()


def row_blocks(slots: int, e_open: int) -> int:
    """Rows per ciphertext when a row's ``e_open`` components fill one block each."""
    return max(1, slots // max(1, e_open))


def _packed(packing: SlotPacking, M: np.ndarray) -> np.ndarray:
    """Rows of ``M`` (``(P, slots)`` int64) -> ``P`` packed plaintexts."""
    return packing.pack(np.ascontiguousarray(M, dtype=np.int64).reshape(-1))


def _unpacked(packing: SlotPacking, values, count: int) -> np.ndarray:
    """Decrypted packed plaintexts -> ``(count, slots)`` int64."""
    return packing.unpack(list(values), count * packing.slots).reshape(count, packing.slots)


class ClientCrypto:
    """A party's key pair, its accumulated noise ``eps_acc`` and its side of every step."""

    def __init__(self, *, k: int, e: int, key_bits: int, insecure: bool, backend: str, randomness: str,
                 precision: int, noise_scale: float, rng: np.random.Generator) -> None:
        self.pub, self.priv = generate_keypair(int(key_bits), backend=backend, randomness=randomness,
                                               insecure=insecure)
        self.packing = layout(self.pub)
        self.S = self.packing.slots
        self.P = int(precision)
        self.k, self.e = int(k), int(e)
        if self.S < self.e:
            raise CryptoError(f"FedSDG-FS secure mode: a {self.pub.bits}-bit key holds {self.S} 64-bit slots, "
                              f"fewer than the {self.e} embedding components of a row; use a longer key "
                              "(2048 bits hold 31)")
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
            R = row_blocks(S, eo)
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
        return u - gm @ self.eps[:, st["open"]].T

    # ------------------------------------------------------------- backward
    def noisy_weight_gradient(self, data: bytes, lr: float) -> tuple[np.ndarray, bytes, int, int]:
        """Algorithm 3 lines 6-10: ``n 2**2P (dL/dw + eps_s' - eps_m / eta_0)`` (int64, ``(k, e_open)``),
        ``[[eps_acc]]`` in the block packing (``R`` blocks), ``R`` and the bound of ``eps_acc``; then
        ``eps_acc += eps_m``."""
        st = self._state()
        op, n = st["open"], st["n"]
        eo = len(op)
        R = row_blocks(self.S, eo)
        u = np.zeros((self.k, eo), dtype=np.int64)
        if eo:  # output (r, l) holds sum over rows = r mod R of delta g in block r
            U = self._decrypt(data, R * self.k).reshape(R, self.k, self.S)
            for r in range(R):  # R <= slots / e: a short loop over blocks
                u += U[r, :, r * eo:(r + 1) * eo]
        eps_m = np.zeros_like(self.eps)
        if eo:
            eps_m[:, op] = mantissas(self.rng.normal(0.0, self.noise_scale, (self.k, eo)), self.P, "the noise")
        # eps_m / eta_0 in the units of u (n 2**2P): eps_m 2**-P / eta_0 * n 2**2P
        v = u - np.rint(eps_m[:, op].astype(np.float64) * (n * 2.0 ** self.P / float(lr))).astype(np.int64)
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
        Cg = -(-n // R)
        T = self._decrypt(data, Cg)[:, :R * eo].reshape(Cg * R, eo)[:n]
        self.pending = None
        return np.ldexp(T.astype(np.float64), -2 * self.P) / n

    def _state(self) -> dict:
        if self.pending is None:
            raise ProtocolError("FedSDG-FS secure mode: a step message arrived without a pending forward pass")
        return self.pending


class ServerCrypto:
    """The label holder's side for one party: the party's public key, ``W~`` and this step's masks."""

    def __init__(self, pub: PublicKey, W: np.ndarray, precision: int) -> None:
        self.pub = pub
        self.packing = layout(pub)
        self.S = self.packing.slots
        self.P = int(precision)
        self.W = np.asarray(W, dtype=np.float64).copy()  # W~ = w + eps_acc (k x e)
        self.k = self.W.shape[0]
        self.st: dict = {}
        self.hiding = MASK_BITS

    def _masks(self, count: int) -> np.ndarray:
        return slot_masks(count * self.S, MASK_BITS + 1).reshape(count, self.S)

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
        _check_masked(bound, "the interactive layer's output")
        self.hiding = min(self.hiding, _hiding(bound))
        masks = self._masks(C * k)
        plain = _packed(self.packing, masks)
        out = EncryptedArray.from_bytes(self.pub, b"".join(o.to_bytes() for o in outs), (C * k,)) + plain
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
        R = row_blocks(self.S, eo)
        Cr = -(-n // R)
        cts = EncryptedArray.from_bytes(self.pub, rows, (Cr,))
        Dp = np.zeros((Cr * R, self.k), dtype=np.int64)
        Dp[:n] = D
        outs, bound = [], 0
        for r in range(R):  # block r of output (r, l): sum over the rows c R + r of delta[., l] g
            o, b = packed_combination(cts, Dp[r::R], st["bound_g"], self.packing)
            outs.append(o.to_bytes())
            bound = max(bound, b)
        _check_masked(bound, "the weight gradient")
        self.hiding = min(self.hiding, _hiding(bound))
        masks = self._masks(R * self.k)
        M = masks.reshape(R, self.k, self.S)
        st["eps_w"] = sum(M[r, :, r * eo:(r + 1) * eo] for r in range(R))
        out = EncryptedArray.from_bytes(self.pub, b"".join(outs), (R * self.k,))
        return (out + _packed(self.packing, masks)).rerandomize().to_bytes()

    def update_and_embedding_gradient(self, v: np.ndarray, eps: bytes, R: int, eps_bound: int, lr: float) -> bytes:
        """Algorithm 3 lines 12-15: ``W~ -= eta_0 dL~/dw``, then ``[[n 2**2P dL/dg]]`` in ``R``-row blocks."""
        st = self.st
        n, op, D, Wm = st["n"], st["open"], st["D"], st["Wm"]
        eo, S, k = len(op), self.S, self.k
        v = np.asarray(v)
        if v.dtype != np.int64 or v.shape != (k, eo):
            raise ProtocolError(f"NoisyWeightGradient must be int64 of shape {(k, eo)}, got {v.dtype} {v.shape}")
        if int(R) != row_blocks(S, eo) or int(eps_bound) < 0:
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
        _check_masked(bound + (int(np.max(np.abs(plain))) if plain.size else 0), "the embedding gradient")
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
        cts = EncryptedArray.from_bytes(self.pub, data, shape)
        return np.asarray(cts.decrypt_mantissas(self.priv), dtype=object).astype(np.int64)

    def remove_forward_noise(self, data: bytes) -> np.ndarray:
        st = self._state()
        u = self._plain(data, (st["n"], self.k))
        return u - st["gm"] @ self.eps[:, st["open"]].T

    def noisy_weight_gradient(self, data: bytes, lr: float) -> tuple[np.ndarray, bytes, int, int]:
        st = self._state()
        op, n = st["open"], st["n"]
        eo = len(op)
        u = self._plain(data, (self.k, eo)) if eo else np.zeros((self.k, 0), dtype=np.int64)
        eps_m = np.zeros_like(self.eps)
        if eo:
            eps_m[:, op] = mantissas(self.rng.normal(0.0, self.noise_scale, (self.k, eo)), self.P, "the noise")
        v = u - np.rint(eps_m[:, op].astype(np.float64) * (n * 2.0 ** self.P / float(lr))).astype(np.int64)
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

    def _masked(self, enc: EncryptedArray, bound: int, what: str) -> tuple[EncryptedArray, np.ndarray]:
        _check_masked(bound, what)
        self.hiding = min(self.hiding, _hiding(bound))
        masks = slot_masks(enc.size, MASK_BITS + 1).reshape(enc.shape)
        return enc + masks.astype(object), masks

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
        out, masks = self._masked(z, bound, "the interactive layer's output")
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
        out, st["eps_w"] = self._masked(gw, bound, "the weight gradient")
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
