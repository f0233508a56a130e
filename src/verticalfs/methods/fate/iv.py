"""``fate-iv``: information value per feature with FATE's hetero feature-binning protocol
(feast.md section 5.1, baseline "FATE-IV"; FATE ``HeteroFeatureBinningGuest/Host``).

Protocol (phase ``selection``):

1. The label holder (FATE's guest) generates a Paillier key pair and encrypts one *label code*
   per training row: ``y * 2**b + (1 - y)`` with ``b`` the bit length of the number of
   non-events (``packing = "packed"``, FATE >= 1.7's ``GuestIntegerPacker``: one ciphertext per
   row carries both the event and the non-event count), or ``y`` and ``1 - y`` separately
   (``"pair"``, older FATE). It sends the public key, the compression parameters (slot width =
   the two count widths, capacity = slots per plaintext) and the same ciphertexts to every feature
   party (FATE's hosts).
2. Each party bins its own training columns (FATE's quantile binning, ``n_bins`` = 10) and sums
   the ciphertexts per (feature, bin) (:meth:`~verticalfs.crypto.EncryptedArray.group_sum`). In
   ``packed`` mode it packs each feature's bin sums into as few ciphertexts as the capacity allows
   (:meth:`~verticalfs.crypto.EncryptedArray.pack`, FATE's ``CipherCompressorHost``: usually one
   ciphertext per feature) and returns them with its number of bins per feature.
3. The label holder decrypts, unpacks events / non-events per bin, computes WoE and IV with
   FATE's adjustment for bins without events or non-events (:mod:`verticalfs.methods.fate.binning`)
   and selects the N features of highest IV over all parties (ties: party order, then column).

The active party of this library holds no feature columns, so every feature party is a host and
the guest's local IV step of FATE has nothing to bin. feast.md section 5.2 says FATE-IV "does not
utilize any cryptographic techniques"; FATE's hetero binning does encrypt the labels sent to the
hosts, and this implementation follows FATE's code (the encryption is its main cost).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from verticalfs.crypto import EncryptedArray, generate_keypair, unpack_slots
from verticalfs.crypto.backends import BACKENDS, RANDOMNESS
from verticalfs.crypto.params import check_crypto_params
from verticalfs.exceptions import ConfigError, ProtocolError
from verticalfs.histogram import encrypt_plaintexts, label_codes, package_sizes
from verticalfs.methods import labels_proof
from verticalfs.methods.fate.binning import woe_iv
from verticalfs.methods.fate.messages import IVBinSums, IVLabels
from verticalfs.methods.fate.role import IVRole
from verticalfs.methods.filter import SELECTION, FilterMethod, FilterParams
from verticalfs.methods.registry import register
from verticalfs.params import Constraints, Interval, Options

PACKINGS = ("packed", "pair")


@dataclass
class FateIVParams(FilterParams):
    """FATE-IV: top-N features by information value (FATE's hetero feature binning).

    Parameters
    ----------
    n_bins : int
        Quantile bins per feature (FATE ``bin_num``, default 10).
    adjustment_factor : float
        FATE's WoE adjustment for bins without events or non-events (default 0.5).
    packing : str
        ``packed`` (FATE >= 1.7: one ciphertext per row, ``y * 2**s + (1 - y)``, and the parties'
        bin sums cipher-compressed, many bins per ciphertext) or ``pair`` (older FATE: ``y`` and
        ``1 - y``, two ciphertexts per row and one per bin sum back).
    key_bits : int
        Paillier modulus length (default 2048; FATE's default is 1024, which is no longer secure).
    insecure : bool
        Allow ``key_bits < 2048`` (tests only).
    backend : str
        Paillier back end: ``auto`` (fastest available), ``pypaillier``, ``heu``, ``python`` or
        ``phe``.
    randomness : str
        Paillier encryption randomness: ``full`` (default; ``r**n`` with ``r`` uniform, as FATE's
        own Paillier) or ``short`` (Damgård-Jurik-Nielsen short exponent, what ``pypaillier`` and
        ``heu`` draw: faster, resting on an additional assumption). See
        :mod:`verticalfs.crypto.backends`.
    """

    n_bins: int = 10
    adjustment_factor: float = 0.5
    packing: str = "packed"
    key_bits: int = 2048
    insecure: bool = False
    backend: str = "auto"
    randomness: str = "full"

    #: the values each field may take (:mod:`verticalfs.params`)
    constraints: ClassVar[Constraints] = {
        "n_bins": [Interval(int, 2, None)],
        "adjustment_factor": [Interval(float, 0, None, closed="neither")],
        "packing": [Options(*PACKINGS)],
        "key_bits": [Interval(int, 1, None)],
        "backend": [Options("auto", *BACKENDS)],
        "randomness": [Options(*RANDOMNESS)],
    }


@register
class FateIV(FilterMethod):
    name = "fate-iv"
    summary = ("FATE-IV: information value per feature from Paillier-encrypted labels (FATE hetero binning); "
               "binary labels only.")
    paper = "feast.md section 5.1 (baseline FATE-IV); FATE hetero feature binning"
    Params = FateIVParams
    Role = IVRole
    test_params = {"n_select": 5, "key_bits": 512, "insecure": True}

    def check_params(self, fed) -> None:
        super().check_params(fed)
        p = self.params
        if fed.task != "binary":
            raise ConfigError(f"{self.name}: information value needs a binary label, the data set's task is "
                              f"{fed.task!r}; use a binary data set or another method (e.g. feast)")
        if p.packing not in PACKINGS:
            raise ConfigError(f"{self.name}: packing must be one of {PACKINGS}, got {p.packing!r}")
        if int(p.n_bins) < 2:
            raise ConfigError(f"{self.name}: n_bins must be >= 2, got {p.n_bins}")
        if p.adjustment_factor <= 0:
            raise ConfigError(f"{self.name}: adjustment_factor must be > 0, got {p.adjustment_factor}")
        check_crypto_params(self.name, p)

    def select(self, fed) -> list[tuple[str, int]]:
        p = self.params
        y = np.asarray(fed.labels.y["train"]).astype(np.int64)
        n = len(y)
        n_event = int(y.sum())
        t0 = time.perf_counter()
        pub, priv = generate_keypair(int(p.key_bits), backend=p.backend, randomness=p.randomness,
                                     insecure=p.insecure)
        t_key = time.perf_counter() - t0
        # FATE's GuestIntegerPacker: slots as wide as the label counts, event slot first
        bits_e, bits_n = max(1, n_event.bit_length()), max(1, (n - n_event).bit_length())
        slot = bits_e + bits_n
        capacity = max(1, (pub.max_int.bit_length() - 1) // slot)  # FATE's cipher_compress_suggest
        codes = label_codes(y, p.packing, bits_n)
        t1 = time.perf_counter()
        enc = encrypt_plaintexts(priv, codes)
        t_enc = time.perf_counter() - t1
        msg = IVLabels(public_key=pub.to_bytes(), labels=enc.to_bytes(), shape=tuple(enc.shape),
                       packing=p.packing, slot_bits=slot, capacity=capacity, n_bins=int(p.n_bins),
                       insecure=bool(p.insecure))
        proof, t_proof = None, 0.0
        if labels_proof.wanted(fed, fed.party_names):  # a party's verify_labels (issue 50): prove every code
            if p.packing != "packed":
                raise ConfigError(f"{self.name}: a party verifies the labels it sums (verify_labels), which only "
                                  "the packed codes support; use packing = \"packed\"")
            t3 = time.perf_counter()
            proof = labels_proof.prove_labels(priv, "iv", enc, codes, [n - n_event, n_event])
            t_proof = time.perf_counter() - t3
        names = fed.feature_names()
        scores: list[tuple[float, int, int, str]] = []
        ivs: dict[str, float] = {}
        t_dec, n_dec = 0.0, 0
        for k, party in enumerate(fed.party_names):
            labels_proof.send_proof(fed, [party], proof, SELECTION)
            rep = fed.proxy(party).request(msg, SELECTION, expect=IVBinSums)
            bin_nums = np.asarray(rep.bin_nums, dtype=np.int64)
            if len(bin_nums) != len(names[party]) or (bin_nums < 1).any():
                raise ProtocolError(f"party {party!r} sent bins for {len(bin_nums)} features, it has "
                                    f"{len(names[party])}")
            t2 = time.perf_counter()
            if p.packing == "packed":
                sizes = package_sizes(bin_nums, capacity)
                m = EncryptedArray.from_bytes(pub, rep.sums, (len(sizes),)).decrypt_mantissas(priv)
                per_bin = np.asarray(unpack_slots(m, sizes, slot), dtype=np.int64)
                ev, ne = per_bin >> bits_n, per_bin & ((1 << bits_n) - 1)
                n_dec += len(sizes)
            else:
                total = int(bin_nums.sum())
                m = EncryptedArray.from_bytes(pub, rep.sums, (total, 2)).decrypt_mantissas(priv)
                m = np.asarray([int(v) for v in m.ravel()], dtype=np.int64).reshape(total, 2)
                ev, ne = m[:, 0], m[:, 1]
                n_dec += 2 * total
            t_dec += time.perf_counter() - t2
            if (ev < 0).any() or (ne < 0).any() or (ev + ne).sum() != n * len(bin_nums):
                raise ProtocolError(f"party {party!r}: its bin sums do not add up to {n} rows per feature")
            starts = np.r_[0, np.cumsum(bin_nums)[:-1]]
            for j, (s, b) in enumerate(zip(starts, bin_nums, strict=True)):
                iv = woe_iv(ev[s : s + b], ne[s : s + b], p.adjustment_factor)[1]
                ivs[f"{party}:{names[party][j]}"] = iv
                self.record_scores(party, [j], [iv])
                scores.append((-iv, k, j, party))
        scores.sort()
        self.info_.update(
            iv=ivs, key_bits=pub.bits, backend=pub.backend.name, randomness=pub.randomness, packing=p.packing,
            n_encryptions=int(enc.size), n_decryptions=n_dec, ciphertext_bytes=int(pub.ciphertext_bytes),
            keygen_seconds=t_key, encrypt_seconds=t_enc, decrypt_seconds=t_dec,
        )
        if proof is not None:
            self.info_.update(label_proof_seconds=t_proof, label_proof_bytes=len(proof.proof))
        return [(party, j) for _, _, j, party in scores[: int(p.n_select)]]


__all__ = ["FateIV", "FateIVParams"]
