"""Dense causal attention with a relative-key term (Transformer-XL's form), formed block by block.

Paper: Dai et al. 2019, "Transformer-XL", https://arxiv.org/abs/1901.02860 (section 3.3, and appendix B's
"relative shift").

For a scheme with the :class:`~relpos.encodings.base.RelativeKeys` capability, the logit of query ``t`` and key
``j <= t`` is::

    s[t, j] = scale (q_t + u) . k_j  +  (q_t + v) . K[j - t + N - 1]

with ``K`` the ``(H, N, D)`` relative keys of the past offsets ``d = j - t`` in ``-(N-1) .. 0`` (already
scaled). :mod:`relpos.attention.dense` otherwise forms the whole ``(B, H, N, N)`` term (a product on the
offsets, skewed with :func:`relpos.offsets.skew_rows_past`) and runs the row blocks of
``_CausalTermAttention`` on it, so the forward and backward each write several ``N x N`` tensors (the
product, the skewed term, the term's gradient, its unskewed copy). Here each row block ``t in [r0, r1)``, which
sees keys ``j < r1``, forms only its own slice: the product ``(q + v)[r0:r1] . K[N - r1 :]`` is
``(H B, R, r1)`` (head-major: one matmul per head over every batch entry's rows), its skewed read view is
added to the block's content logits (the future keys get -inf), and the backward unskews the block's ``dS``
the same way. Where the kernels are built, ``relpos/kernels/relkey.cpp`` runs the same block loops from C++
(the backward forming ``dS`` and its layout by offset in one pass); ``_forward_blocks`` and
``_backward_blocks`` are the PyTorch loops, taken otherwise. No tensor of ``N x N`` per head is formed beyond
the blocks' probabilities, which the backward needs.

Equal to :class:`relpos.attention.dense._CausalTermAttention` on the skewed term (tested, gradients included,
against the scheme's float64 reference).
"""

from __future__ import annotations

import torch
from torch import Tensor

from relpos.first_order import first_order
from relpos.kernels import relkey as relkey_kernel
from relpos.offsets import _skew_view, future_table

__all__ = ["causal_relkey_attention", "relkey_blocks"]


#: causal self-attention of a :class:`RelativeKeys` scheme (Transformer-XL) may run by row blocks from this many
#: query rows on (:func:`relkey_blocks`); its blocks form only their own slice of the term, so they pay off sooner
#: than ``relpos.attention.dense._CausalTermAttention``'s (from 256 rows)
RELKEY_BLOCK_ROWS = 64


def relkey_blocks(B: int, H: int, N: int, D: int) -> int:
    """How many row blocks this kernel runs for causal self-attention of ``(B, H, N, D)``
    in training; 0: none (the whole skewed term through ``relpos.attention.dense._TermAttention``).

    Measured by ``benchmarks/relkey_blocks.py`` (the attention call's forward and backward, blocks against the
    whole square; ``results/relkey_blocks.md``) and ``benchmarks/ab_step.py relkey-blocks`` (the training step):
    from 96 rows the blocks win at every ``D`` measured (0.62-0.95x of the whole square); from 64 rows they win with
    ``D = 16`` once the batch holds ``B H N^2 >= 2^18`` pairs (0.70-0.91x), and gain little or lose with fewer pairs
    or a wider head (0.97-1.09x: the blocks' own calls then cost about what the quarter of the square they skip
    saves); below 64 rows 2 blocks read 0.91-1.07x between runs.

    >>> [relkey_blocks(16, 4, n, 16) for n in (48, 64, 96, 128, 256)]
    [0, 2, 2, 4, 4]
    >>> relkey_blocks(16, 4, 64, 32), relkey_blocks(4, 4, 64, 16)
    (0, 0)
    """
    if N < RELKEY_BLOCK_ROWS:
        return 0
    if N >= 128:
        return 4  # dense.CAUSAL_BLOCKS, as from 256 rows before
    if N >= 96:
        return 2
    return 2 if D <= 16 and B * H * N * N >= 1 << 18 else 0


