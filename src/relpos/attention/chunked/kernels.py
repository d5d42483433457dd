"""Kernels shared by the ``chunked`` engines.

One log-sum-exp merge (:func:`merge`), one subnormal-safe ``exp`` (:func:`exp_`),
one block of the attention backward written into a skewed buffer
(:func:`block_backward` with :func:`skewed`), the causal staircase of
rectangles (:func:`staircase`) and the calls of PyTorch's fused CPU flash kernel
on lists of rectangles. Tuning knobs live on the package
(:mod:`relpos.attention.chunked`) and are read at call time with :func:`knob`,
so a test can change them with ``monkeypatch.setattr(chunked, "FORCE_ROWS", 3)``.
"""

from __future__ import annotations

import math
import sys

import torch
from torch import Tensor

from relpos.attention import Request

Rect = tuple[int, int, int, int, bool]  # (row start, row end, key start, key end, causal square)


def knob(name: str):
    """Current value of a tuning knob of :mod:`relpos.attention.chunked` (e.g. ``"FORCE_ROWS"``)."""
    return getattr(sys.modules[__package__], name)


def flash_ops():
    """PyTorch's fused CPU flash-attention forward/backward ops, or None."""
    ops = torch.ops.aten
    try:
        return ops._scaled_dot_product_flash_attention_for_cpu, ops._scaled_dot_product_flash_attention_for_cpu_backward
    except (AttributeError, RuntimeError):  # pragma: no cover - older/newer torch
        return None


def cpu_flash_ok(req: Request) -> bool:
    """Whether the fused CPU flash kernel can take this request's tensors.

    CPU, float32/float64, a value width equal to the head width (the kernel needs
    ``Dv == D``) and contiguous positions without key padding.
    """
    return (
        req.q.device.type == "cpu"
        and req.q.dtype in (torch.float32, torch.float64)
        and req.v.shape[-1] == req.q.shape[-1]
        and req.key_padding_mask is None
        and req.contiguous
        and flash_ops() is not None
    )


def toeplitz_terms(req: Request) -> bool:
    """Whether the whole bias is Toeplitz and positions are contiguous (offsets ``lo .. hi``)."""
    return req.toeplitz and req.contiguous


def rows_per_block(bh: int, keys: int, itemsize: int) -> int:
    """Query rows per block so that one ``(bh, rows, keys)`` block is about ``BLOCK_BYTES``."""
    force = knob("FORCE_ROWS")
    if force is not None:
        return int(force)
    r = knob("BLOCK_BYTES") // max(1, bh * keys * itemsize)
    return max(knob("MIN_ROWS"), min(knob("MAX_ROWS"), int(r)))


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def exp_(t: Tensor) -> Tensor:
    """In-place ``exp`` that first raises inputs to the smallest normal float's log.

    PyTorch's vectorised ``exp`` takes a slow path (about 100x) for inputs whose
    result is subnormal or zero, which masked (-inf) and far-away logits are.
    ``exp(-87)`` is ``1.6e-38`` for float32 (``exp(-708)`` for float64): such
    entries add nothing a float can resolve, and fully masked rows are zeroed
    explicitly by the callers.
    """
    floor = -708.0 if t.dtype == torch.float64 else -87.0
    return t.clamp_min_(floor).exp_()


def merge(out: Tensor, lse: Tensor, rows: slice, o: Tensor, l: Tensor) -> None:
    """Fold a partial result ``(o (B, H, R, Dv), l (B, H, R))`` of ``rows`` into ``(out, lse)``.

    Rows that have seen no key yet on either side (both log-sum-exps ``-inf``)
    stay ``-inf`` with a zero output instead of becoming NaN.
    """
    lo_, oo = lse[:, :, rows], out[:, :, rows]
    new = torch.logaddexp(lo_, l)
    safe = torch.where(new == -math.inf, torch.zeros_like(new), new)
    oo.mul_(torch.exp(lo_ - safe)[..., None]).add_(o * torch.exp(l - safe)[..., None])
    lse[:, :, rows] = new


def add_grads(acc: list, grads) -> None:
    """``acc[i] += grads[i]`` where a gradient exists."""
    for i, g in enumerate(grads):
        if g is None:
            continue
        acc[i] = g if acc[i] is None else acc[i] + g


# ------------------------------------------------------------------ Toeplitz views


def toeplitz_block(vals: Tensor, lo: int, d_min: int, rows: int, cols: int) -> Tensor:
    """``out[..., t, j] = vals[..., (d_min + rows - 1) + j - t - lo]``: a ``(..., rows, cols)`` copy.

    ``vals[..., r]`` holds the term of offset ``lo + r``; the block covers
    offsets ``d_min .. d_min + rows + cols - 2`` with offset ``d_min`` at the
    bottom-left corner.
    """
    s = d_min - lo
    seg = vals[..., s : s + rows + cols - 1]
    return seg.unfold(-1, cols, 1).flip(-2)  # row r of unfold is t = rows-1-r


def skewed(buf: Tensor, R: int, C: int, *, anti: bool) -> Tensor:
    """A ``(B', R, C)`` view of ``buf (B', R', W')`` whose column sums are per-offset sums.

    ``anti=False``: entry ``(t, j)`` sits at column ``j - t + R - 1`` (diagonals, keys
    in order); ``anti=True``: at column ``t + j`` (anti-diagonals, keys reversed).
    Writing a block into the view and summing ``buf`` over rows gives the sum of
    the block along each offset, with no index tensor.
    """
    st = buf.stride()
    if anti:
        return buf.as_strided((buf.shape[0], R, C), (st[0], st[1] + 1, 1), buf.storage_offset())
    return buf.as_strided((buf.shape[0], R, C), (st[0], st[1] - 1, 1), buf.storage_offset() + R - 1)


