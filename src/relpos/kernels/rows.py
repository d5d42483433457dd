"""Per-row position states read through a distance table, with the compiled kernel when it is built.

A score term of the form::

    out[b, h, a, j] = C[b, h, a, t] + P[b, h, t, j],   t = table[qpos[a] - kpos[j] - rlo]

(``C (B, H, Nq, rows)``: a state per query and table row; ``P (B, H, rows, Nk)``: one per table row
and key; either may be absent) depends on a pair only through its distance. DeBERTa's two
position terms have this form. :func:`gather` and :func:`scatter_` run it through ``rows.cpp``
(see :mod:`relpos.kernels`); :func:`usable` says whether a call can. The pure-PyTorch form
(an ``N x N`` index and ``gather``/``scatter_add_``) stays with the scheme and is the kernels'
test oracle beside the float64 reference.

Example:
    >>> import torch
    >>> t = torch.tensor([0, 0, 1, 2, 2])          # rows of distances -2 .. 2
    >>> pos = torch.arange(3)[None]
    >>> C = torch.arange(3.).view(1, 1, 1, 3).expand(1, 1, 3, 3)
    >>> reference(C, None, pos, pos, t, -2)[0, 0]
    tensor([[1., 0., 0.],
            [2., 1., 0.],
            [2., 2., 1.]])
"""

from __future__ import annotations

import torch
from torch import Tensor

from relpos import kernels
from relpos.first_order import first_order

__all__ = ["gather", "reference", "scatter_", "usable"]

_EMPTY = torch.empty(0)


def usable(*tensors: Tensor | None) -> bool:
    """Whether the kernel can take these state tensors: built and switched on, CPU, float32/float64."""
    ts = [t for t in tensors if t is not None]
    return (bool(ts) and kernels.load() is not None
            and all(t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64) and t.dim() == 4
                    for t in ts)
            and len({t.dtype for t in ts}) == 1)


def _args(qpos: Tensor, kpos: Tensor, table: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    return (qpos.to(torch.long).contiguous(), kpos.to(torch.long).contiguous(), table.to(torch.long).contiguous())


def _n_rows(C: Tensor | None, P: Tensor | None) -> int:
    return int(C.shape[-1]) if C is not None else int(P.shape[-2])


def reference(C: Tensor | None, P: Tensor | None, qpos: Tensor, kpos: Tensor, table: Tensor, rlo: int) -> Tensor:
    """The term in plain PyTorch (an ``(Nq, Nk)`` index, ``gather``): the kernels' oracle.

    Args:
        C: ``(B, H, Nq, rows)`` or None.  P: ``(B, H, rows, Nk)`` or None.
        qpos: ``(B|1, Nq)`` int64.  kpos: ``(B|1, Nk)`` int64.
        table: ``(T,)`` int64 rows in ``[0, rows)`` of distances ``rlo .. rlo + T - 1``.
    Returns:
        ``(B, H, Nq, Nk)``.
    """
    ref = C if C is not None else P
    B, H = ref.shape[:2]
    idx = table[qpos[:, :, None] - kpos[:, None, :] - rlo]  # (B|1, Nq, Nk)
    Nq, Nk = idx.shape[-2:]
    idx = idx[:, None].expand(B, H, Nq, Nk)
    out = None
    if C is not None:
        out = C.gather(-1, idx)
    if P is not None:
        t = P.gather(-2, idx)
        out = t if out is None else out + t
    return out


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, C, P, qpos, kpos, table, rlo, n_rows):
        ref = C if C is not None else P
        out = torch.empty(ref.shape[0], ref.shape[1], qpos.shape[-1], kpos.shape[-1], dtype=ref.dtype)
        kernels.load().gather_rows(out, _EMPTY if C is None else C, _EMPTY if P is None else P,
                                   qpos, kpos, table, rlo, n_rows, False)
        ctx.meta = (rlo, n_rows, None if C is None else C.shape, None if P is None else P.shape, ref.dtype)
        ctx.save_for_backward(qpos, kpos, table)
        return out

    @staticmethod
    @first_order
    def backward(ctx, dout):
        rlo, n_rows, cs, ps, dt = ctx.meta
        qpos, kpos, table = ctx.saved_tensors
        gC = None if cs is None or not ctx.needs_input_grad[0] else torch.zeros(cs, dtype=dt)
        gP = None if ps is None or not ctx.needs_input_grad[1] else torch.zeros(ps, dtype=dt)
        if gC is not None or gP is not None:
            scatter_(gC, gP, dout, qpos, kpos, table, rlo)
        return gC, gP, None, None, None, None, None


def gather(C: Tensor | None, P: Tensor | None, qpos: Tensor, kpos: Tensor, table: Tensor, rlo: int,
           out: Tensor | None = None) -> Tensor:
    """The term through the kernel (check :func:`usable` first); differentiable in ``C`` and ``P``.

    Args: as :func:`reference`; ``out``: a contiguous ``(B, H, Nq, Nk)`` tensor of the states'
    dtype to add the term into in place (no autograd through it).
    Returns:
        ``(B, H, Nq, Nk)`` (``out`` when given).
    """
    qpos, kpos, table = _args(qpos, kpos, table)
    n_rows = _n_rows(C, P)
    if out is None:
        return _Gather.apply(C, P, qpos, kpos, table, int(rlo), n_rows)
    kernels.load().gather_rows(out, _EMPTY if C is None else C.detach(), _EMPTY if P is None else P.detach(),
                               qpos, kpos, table, int(rlo), n_rows, True)
    return out


def scatter_(gC: Tensor | None, gP: Tensor | None, ds: Tensor, qpos: Tensor, kpos: Tensor, table: Tensor,
             rlo: int) -> None:
    """Add the term's gradient for upstream ``ds (B, H, Nq, Nk)`` into ``gC`` and ``gP`` in place
    (the states' gradients, or views of them; either may be None)."""
    qpos, kpos, table = _args(qpos, kpos, table)
    kernels.load().scatter_rows(_EMPTY if gC is None else gC, _EMPTY if gP is None else gP,
                                ds.contiguous(), qpos, kpos, table, int(rlo), _n_rows(gC, gP))