class _CausalRelKeyAttention(torch.autograd.Function):
    """``o = softmax(scale qu k^T + skew(qv K^T)) v`` over causal row blocks; see the module docstring.

    The ``(B, H)`` pairs run head-major, as ``(H B, N, D)`` batches (the same one copy per input as ``(B H, N,
    D)``): a block's product on the offsets is then ``H`` matmuls of ``B R`` query rows against that head's keys
    (``(H, B R, D) x (H, D, e)``), not ``B H`` matmuls of ``R`` rows against keys copied ``B`` times, and the
    keys' gradient is ``H`` matmuls over all ``B R`` rows, with no sum over the batch afterwards."""

    @staticmethod
    def forward(ctx, qu: Tensor, qv: Tensor, k: Tensor, v: Tensor, keys: Tensor, scale: float,
                blocks: tuple) -> Tensor:
        B, H, N, D = qu.shape
        Dv = v.shape[3]
        qus = qu.transpose(0, 1).reshape(H * B, N, D) * scale  # scale (q + u), (H B, N, D)
        k3, v3 = (t.transpose(0, 1).reshape(H * B, N, t.shape[-1]) for t in (k, v))  # (H B, N, .)
        future = future_table(N, N, 1, k3.dtype, k3.device)  # (N, N): -inf for the keys j > t
        # under torch.compile the PyTorch loops, which it can trace (it cannot see into the C++ ones)
        ctx.compiled = relkey_kernel.usable(qus, qv, k3, v3, keys) and not torch.compiler.is_compiling()
        if ctx.compiled:  # _forward_blocks' calls, made from C++ (fewer interpreter steps per block)
            o, ps, qbs = relkey_kernel.blocks_forward(qus, qv, k3, v3, keys, future, blocks)
        else:
            o, ps, qbs = _forward_blocks(qus, qv, k3, v3, keys, future, blocks)
        ctx.save_for_backward(qus, k3, v3, keys, o, *ps, *qbs)
        ctx.scale, ctx.blocks, ctx.dims = scale, blocks, (B, H, N, D)
        return o.view(H, B, N, Dv).transpose(0, 1)

    @staticmethod
    @first_order
    def backward(ctx, go: Tensor):
        qus, k3, v3, keys, o, *saved = ctx.saved_tensors
        ps, qbs = saved[: len(ctx.blocks)], saved[len(ctx.blocks):]
        B, H, N, D = ctx.dims
        go3 = go.transpose(0, 1).reshape(H * B, N, -1)
        ks = k3 * ctx.scale  # the content logits' scale on the keys, for dqu
        delta = (go3 * o).sum(-1)  # (H B, N): rowsum(P dP) = rowsum(dO o)
        if ctx.compiled and relkey_kernel.usable(go3, qus):
            dqu, dqvh, dk, dv, dkeys = relkey_kernel.blocks_backward(go3, qus, ks, v3, keys, delta, ps, qbs,
                                                                     ctx.blocks, B)
        else:
            dqu, dqvh, dk, dv, dkeys = _backward_blocks(go3, qus, ks, v3, keys, delta, ps, qbs, ctx.blocks, B)
        back = lambda t: t.view(H, B, N, -1).transpose(0, 1)  # (B, H, N, .) views
        return back(dqu), dqvh.transpose(0, 1), back(dk), back(dv), dkeys, None, None


def causal_relkey_attention(qu: Tensor, qv: Tensor, k: Tensor, v: Tensor, keys: Tensor, scale: float,
                            blocks: tuple) -> Tensor:
    """Causal self-attention (``Nq == Nk == N``, no offset) with a relative-key term, by row blocks.

    Args:
        qu: ``(B, H, N, D)`` queries plus the content bias ``u``.
        qv: ``(B, H, N, D)`` queries plus the position bias ``v``.
        k: ``(B, H, N, D)`` keys; v: ``(B, H, N, Dv)`` values.
        keys: ``(H, N, D)`` relative keys of the offsets ``-(N-1) .. 0`` in that order, already scaled.
        scale: the content logits' scale.
        blocks: :func:`relpos.attention.dense.causal_blocks` of ``(N, N, 0)``.

    Returns:
        ``(B, H, N, Dv)``.
    """
    N = qu.shape[2]
    if k.shape[2] != N or keys.shape[1] != N or any(e != r1 for _, r1, e in blocks):
        raise ValueError(f"causal_relkey_attention needs Nq == Nk == keys' offsets and blocks without a query "
                         f"offset, got Nq = {N}, Nk = {k.shape[2]}, {keys.shape[1]} offsets")
    return _CausalRelKeyAttention.apply(qu, qv, k, v, keys, scale, blocks)


