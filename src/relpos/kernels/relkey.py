"""The elementwise passes of the relative-key (Transformer-XL) backward, with the compiled kernel when built.

Per block of ``R`` query rows and ``C`` keys, the ``"relkey"`` engine's backward has the content logits
``s (M, R, C)`` (``M`` = batch x heads), the position logits by offset ``pd (M, R, W)`` with the pair
``(t, j)`` at column ``j - t + R - 1`` (``W >= R + C - 1``), the rows' log-sum-exp ``lse (M, R)``, the
probabilities' upstream ``dp (M, R, C)`` and ``delta = rowsum(dO * O)`` ``(M, R)``. Two passes::

    logits_:  s[m, t, j] = max(s[m, t, j] + pd[m, t, j - t + R - 1] - lse[m, t], floor)
    ds_:      dp[m, t, j] = p[m, t, j] (dp[m, t, j] - delta[m, t]),
              z[m, t, j - t + R - 1] = that dS (columns below z's width), every other column of z zero

:func:`logits_` and :func:`ds_` run them through ``relkey.cpp`` (see :mod:`relpos.kernels`), and
:func:`blocks_forward` and :func:`blocks_backward` run the row-block loops of
:mod:`relpos.attention.dense_relkey` there (the same ATen calls, with fewer interpreter steps per block);
:func:`usable` says whether a call can. :func:`logits_reference` and :func:`ds_reference` are the same
in plain PyTorch, the kernels' test oracle.

Example:
    >>> import torch
    >>> s = torch.zeros(1, 2, 2); pd = torch.arange(3.).view(1, 1, 3).expand(1, 2, 3).contiguous()
    >>> logits_reference(s, pd, torch.zeros(1, 2), -87.0)[0]    # row t reads pd from column 1 - t
    tensor([[1., 2.],
            [0., 1.]])
"""

from __future__ import annotations

import torch
from torch import Tensor

from relpos import kernels

__all__ = ["blocks_backward", "blocks_forward", "ds_", "ds_reference", "logits_", "logits_reference", "usable"]


def usable(*tensors: Tensor) -> bool:
    """Whether the kernel can take these tensors: built and switched on, CPU, one float32/float64 dtype."""
    return (kernels.load() is not None and bool(tensors)
            and all(t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64) for t in tensors)
            and len({t.dtype for t in tensors}) == 1)


def _skew(buf: Tensor, R: int, C: int) -> Tensor:
    """The ``(M, R, C)`` view of ``buf (M, R, W)`` with entry ``(t, j)`` at column ``j - t + R - 1``."""
    st = buf.stride()
    return buf.as_strided((buf.shape[0], R, C), (st[0], st[1] - 1, st[2]), buf.storage_offset() + R - 1)


def logits_reference(s: Tensor, pd: Tensor, lse: Tensor, floor: float) -> Tensor:
    """``s + skew(pd) - lse`` clamped below at ``floor``, in place; returns ``s``."""
    R, C = s.shape[1:]
    return s.add_(_skew(pd, R, C)).sub_(lse[..., None]).clamp_min_(floor)


def ds_reference(dp: Tensor, p: Tensor, delta: Tensor, z: Tensor) -> Tensor:
    """``dp <- p (dp - delta)`` in place, and ``z`` set to it laid out by offset (zeros elsewhere)."""
    M, R, C = dp.shape
    dp.sub_(delta[..., None]).mul_(p)
    W = z.shape[-1]
    wide = dp.new_zeros(M, R, max(W, R + C - 1))
    _skew(wide, R, C).copy_(dp)
    z.copy_(wide[..., :W])
    return dp


def logits_(s: Tensor, pd: Tensor, lse: Tensor, floor: float) -> Tensor:
    """:func:`logits_reference` through the kernel (check :func:`usable` first); ``s`` and ``pd`` need a unit
    stride along their last dim."""
    kernels.load().relkey_logits(s, pd, lse, float(floor))
    return s


def ds_(dp: Tensor, p: Tensor, delta: Tensor, z: Tensor) -> Tensor:
    """:func:`ds_reference` through the kernel (check :func:`usable` first)."""
    kernels.load().relkey_ds(dp, p, delta, z)
    return dp


def blocks_forward(qus: Tensor, qv: Tensor, k3: Tensor, v3: Tensor, keys: Tensor, future: Tensor,
                   blocks: tuple) -> tuple[Tensor, list[Tensor], list[Tensor]]:
    """The row-block loop of :mod:`relpos.attention.dense_relkey`'s forward, run from C++ (check :func:`usable`
    first): ``(o, ps, qbs)``, as that module's PyTorch loop returns them."""
    n = len(blocks)
    out = kernels.load().relkey_blocks_forward(qus, qv, k3, v3, keys, future, [x for b in blocks for x in b])
    return out[0], out[1: 1 + n], out[1 + n:]


def blocks_backward(go3: Tensor, qus: Tensor, ks: Tensor, v3: Tensor, keys: Tensor, delta: Tensor, ps, qbs,
                    blocks: tuple, B: int) -> list[Tensor]:
    """That loop's backward from C++: ``[dqu, dqv (H, B, N, D), dk, dv, dkeys]``; ``delta`` is ``(H B, N)``."""
    return kernels.load().relkey_blocks_backward(go3, qus, ks, v3, keys, delta, list(ps), list(qbs),
                                                 [x for b in blocks for x in b], B)