def block_backward(s: Tensor, qb: Tensor, kb: Tensor, vb: Tensor, gb: Tensor, delta: Tensor, scale: float,
                   ds_out: Tensor, *, want_qkv: bool = True):
    """One block of the attention backward from its recomputed logits.

    Args:
        s: ``(B', R, C)`` position term minus the row log-sum-exp; overwritten
            with the probabilities ``P = exp(s + scale q k^T)``.
        qb, kb, vb: ``(B', R, D)``, ``(B', C, D)``, ``(B', C, Dv)``.
        gb: ``(B', R, Dv)`` output gradient.
        delta: ``(B', R, 1)`` ``rowsum(dO * O)``.
        scale: the attention scale.
        ds_out: ``(B', R, C)`` (usually a :func:`skewed` view) that receives
            ``dS = P * (dO v^T - delta)``, the gradient of the logits.
        want_qkv: also return the gradients of q, k and v.

    Returns:
        ``(dq, dk, dv)`` for the block (``None`` each without ``want_qkv``).
    """
    p = exp_(s.baddbmm_(qb, kb.transpose(1, 2), alpha=scale))
    dv = torch.bmm(p.transpose(1, 2), gb) if want_qkv else None
    dp = torch.baddbmm(-delta, gb, vb.transpose(1, 2))
    ds = torch.mul(p, dp, out=ds_out)
    if not want_qkv:
        return None, None, None
    return torch.bmm(ds, kb).mul_(scale), torch.bmm(ds.transpose(1, 2), qb).mul_(scale), dv


# ---------------------------------------------------------------------- staircases


def staircase(Nq: int, Nk: int, qo: int, causal: bool, S: int) -> list[Rect]:
    """Cover the visible (query, key) pairs with rectangles ``(a0, a1, c0, c1, diagonal)``.

    Non-causal: one rectangle. Causal (query ``t`` sees keys ``j <= qo + t``): the
    queries are cut into blocks of ``S`` rows; each block's diagonal square
    ``[qo + a, qo + b)`` carries the causal mask, and the fully visible keys to
    its left form a staircase, which is cut recursively into few, large
    rectangles (the flash kernel is most efficient on large ones).
    """
    if not causal:
        return [(0, Nq, 0, Nk, False)]
    S = max(1, S)
    starts = list(range(0, Nq, S))
    ends = [min(Nq, a + S) for a in starts]
    rects = [(a, e, qo + a, qo + e, True) for a, e in zip(starts, ends)]
    width = [qo + a for a in starts]  # keys fully visible to block i: [0, width[i])

    def stair(i0: int, i1: int, c0: int) -> None:
        if i0 >= i1:
            return
        if i1 - i0 == 1:
            if width[i0] > c0:
                rects.append((starts[i0], ends[i0], c0, width[i0], False))
            return
        mid = (i0 + i1) // 2
        if width[mid] > c0:
            rects.append((starts[mid], ends[i1 - 1], c0, width[mid], False))
        stair(i0, mid, c0)
        stair(mid, i1, max(c0, width[mid]))

    stair(0, len(starts), 0)
    return rects


def offset_staircase(Nq: int, Nk: int, o: int, S: int) -> list[Rect]:
    """Rectangles covering ``{(t, j): 0 <= j <= t + o, j < Nk}`` (rows without keys skipped).

    Diagonal squares carry a top-left-aligned causal mask (the kernel's ``is_causal``).
    """
    t0 = max(0, -o)
    if t0 >= Nq:
        return []
    out = []
    for a0, a1, c0, c1, diag in staircase(Nq - t0, Nk, o + t0, True, S):
        c1 = min(c1, Nk)
        if c0 < c1:
            out.append((a0 + t0, a1 + t0, c0, c1, diag))
    return out


def flash_rects_fwd(q, k, v, rects: list[Rect], scale: float, out: Tensor, lse: Tensor, *, flip: bool) -> None:
    """Run the flash forward on each rectangle (``is_causal`` on diagonal squares) and merge into ``out``."""
    flash, _ = flash_ops()
    Nq = q.shape[2]
    for a0, a1, c0, c1, diag in rects:
        o, l = flash(q[:, :, a0:a1], k[:, :, c0:c1], v[:, :, c0:c1], 0.0, diag, scale=scale)
        if flip:  # rects are in flipped coordinates; q, k, v are passed flipped
            merge(out, lse, slice(Nq - a1, Nq - a0), o.flip(2), l.flip(2))
        else:
            merge(out, lse, slice(a0, a1), o, l)


def flash_rects_bwd(dout, q, k, v, out, lse, rects: list[Rect], scale: float, dq, dk, dv) -> None:
    """Accumulate exact partial gradients of ``rects`` (global ``out``/``lse``) into dq, dk, dv."""
    _, flash_bwd = flash_ops()
    for a0, a1, c0, c1, diag in rects:
        gq, gk, gv = flash_bwd(dout[:, :, a0:a1], q[:, :, a0:a1], k[:, :, c0:c1], v[:, :, c0:c1],
                               out[:, :, a0:a1], lse[:, :, a0:a1], 0.0, diag, scale=scale)
        dq[:, :, a0:a1] += gq
        dk[:, :, c0:c1] += gk
        dv[:, :, c0:c1] += gv
