"""A bias piecewise linear in a normalised distance (FIRE), per block of query rows, through ``fire.cpp``.

For block rows ``t`` at query positions ``i = i0 + t`` and keys at positions ``j = 0 .. C - 1``, with a
per-distance table ``num (T,)`` (nondecreasing), a per-row factor ``inv (R,)`` (positive), per-head
segment slopes and intercepts ``alpha, beta (H, K + 1)`` and sorted breakpoints ``z (K,)``::

    x = num[|i - j|] * inv[t],   m = #{k : z[k] < x},   bias[h, t, j] = alpha[h, m] * x + beta[h, m]

(causal rows see keys ``j <= i``). Three passes, each one walk over a block (see ``fire.cpp``):

* :func:`bias_`: the bias into ``out (H, R, C)``, masked keys set to ``masked`` (the forward's mask);
* :func:`logits_`: ``s = max(s + bias - lse, floor)`` in place over ``(B H, R, C)`` (masked keys: ``floor``);
* :func:`ds_`: ``dS = p (dp - delta)`` in place of ``dp`` (masked keys: 0, and ``p`` zeroed there), with the
  gradients of ``alpha``, ``beta``, ``num`` and ``inv`` added into float64 accumulators in the same pass.

:func:`usable` says whether a call can run them; where the kernels are not built the functions refuse by
name (:class:`KernelMissing`) and the ``"blocks"`` engine serves FIRE instead.

:func:`mlp_offsets` is FIRE's MLP on a Toeplitz bias's offsets (``fire_mlp.cpp``): the values and the
parameters' gradients in one call each way, where the PyTorch path runs about twenty small operations with
their autograd nodes (:meth:`relpos.encodings.fire.FIRE.relative_bias` takes it when :func:`usable`); given each
pair's query position it also serves a few pairs of positions with gaps (a randomized-position draw). :func:`rows`
is :func:`bias_` as a tensor with autograd (the ``fire_ds`` pass gives its backward): FIRE's rows at or past its
threshold in a dense call, however many. :func:`bias_reference` is
the same bias in plain PyTorch (``bucketize`` and ``gather``), the kernels' test oracle beside the
scheme's float64 reference.

Example:
    >>> import torch
    >>> num = torch.tensor([0., 1., 2., 3.]); inv = torch.tensor([0.5, 0.5])
    >>> alpha = torch.tensor([[1., 2.]]); beta = torch.tensor([[0., -1.]]); z = torch.tensor([1.0])
    >>> bias_reference(num, inv, alpha, beta, z, 2, 2, 4, causal=True)[0]   # rows at positions 2 and 3
    tensor([[1.0000, 0.5000, 0.0000,   -inf],
            [2.0000, 1.0000, 0.5000, 0.0000]])
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from relpos import kernels
from relpos.first_order import first_order

__all__ = ["KernelMissing", "bias_", "bias_reference", "ds_", "logits_", "mlp_offsets", "rows", "usable"]


class KernelMissing(RuntimeError):
    """The compiled FIRE kernel is not loaded (not built, switched off, or failed to load)."""


def usable(*tensors: Tensor) -> bool:
    """Whether the kernel can take these tensors: built and switched on, CPU, one float32/float64 dtype."""
    return (kernels.load() is not None and bool(tensors)
            and all(t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64) for t in tensors)
            and len({t.dtype for t in tensors}) == 1)


def _module():
    mod = kernels.load()
    if mod is None:
        raise KernelMissing(f"relpos kernels: the FIRE kernel (fire.cpp) is not available: {kernels.status()}")
    return mod


def bias_reference(num: Tensor, inv: Tensor, alpha: Tensor, beta: Tensor, z: Tensor, i0: int, R: int, C: int,
                   *, causal: bool, masked: float = -math.inf) -> Tensor:
    """The bias ``(H, R, C)`` in plain PyTorch (an ``(R, C)`` segment index and two gathers)."""
    i = torch.arange(i0, i0 + R)[:, None]
    j = torch.arange(C)[None, :]
    x = num[(i - j).abs()] * inv[:, None]  # (R, C)
    seg = torch.bucketize(x, z)
    H = alpha.shape[0]
    idx = seg[None].expand(H, R, C).reshape(H, -1)
    out = (alpha.gather(1, idx) * x.reshape(1, -1) + beta.gather(1, idx)).view(H, R, C)
    if causal:
        out = out.masked_fill(j > i, masked)
    return out


def bias_(out: Tensor, num: Tensor, inv: Tensor, alpha: Tensor, beta: Tensor, z: Tensor, i0: int, *,
          causal: bool, masked: float = -math.inf) -> Tensor:
    """:func:`bias_reference` written into ``out (H, R, C)`` (unit stride along its last dim); returns ``out``."""
    _module().fire_bias(out, num, inv, alpha, beta, z, int(i0), bool(causal), float(masked))
    return out


def logits_(s: Tensor, lse: Tensor, num: Tensor, inv: Tensor, alpha: Tensor, beta: Tensor, z: Tensor, i0: int, *,
            causal: bool, floor: float) -> Tensor:
    """``s (M, R, C) = max(s + bias[m % H] - lse[m, t], floor)`` in place (``M`` = batch x heads); returns ``s``."""
    _module().fire_logits(s, lse, num, inv, alpha, beta, z, int(i0), bool(causal), float(floor))
    return s


def ds_(dp: Tensor, p: Tensor, delta: Tensor, num: Tensor, inv: Tensor, alpha: Tensor, beta: Tensor, z: Tensor,
        i0: int, *, causal: bool, grads: tuple[Tensor, Tensor, Tensor, Tensor]) -> Tensor:
    """``dp (M, R, C) <- p (dp - delta[m, t])`` in place (masked keys: 0, ``p`` zeroed there); adds the
    gradients of the summed ``dS * bias`` to ``alpha``, ``beta``, ``num`` and ``inv`` into ``grads`` (float64
    tensors of their shapes, in that order). Returns ``dp``."""
    _module().fire_ds(dp, p, delta, num, inv, alpha, beta, z, int(i0), bool(causal), *grads)
    return dp


class _Rows(torch.autograd.Function):
    """``(H, R, C)`` bias of rows ``i0 .. i0 + R - 1`` against keys ``0 .. C - 1`` (causal: -inf at ``j > i``);
    first-order only."""

    @staticmethod
    def forward(ctx, num, inv, alpha, beta, z, i0, C, causal):
        out = num.new_empty(alpha.shape[0], inv.shape[0], C)  # (H, R, C)
        _module().fire_bias(out, num, inv, alpha, beta, z, int(i0), bool(causal), -math.inf)
        ctx.save_for_backward(num, inv, alpha, beta, z)
        ctx.i0, ctx.causal = int(i0), bool(causal)
        return out

    @staticmethod
    @first_order
    def backward(ctx, g):
        num, inv, alpha, beta, z = ctx.saved_tensors
        ds = g.to(num.dtype, memory_format=torch.contiguous_format, copy=True)  # (H, R, C); fire_ds writes it
        ones = torch.ones_like(ds)  # "p": dS = 1 * (g - 0) = g, and its sums are the bias's gradients
        zero = ds.new_zeros(ds.shape[:2])  # "delta"
        grads = tuple(torch.zeros(t.shape, dtype=torch.float64) for t in (alpha, beta, num, inv))
        _module().fire_ds(ds, ones, zero, num, inv, alpha, beta, z, ctx.i0, ctx.causal, *grads)
        d_alpha, d_beta, d_num, d_inv = (gr.to(num.dtype) for gr in grads)
        return d_num, d_inv, d_alpha, d_beta, None, None, None, None


def rows(num: Tensor, inv: Tensor, alpha: Tensor, beta: Tensor, z: Tensor, i0: int, C: int, *,
         causal: bool = False) -> Tensor:
    """:func:`bias_reference` as a tensor of its own, ``(H, R, C)``, with autograd to ``num``, ``inv``, ``alpha``
    and ``beta``: one walk over the rows forward (``fire_bias``) and one backward (``fire_ds`` with ``p = 1`` and
    ``delta = 0``, whose sums are then the bias's own gradients). The rows of a call past FIRE's threshold,
    whatever their number, without a per-pair segment index or hidden layer; ``causal``: -inf at keys after
    the query (their gradient is 0). ``i0 >= 0``; ``num`` covers the distances ``0 .. max(i0 + R, C) - 1``."""
    if i0 < 0:
        raise ValueError(f"fire rows: i0 must be >= 0 (the first row's position relative to key 0), got {i0}")
    return _Rows.apply(num.contiguous(), inv.contiguous(), alpha.contiguous(), beta.contiguous(),
                       z.detach().contiguous(), int(i0), int(C), bool(causal))


class _MlpOffsets(torch.autograd.Function):
    """``out (H, P)`` from ``c_raw, l_raw, w1, b1, w2, b2`` (see ``fire_mlp.cpp``); first-order only."""

    @staticmethod
    def forward(ctx, c_raw, l_raw, w1, b1, w2, b2, delta, qpos, init_L, eps):
        ctx.save_for_backward(c_raw, l_raw, w1, b1, w2, b2, delta, qpos)
        ctx.consts = (float(init_L), float(eps))
        return _module().fire_mlp_forward(delta, qpos, c_raw, l_raw, *ctx.consts, w1, b1, w2, b2)

    @staticmethod
    @first_order
    def backward(ctx, g):
        c_raw, l_raw, w1, b1, w2, b2, delta, qpos = ctx.saved_tensors
        grads = _module().fire_mlp_backward(g.contiguous(), delta, qpos, c_raw, l_raw, *ctx.consts, w1, b1, w2, b2)
        return (*grads, None, None, None, None)


def mlp_offsets(delta: Tensor, c_raw: Tensor, l_raw: Tensor, init_L: float, eps: float, w1: Tensor, b1: Tensor,
                w2: Tensor, b2: Tensor, qpos: Tensor | None = None) -> Tensor:
    """FIRE's bias on offsets ``delta (P,)`` (int64), ``(H, P)``, with autograd to the parameters (``c_raw``,
    ``l_raw`` scalars; ``w1 (W, 1)``, ``b1 (W,)``, ``w2 (H, W)``, ``b2 (H,)``, all of one float dtype,
    contiguous)::

        x = log1p(c |delta|) / (log1p(c max(L, i)) + eps),   out = b2 + w2 relu(w1 x + b1)

    with ``c = softplus(c_raw)`` and ``L = init_L softplus(l_raw) / ln 2``; ``i`` is each pair's query position
    ``qpos (P,)`` (int64), or below the threshold for every pair when ``qpos`` is None (then ``max(L, i) = L``)."""
    q = torch.empty(0, dtype=torch.int64) if qpos is None else qpos.contiguous()
    return _MlpOffsets.apply(c_raw, l_raw, w1, b1, w2, b2, delta.contiguous(), q, init_L, eps)
