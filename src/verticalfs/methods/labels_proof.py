"""Label ciphertexts a party can trust: the label holder proves what it encrypted (issue 50).

``fate-iv``, FedSDG-FS's Algorithm 1 (``fedsdg-fs``, ``ms-gini``) and ``sffs`` send the party the
labels encrypted under the label holder's key; the party sums them per bin (or per class) and the
label holder decrypts the sums. Nothing in the ciphertexts stops a label holder from encrypting
``2**k`` for row ``k``: the decrypted sums then name every row of every bin (tests/attacks). Under
the policy's ``verify_labels`` (the default in a deployment) the label holder sends a
:class:`LabelProof` before the labels, and the party refuses labels without one that verifies:

- every ciphertext encrypts an allowed code (:mod:`verticalfs.crypto.proofs`, a set-membership
  proof): ``fate-iv``'s packed code ``1`` or ``2**b`` (non-event, event); Algorithm 1's one-hot
  class ``2**(w k)`` in its slot (``w`` the slot width, ``k < c``); SFFS's 0 or 1, each row's
  classes adding up to 1;
- the label totals per class it claims (``counts``) are the true ones (an equality proof on the
  product of the ciphertexts), each at least the policy's ``min_label_rows``;
- the proof is bound to the very ciphertexts (a SHA-256 of their bytes, the kind and the counts).

The set of allowed codes is the party's own computation from the protocol's parameters and the
proven counts, never the label holder's word. What a party then returns is what the honest
protocol returns for *some* labelling: per bin, the sums of 0/1 labels (``fate-iv``), masked class
counts (Algorithm 1) or masked class sums (SFFS). A label holder still chooses that labelling (it
holds the labels); docs/security.md says what that leaves.

Rows per protocol (kinds): ``iv`` (``(N,)`` packed codes), ``gini`` (``(N, 1)`` one-hot packed in
one plaintext: the label holder's layout must hold every class in one ciphertext), ``onehot``
(``(N, c)``, SFFS).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from verticalfs.crypto import EncryptedArray, PrivateKey, PublicKey, proofs
from verticalfs.exceptions import CryptoError, ProtocolError
from verticalfs.party import Context, Role, handles, refusal
from verticalfs.transport.messages import Ack, message

KINDS = ("iv", "gini", "onehot")


@message("core.LabelProof")
class LabelProof:
    """Label holder -> party, just before the encrypted labels of ``fate-iv``, Algorithm 1 or SFFS:
    proofs that the labels whose bytes hash to ``digest`` (SHA-256, hex) encrypt allowed codes of
    protocol ``kind`` with the class totals ``counts``. Answered with an ``Ack``."""

    kind: str
    digest: str
    counts: np.ndarray
    proof: bytes


def iv_width(counts: Any) -> int:
    """``fate-iv``'s shift of the event code: the bits of the non-event count (FATE's packer)."""
    return max(1, int(np.asarray(counts, dtype=np.int64)[0]).bit_length())


def statement(kind: str, pub: PublicKey, cts: np.ndarray, counts: np.ndarray, *,
              slot_bits: int = 0) -> list[tuple[list[int], Any]]:
    """The parts of what ``kind``'s labels must satisfy: ``(ciphertexts, allowed plaintexts)`` per
    part (one shared list, or one list per ciphertext), from the ciphertexts ``cts`` and the class
    totals ``counts`` alone (the party and the label holder compute it alike)."""
    counts = [int(v) for v in np.asarray(counts, dtype=np.int64).reshape(-1)]
    if kind == "iv":
        if cts.ndim != 1 or len(counts) != 2:
            raise ProtocolError("fate-iv's labels are one code per row and two class totals")
        b = iv_width(counts)
        flat = [int(c) for c in cts]
        return [(flat, [1, 1 << b]), ([proofs.product(pub, flat)], [[counts[0] + (counts[1] << b)]])]
    if kind == "gini":
        if cts.ndim != 2 or cts.shape[1] != 1:
            raise ProtocolError("Algorithm 1's labels can be proven only with every class in one ciphertext")
        w = int(slot_bits)
        flat = [int(c) for c in cts[:, 0]]
        total = sum(n << (w * k) for k, n in enumerate(counts))
        return [(flat, [1 << (w * k) for k in range(len(counts))]), ([proofs.product(pub, flat)], [[total]])]
    if kind == "onehot":
        if cts.ndim != 2 or cts.shape[1] != len(counts):
            raise ProtocolError("SFFS's labels are one ciphertext per row and class")
        flat = [int(c) for c in cts.ravel()]
        rows = [proofs.product(pub, [int(c) for c in r]) for r in cts]
        cols = [proofs.product(pub, [int(c) for c in cts[:, k]]) for k in range(cts.shape[1])]
        return [(flat, [0, 1]), (rows, [1]), (cols, [[n] for n in counts])]
    raise ProtocolError(f"unknown label proof kind {kind!r}; one of {KINDS}")


def _context(kind: str, digest: str, counts: np.ndarray) -> bytes:
    return (f"verticalfs label proof/{kind}/{digest}/".encode()
            + np.asarray(counts, dtype=np.int64).astype("<i8").tobytes())


def digest_of(labels: bytes) -> str:
    return hashlib.sha256(bytes(labels)).hexdigest()


# ------------------------------------------------------------------------------ label holder
def prove_labels(priv: PrivateKey, kind: str, enc: EncryptedArray, plain: np.ndarray, counts: Any, *,
                 slot_bits: int = 0) -> LabelProof:
    """The :class:`LabelProof` of the encrypted labels ``enc`` (plaintexts ``plain``, same shape)."""
    pub = priv.public_key
    counts = np.asarray(counts, dtype=np.int64).reshape(-1)
    cts = np.asarray(enc.ciphertexts(), dtype=object).reshape(enc.shape)
    digest = digest_of(enc.to_bytes())
    ctx = _context(kind, digest, counts)
    plain = np.asarray(plain, dtype=object).reshape(enc.shape)
    parts = statement(kind, pub, cts, counts, slot_bits=slot_bits)
    if kind == "onehot":
        values = [plain.ravel().tolist(), [1] * plain.shape[0], counts.tolist()]
    else:
        total = parts[1][1][0][0]
        values = [plain.ravel().tolist(), [total]]
    blob = b"".join(proofs.prove(priv, c, v, allowed, context=ctx)
                    for (c, allowed), v in zip(parts, values, strict=True))
    return LabelProof(kind=kind, digest=digest, counts=counts, proof=blob)


def wanted(fed: Any, parties: Any) -> bool:
    """Whether a party of ``parties`` asks for label proofs (``verify_labels``, as it reported it
    in a deployment; in-process federations report no rules and get none)."""
    rules = fed.party_rules
    return any(bool(rules.get(p, {}).get("verify_labels", False)) for p in parties)


def send_proof(fed: Any, parties: Any, proof: LabelProof | None, at: Any) -> None:
    """Send ``proof`` to each of ``parties`` that asks for it."""
    if proof is None:
        return
    rules = fed.party_rules
    for p in parties:
        if rules.get(p, {}).get("verify_labels", False):
            fed.proxy(p).request(proof, at, expect=Ack)


# -------------------------------------------------------------------------------------- party
class LabelChecks(Role):
    """A role that sums the label holder's encrypted labels: it takes a :class:`LabelProof` and,
    under ``verify_labels``, refuses labels without a proof that verifies (:meth:`checked_labels`)."""

    label_proof: LabelProof | None = None

    @handles(LabelProof)
    def on_label_proof(self, msg: LabelProof, ctx: Context) -> Ack:
        if str(msg.kind) not in KINDS:
            raise ProtocolError(f"party {self.name!r}: unknown label proof kind {msg.kind!r}")
        self.label_proof = msg
        return Ack()

    def checked_labels(self, ctx: Context, kind: str, pub: PublicKey, labels: bytes, enc: EncryptedArray, *,
                       slot_bits: int = 0) -> np.ndarray | None:
        """The proven class totals of the labels ``enc`` (whose bytes are ``labels``), or ``None``
        when the party's policy does not ask for a proof. Refusals: no proof (a PolicyError naming
        ``verify_labels``), a proof of other ciphertexts or that fails (a ProtocolError), a class
        with fewer than ``min_label_rows`` rows (a PolicyError)."""
        policy = ctx.policy
        if policy is None or not policy.verify_labels:
            return None
        msg, self.label_proof = self.label_proof, None  # a proof is used once
        if msg is None or str(msg.kind) != kind or str(msg.digest) != digest_of(labels):
            raise refusal(self.name, "verify_labels", True,
                          f"sum encrypted labels without a LabelProof of exactly these ciphertexts (kind {kind!r})",
                          "the label holder must send the proof first (verticalfs does when the party reports "
                          "verify_labels); to sum unproven labels, set it to false")
        counts = np.asarray(msg.counts, dtype=np.int64).reshape(-1)
        n = enc.shape[0]
        if counts.sum() != n or (counts < 0).any():
            raise ProtocolError(f"party {self.name!r}: the label totals {counts.tolist()} do not add up to its "
                                f"{n} rows")
        least = int(policy.min_label_rows)
        if counts.min(initial=n) < least:
            raise refusal(self.name, "min_label_rows", least,
                          f"sum labels with class totals {counts.tolist()} (a class of fewer rows singles them out)",
                          "send labels with more rows per class, or lower it")
        if kind == "iv" and slot_bits < iv_width(counts) + max(1, int(counts[1]).bit_length()):
            raise ProtocolError(f"party {self.name!r}: fate-iv's slots of {slot_bits} bits cannot hold its counts")
        try:
            proofs.check_modulus(pub)
            cts = np.asarray(enc.ciphertexts(), dtype=object).reshape(enc.shape)
            parts = statement(kind, pub, cts, counts, slot_bits=slot_bits)
            ctx_bytes = _context(kind, str(msg.digest), counts)
            blob = bytes(msg.proof)
            pos = 0
            for c, allowed in parts:
                k = len(allowed[0]) if allowed and isinstance(allowed[0], list) else len(allowed)
                size = proofs.proof_bytes(pub, len(c), k)
                proofs.verify(pub, c, allowed, blob[pos:pos + size], context=ctx_bytes)
                pos += size
            if pos != len(blob):
                raise CryptoError(f"the proof has {len(blob) - pos} bytes too many")
        except CryptoError as exc:
            raise ProtocolError(f"party {self.name!r} refuses the encrypted labels ({kind}): {exc}") from None
        return counts


__all__ = ["KINDS", "LabelChecks", "LabelProof", "prove_labels", "send_proof", "statement", "wanted"]