def _forward_blocks(qus: Tensor, qv: Tensor, k3: Tensor, v3: Tensor, keys: Tensor, future: Tensor,
                    blocks: tuple) -> tuple[Tensor, list[Tensor], list[Tensor]]:
    """The forward's row blocks in PyTorch: ``(o (H B, N, Dv), ps, qbs)``; ``relkey.cpp`` runs the same calls."""
    B, H, N, D = qv.shape
    o = k3.new_empty(H * B, N, v3.shape[2])
    ps, qbs = [], []
    for r0, r1, e in blocks:  # e == r1: rows r0 .. r1 - 1 see keys 0 .. r1 - 1
        R = r1 - r0
        qb = qv[:, :, r0:r1].transpose(0, 1).reshape(H, B * R, D)  # the block's rows of every batch entry
        pd = torch.bmm(qb, keys[:, N - e:].transpose(1, 2)).view(H * B, R, e)  # column c: offset c - (e - 1)
        s = torch.add(_skew_view(pd, R, e), future[r0:r1, :e])  # keys j > r0 + t' get -inf
        s.baddbmm_(qus[:, r0:r1], k3[:, :e].transpose(1, 2))
        p = torch.softmax(s, dim=-1)  # (H B, R, e)
        o[:, r0:r1] = torch.bmm(p, v3[:, :e])
        ps.append(p)
        qbs.append(qb)
    return o, ps, qbs


def _backward_blocks(go3: Tensor, qus: Tensor, ks: Tensor, v3: Tensor, keys: Tensor, delta: Tensor, ps, qbs,
                     blocks: tuple, B: int) -> tuple[Tensor, ...]:
    """The backward's row blocks in PyTorch: ``(dqu, dqv (H, B, N, D), dk, dv, dkeys)`` with ``ks = scale k``
    and ``delta (H B, N)``; ``relkey.cpp`` runs the same calls, with dS and its layout by offset in one pass."""
    H, N, D = keys.shape
    dqu, dqvh = torch.empty_like(qus), qus.new_empty(H, B, N, D)
    dk, dv = torch.zeros_like(ks), torch.zeros_like(v3)
    dkeys = torch.zeros_like(keys)
    un = None  # dS by offset, (H B, R, R - 1 + N): one buffer for the blocks of R rows
    for (r0, r1, e), p, qb in zip(blocks, ps, qbs):
        R = r1 - r0
        g = go3[:, r0:r1]
        dv[:, :e] += torch.bmm(p.transpose(1, 2), g)
        ds = torch.bmm(g, v3[:, :e].transpose(1, 2))  # dP, then dS (H B, R, e): 0 after the diagonal
        ds.sub_(delta[:, r0:r1, None]).mul_(p)
        # dS back on the offsets: dpd[t', c] = dS[t', c - (R - 1 - t')] for c >= R - 1 - t', else 0 (the adjoint
        # of the forward's skewed read). Row t' is written from column R - 1 - t' of a buffer R - 1 columns
        # wider than the widest block; the pairs after the diagonal (0) land past column e. Left of a row's
        # first column nothing is ever written: it is zeroed once per row count R.
        if un is None or un.shape[1] != R:
            un = ds.new_empty(H * B, R, R - 1 + N)
            un[..., : R - 1].zero_()
        _skew_view(un[..., : R - 1 + e], R, e).copy_(ds)
        dpd = un[..., :e].view(H, B * R, e)  # rows of stride R - 1 + N
        dqu[:, r0:r1] = torch.bmm(ds, ks[:, :e])
        dk[:, :e] += torch.bmm(ds.transpose(1, 2), qus[:, r0:r1])
        dqvh[:, :, r0:r1] = torch.bmm(dpd, keys[:, N - e:]).view(H, B, R, D)
        dkeys[:, N - e:] += torch.bmm(dpd.transpose(1, 2), qb)  # (H, e, D): summed over every row
    return dqu, dqvh, dk, dv, dkeys
