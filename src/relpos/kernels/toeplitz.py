"""The gradient of a Toeplitz expansion (sums along diagonals), with the compiled kernel when built.

A Toeplitz term ``out[..., t, j] = v[..., j - t + R - 1]`` (``R`` query rows, ``C`` keys; the layout of
:func:`relpos.offsets.toeplitz`) has the gradient ``dv[..., m] = sum_t g[..., t, m - R + 1 + t]``.
:func:`diag_sums` computes it in one pass over ``g`` through ``toeplitz.cpp`` (see :mod:`relpos.kernels`);
:func:`diag_sums_reference` is the plain PyTorch form, its test oracle and the path without the kernel: ``g``
written through a skewed view into zeros ``(..., R, R + C - 1)``, whose rows are then summed.

Example:
    >>> import torch
    >>> g = torch.arange(6.).view(1, 2, 3)        # rows t = 0, 1; keys j = 0..2
    >>> diag_sums_reference(g)                    # column m = j - t + 1
    tensor([[3., 4., 6., 2.]])
    >>> torch.equal(diag_sums(g), diag_sums_reference(g))
    True
"""

from __future__ import annotations

import torch
from torch import Tensor

from relpos import kernels

__all__ = ["diag_sums", "diag_sums_reference", "usable"]


def usable(g: Tensor) -> bool:
    """Whether the kernel can take ``g``: built and switched on, CPU, float32/float64, at least rows x keys."""
    return (g.dim() >= 2 and g.device.type == "cpu" and g.dtype in (torch.float32, torch.float64)
            and kernels.load() is not None)


def diag_sums_reference(g: Tensor) -> Tensor:
    """``(..., R, C) -> (..., R + C - 1)``: ``out[..., j - t + R - 1] = sum_t g[..., t, j]``, in PyTorch."""
    R, C = g.shape[-2:]
    z = g.new_zeros(*g.shape[:-1], R + C - 1)  # (..., R, R + C - 1)
    st = z.stride()
    z.as_strided(g.shape, (*st[:-2], st[-2] - st[-1], st[-1]), z.storage_offset() + R - 1).copy_(g)
    return z.sum(-2)


def diag_sums(g: Tensor) -> Tensor:
    """:func:`diag_sums_reference` in one compiled pass where :func:`usable` (else the reference)."""
    if not usable(g) or g.requires_grad or 0 in g.shape:
        return diag_sums_reference(g)
    R, C = g.shape[-2:]
    g3 = g.reshape(-1, R, C)  # a view for the usual (H, R, C) and row slices of it
    if C > 1 and g3.stride(-1) != 1:
        g3 = g3.contiguous()
    return kernels.load().toeplitz_grad(g3).view(*g.shape[:-2], R + C - 1)
