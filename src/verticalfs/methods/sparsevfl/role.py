"""The party side of SparseVFL and of its dense / quantised baselines (sparsevfl.md Algorithm 1).

Every method of this folder that trains a split model uses :class:`CodedRole`: plain split
learning (:class:`~verticalfs.training.split.SplitRole`) whose messages are coded as the
:class:`CodedSpec` of its ``Join`` says:

- forward (the embedding batch ``E_m``, shape ``(N, D)``): the core
  :class:`~verticalfs.transport.messages.Embeddings` in a codec of :mod:`verticalfs.codecs`:
  ``float32`` / ``float16`` / ``int8`` dense (ORIGINAL, DIM-k, Q-16, Q-8) or ``rle32`` / ``rle16``
  run-length codes with the spec's traversal ``order`` (SparseVFL, Algorithm 1 lines 7-9; the codec
  falls back to the dense matrix when that is smaller, section 4.4). With masked gradients the
  party keeps the mask of what it transmitted (:func:`~verticalfs.codecs.rle.nonzero_mask`: the
  values at ``Q`` bits, then ``!= 0``; the receiver decodes exactly this mask);
- backward (the gradient ``G'_m``): dense :class:`~verticalfs.transport.messages.Gradients` in
  the same codec; ``masked``: a ``Gradients`` message holding only the values at the kept mask, in
  traversal order, at ``Q`` bits (section 4.2; no positions: both sides hold the mask; lines
  21-29); ``topw``: :class:`TopWGradients` (positions and values of the W largest entries).

The client model is the paper's ``Linear(d_in, e, bias=False)`` followed by the last activation
(ReLU for SparseVFL), Xavier-initialised (the public implementation's choice; the paper states
none), built from the spec by :class:`~verticalfs.training.split.SplitRole`.
"""

from __future__ import annotations

import numpy as np
import torch

from verticalfs.codecs import topw_decode, unmask
from verticalfs.codecs.rle import RLE16Codec, RLE32Codec
from verticalfs.exceptions import ProtocolError
from verticalfs.party import Context, handles
from verticalfs.training.split import SplitRole, SplitSpec
from verticalfs.transport.messages import Embeddings, coded, message, tensor_field

FORWARD_CODINGS = ("float32", "float16", "int8", "rle")
BACKWARD_CODINGS = ("float32", "float16", "int8", "masked", "topw")
ORDERS = ("vertical", "horizontal")
_F4 = np.dtype("<f4")
_F2 = np.dtype("<f2")


@message("sparsevfl.CodedSpec")
class CodedSpec(SplitSpec):
    """Label holder -> party, inside ``Join``: split learning with the codings of sparsevfl.md.

    ``forward`` is one of :data:`FORWARD_CODINGS` (``rle`` = run-length at ``bits``), ``backward``
    one of :data:`BACKWARD_CODINGS`; ``bits`` is Q (16 or 32), ``order`` the run-length traversal,
    ``top_w`` the W of ``topw``.
    """

    bits: int = 32
    order: str = "vertical"
    top_w: int = 1024


@message("sparsevfl.TopWGradients")
class TopWGradients:
    """Label holder -> party, one-way (TOP-W): the ``W`` largest gradient entries of the batch as
    bit-packed flat positions (:func:`verticalfs.codecs.topw.topw_encode`) and their values."""

    positions: bytes
    values: np.ndarray = tensor_field()


def value_codec(bits: int) -> str:
    """The float codec of Q-bit values."""
    return "float16" if int(bits) == 16 else "float32"


def forward_codec(spec: CodedSpec):
    """The codec (name or instance) of the forward messages."""
    if spec.forward == "rle":
        return (RLE16Codec if int(spec.bits) == 16 else RLE32Codec)(order=spec.order)
    return spec.forward


def check_spec(spec: CodedSpec, who: str) -> None:
    if spec.forward not in FORWARD_CODINGS:
        raise ProtocolError(f"{who}: forward coding must be one of {FORWARD_CODINGS}, got {spec.forward!r}")
    if spec.backward not in BACKWARD_CODINGS:
        raise ProtocolError(f"{who}: backward coding must be one of {BACKWARD_CODINGS}, got {spec.backward!r}")
    if int(spec.bits) not in (16, 32):
        raise ProtocolError(f"{who}: bits (Q) must be 16 or 32, got {spec.bits!r}")
    if spec.order not in ORDERS:
        raise ProtocolError(f"{who}: order must be one of {ORDERS}, got {spec.order!r}")
    if spec.backward == "masked" and spec.forward != "rle":
        raise ProtocolError(f"{who}: masked gradients need the run-length forward coding")
    if int(spec.top_w) < 1:
        raise ProtocolError(f"{who}: top_w (W) must be >= 1, got {spec.top_w!r}")


class CodedRole(SplitRole):
    """A party of SparseVFL (or of a dense / quantised baseline): see the module docstring."""

    spec: CodedSpec

    def __init__(self, data, spec: CodedSpec, ctx: Context) -> None:
        if isinstance(spec, CodedSpec):
            check_spec(spec, f"party {data.name!r}")
        super().__init__(data, spec, ctx)
        self._fwd = forward_codec(spec)
        self._masked = spec.backward == "masked"
        self._qdt = _F2 if int(spec.bits) == 16 else _F4
        self.mask: np.ndarray | None = None

    def encode_forward(self, h: torch.Tensor, train: bool) -> Embeddings:
        v = h.detach().numpy()
        if train and self._masked:
            # Algorithm 1 lines 7-9: E_m at Q bits, its code, and the mask the party keeps. ``v`` is
            # rounded once and the rounded copy is coded (the codec's own rounding is then a no-op).
            with np.errstate(over="ignore"):
                q = np.asarray(v, dtype=self._qdt)
            self.mask = q != 0
            return Embeddings(coded(q, self._fwd))
        return Embeddings(coded(v, self._fwd))

    def decode_backward(self, msg, out: torch.Tensor) -> torch.Tensor:
        n, d = out.shape
        if self._masked:
            mask, self.mask = self.mask, None
            if mask is None:
                raise ProtocolError(f"party {self.name!r}: masked gradients arrived but no mask was kept")
            g = unmask(msg.values, mask, order=self.spec.order)  # Algorithm 1 line 28
        elif isinstance(msg, TopWGradients):
            g = topw_decode(msg.positions, msg.values, n, d)
        else:
            g = msg.values
        if g.shape != (n, d):
            raise ProtocolError(f"party {self.name!r}: gradient batch decodes to {g.shape}, expected {(n, d)}")
        return torch.from_numpy(g)

    @handles(TopWGradients)
    def on_topw_gradients(self, msg: TopWGradients, ctx: Context) -> None:
        if self.spec.backward != "topw":
            raise ProtocolError(f"party {self.name!r} expects {self.spec.backward} gradients, got TopWGradients")
        return self.on_gradients(msg, ctx)
