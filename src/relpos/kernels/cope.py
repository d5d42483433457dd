"""CoPE's position term from its content logits, with the compiled kernel when it is built.

Given the scaled content logits ``z (B, H, Nq, Nk)``, each query's logits against the integer
positions ``L (B, H, Nq, P)`` and the last key index each query may see ``last (B|1, Nq)``::

    g_ij = sigmoid(z_ij),   p_ij = min(sum_{t = j .. last_i} g_it, P - 1)          (j <= last_i)
    term_ij = L[i, floor p_ij] (1 - w_ij) + L[i, ceil p_ij] w_ij,  w_ij = p_ij - floor p_ij
    term_ij = 0                                                                     (j > last_i)

(Golovneva et al. 2024, https://arxiv.org/abs/2405.18719; the scheme is
:class:`relpos.encodings.cope.CoPE`). :func:`term` runs it through ``cope.cpp`` (see
:mod:`relpos.kernels`; the gates by PyTorch's vectorised sigmoid), one pass per query row forward and
two backward, where :func:`reference`
(plain PyTorch: flip, cumsum, clamp, floor, ceil and two gathers, each an ``N x N`` temporary, and
their gradients) is the fallback and the kernel's test oracle beside the scheme's float64 reference.

Example:
    >>> import torch
    >>> z = torch.full((1, 1, 3, 3), 50.0)          # gates of 1: p_ij = i - j + 1
    >>> L = torch.arange(4.0).expand(1, 1, 3, 4)    # position p scores p
    >>> reference(z, L, torch.arange(3)[None])[0, 0]
    tensor([[1., 0., 0.],
            [2., 1., 0.],
            [3., 2., 1.]])
"""

from __future__ import annotations

import torch
from torch import Tensor

from relpos import kernels
from relpos.first_order import first_order

__all__ = ["add_backward", "add_into", "positions", "reference", "term", "usable"]


def usable(z: Tensor, L: Tensor) -> bool:
    """Whether the kernel can serve these tensors: built and switched on, CPU, one float32/float64 dtype."""
    return (kernels.load() is not None and z.device.type == "cpu" and L.device.type == "cpu"
            and z.dtype in (torch.float32, torch.float64) and L.dtype == z.dtype)


def _visible(last: Tensor, Nk: int) -> Tensor:
    j = torch.arange(Nk, device=last.device)
    return (j[None, None, :] <= last[:, :, None])[:, None]  # (B|1, 1, Nq, Nk)


def positions(z: Tensor, last: Tensor, cap: int) -> Tensor:
    """``p_ij`` (clipped at ``cap``; 0 for keys past ``last``), ``(B, H, Nq, Nk)`` in ``z``'s dtype."""
    gates = torch.sigmoid(z) * _visible(last, z.shape[-1])
    p = gates.flip(-1).cumsum(-1).flip(-1)  # p_ij = sum_{t >= j} g_it
    return p.clamp(max=cap)


def reference(z: Tensor, L: Tensor, last: Tensor) -> Tensor:
    """The term in plain PyTorch (differentiable by autograd).

    Args:
        z: ``(B, H, Nq, Nk)`` scaled content logits.  L: ``(B, H, Nq, P)``, ``P >= 2``.
        last: ``(B|1, Nq)`` int64, the last key index each query sees (``-1``: none).
    Returns:
        ``(B, H, Nq, Nk)``.
    """
    p = positions(z, last, L.shape[-1] - 1)
    lo = p.detach().floor()
    w = p - lo  # fraction, differentiable through p (NaN if z holds NaN: it propagates)
    lo_i = lo.nan_to_num(0.0).long()  # NaN positions index row 0; w keeps the result NaN
    hi_i = p.detach().ceil().nan_to_num(0.0).long()
    out = L.gather(-1, hi_i) * w + L.gather(-1, lo_i) * (1 - w)
    return out * _visible(last, z.shape[-1])


class _Term(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z3, L3, last2):
        g3 = torch.sigmoid(z3)  # the gates, by PyTorch's vectorised sigmoid
        ctx.save_for_backward(g3, L3, last2)
        out = torch.zeros_like(z3)
        kernels.load().cope_forward(out, g3, L3, last2)
        return out

    @staticmethod
    @first_order
    def backward(ctx, dterm):
        g3, L3, last2 = ctx.saved_tensors
        dz, dL = torch.zeros_like(g3), torch.zeros_like(L3)
        kernels.load().cope_backward(dz, dL, g3, L3, last2, dterm.contiguous())
        return dz, dL, None


def _flat(L: Tensor, last: Tensor, B: int, H: int, Nq: int) -> tuple[Tensor, Tensor]:
    """``L (B|1, H|1, Nq, P)`` and ``last (B|1, Nq)`` as the kernel's contiguous ``(B H, Nq, P)`` and ``(B H, Nq)``."""
    L3 = L.expand(B, H, Nq, L.shape[-1]).reshape(B * H, Nq, -1).contiguous()
    last2 = last.to(torch.long)[:, None, :].expand(B, H, Nq).reshape(B * H, Nq).contiguous()
    return L3, last2


def term(z: Tensor, L: Tensor, last: Tensor) -> Tensor:
    """The term through the kernel (check :func:`usable` first); differentiable in ``z`` and ``L``.
    Arguments and result as :func:`reference`."""
    B, H, Nq, Nk = z.shape
    return _Term.apply(z.reshape(B * H, Nq, Nk).contiguous(), *_flat(L, last, B, H, Nq)).view(B, H, Nq, Nk)


def add_into(z: Tensor, L: Tensor, last: Tensor) -> tuple:
    """``z += term(z, L, last)`` in place, for engines that already hold the content logits ``z``
    (:attr:`relpos.encodings.base.Encoding.reads_logits`); no autograd through it.

    Args: as :func:`reference` (``z`` is overwritten). Returns the context :func:`add_backward` needs.
    """
    B, H, Nq, Nk = z.shape
    L = L.detach().to(z.dtype)
    if usable(z, L) and z.is_contiguous():
        g3 = torch.sigmoid(z).view(B * H, Nq, Nk)
        L3, last2 = _flat(L, last, B, H, Nq)
        kernels.load().cope_forward(z.view(B * H, Nq, Nk), g3, L3, last2)  # z += term, in place
        return True, g3, L3, last2
    z0 = z.clone()
    z += reference(z0, L, last)
    return False, z0, L, last


def add_backward(ctx: tuple, ds: Tensor, dL: Tensor) -> None:
    """For upstream ``ds (B, H, Nq, Nk)`` (the gradient of ``z + term``): add the term's gradient to
    ``z`` into ``ds`` and its gradient to ``L`` into ``dL`` (``L``'s shape, or a view), in place."""
    compiled, t, L, last = ctx
    if compiled:
        B, H, Nq, Nk = ds.shape
        ds3 = ds.view(B * H, Nq, Nk) if ds.is_contiguous() else ds.reshape(B * H, Nq, Nk).contiguous()
        dL3 = torch.zeros_like(L)
        kernels.load().cope_backward(ds3, dL3, t, L, last, ds3)  # ds += the term's gradient to z, in place
        if ds3.data_ptr() != ds.data_ptr():
            ds.copy_(ds3.view(B, H, Nq, Nk))
        dL += dL3.view(B, H, Nq, -1).sum_to_size(dL.shape)
        return
    with torch.enable_grad():
        zl, Ll = t.detach().requires_grad_(True), L.detach().requires_grad_(True)
        gz, gL = torch.autograd.grad(reference(zl, Ll, last), [zl, Ll], ds)
    ds += gz
    dL += gL.sum_to_size(dL.shape)
