"""The ``"relkey"`` engine: relative keys, e.g. Transformer-XL (Dai et al. 2019).

Serves any scheme whose :meth:`~relpos.encodings.base.Encoding.relative_keys`
describes its score as ``scale (u . k_j + (q_i + v) . r(j - i))``, on CPU in
float32/float64 with contiguous positions, no key padding and ``Dv == D``.
``u . k_j`` is folded into the queries (``(q + u) . k``); the position term
``(q + v) . r`` is one ``(rows, Nq + Nk)`` matmul per query block against the
relative keys on the distinct offsets, and the ``(rows, keys)`` term is a
zero-copy strided view of it, passed to the fused kernel as its mask. The
backward recomputes it and writes ``dS`` through the same skew
(:func:`~relpos.attention.chunked.kernels.block_backward`); where the compiled kernels are
built (:mod:`relpos.kernels.relkey`), the elementwise passes between its matmuls are two C++
passes per block (the skewed add with the log-sum-exp, and ``dS`` with its skewed copy).
Causal calls multiply only the offsets a block can see (``d <= 0``), forward and backward.

The position term costs as many matmuls per block as the content term: ``(q + v) . r`` forward and
again in backward, and ``dS`` against ``r`` and against ``q + v`` for its gradients, beside the five
of the content attention's backward; the kernel removes the passes between them, not those matmuls.
"""

from __future__ import annotations

import torch
from torch import Tensor

from relpos.attention import Request
from relpos.attention.chunked import parts
from relpos.attention.chunked.kernels import block_backward, cpu_flash_ok, flash_ops, knob, skewed
from relpos.kernels import relkey as relkey_kernel
from relpos.offsets import offsets_range
from relpos.first_order import first_order

NAME = "relkey"


def eligible(req: Request) -> bool:
    """The score is the scheme's only term and has the relative-key form, served by the CPU flash kernel."""
    enc = req.encoding
    return enc.acts_on - {"embedding", "qk"} == {"score"} and cpu_flash_ok(req) and enc.relative_keys() is not None


def run(req: Request, q: Tensor, k: Tensor, tvals: Tensor | None, lo: int) -> Tensor:
    """``scale * ((q + u) . k_j + (q + v) . r[j - i])`` with ``r`` on the offsets ``lo..`` (``q, k`` rotated)."""
    B, H, Nq, Nk, D = req.shape
    rk = req.encoding.relative_keys()
    offs = offsets_range(Nq, Nk, req.q_offset).to(q.device)
    if req.causal and int(offs[-1]) > 0:
        # Offsets d > 0 are never visible: project only d <= 0 (half the W_R R rows for self-attention) and
        # give the future offsets, which the blocks read beside the diagonal and then mask, zero keys.
        past = rk.keys(offs[offs <= 0])  # (H, L0, D)
        rtab = torch.cat([past, past.new_zeros(past.shape[0], int(offs[-1]), past.shape[2])], 1)  # (H, L, D)
    else:
        rtab = rk.keys(offs)  # (H, L, D) float32, autograd to the scheme's parameters
    qu = q if rk.u is None else q + rk.u.to(q.dtype)[None, :, None, :]
    qv = q if rk.v is None else q + rk.v.to(q.dtype)[None, :, None, :]
    return _RelKeyFn.apply(_RelKeyCfg(req, lo), qu, qv, k, req.v, rtab)


class _RelKeyCfg:
    """Logits ``scale * (q_u . k_j + q_v . r[j - i])`` with ``r`` given on every offset ``lo..hi``."""

    def __init__(self, req: Request, lo: int) -> None:
        B, H, Nq, Nk, D = req.shape
        self.B, self.H, self.Nq, self.Nk = B, H, Nq, Nk
        self.scale, self.causal, self.qo, self.lo = req.scale, req.causal, req.q_offset, lo
        itemsize = torch.finfo(req.q.dtype).bits // 8
        if knob("FORCE_ROWS") is not None:
            self.fwd_rows = self.rows = int(knob("FORCE_ROWS"))
        else:
            # the forward runs one head at a time: its (rows, rows + keys) term stays in cache between the matmul
            # that writes it and the fused kernel that reads it as its mask (measured: 87 against 103 ms for all
            # heads in blocks of 113 rows at (1, 8, 2048, 64), causal)
            self.fwd_rows = int(max(knob("MIN_ROWS"), min(256, knob("BLOCK_BYTES") // max(1, B * (Nk + 256) * itemsize))))
            self.rows = int(max(knob("MIN_ROWS"), min(256, knob("BLOCK_BYTES") // max(1, B * H * Nk * itemsize))))
        self.heads_per_block = H  # measured: all heads per block is fastest here (8 matmuls per block)

    def keys(self, b: int) -> int:
        return min(self.Nk, self.qo + b) if self.causal else self.Nk


def _relkey_pd(cfg: _RelKeyCfg, qvs: Tensor, rtab: Tensor, a: int, b: int, C: int,
               buf: Tensor | None = None) -> tuple[Tensor, Tensor, int]:
    """Per-offset position logits of rows ``[a, b)``, their ``(rows, C)`` strided view and the visible width.

    ``pd[..., t, m] = qvs_t . r[d_min + m]`` (``qvs = scale (q + v)``) with ``d_min = -(qo + b - 1)``; the
    pair ``(t, j)`` has offset ``j - qo - a - t`` = column ``j - t + R - 1``, so
    the ``(R, C)`` term is ``pd`` read with row stride ``W - 1`` (no copy).
    Causal: columns ``m >= qo + b`` are the offsets ``d > 0``, never visible: they are set to -inf and
    not multiplied (``vis``, the number of columns computed, is ``W`` otherwise), so the matmul covers
    ``(R, qo + b)`` instead of ``(R, R + C - 1)``. ``buf`` (flat, at least ``B H' R W`` entries): the storage
    ``pd`` is written into, reused across blocks (no fresh pages per block); None allocates.
    """
    R = b - a
    W = R + C - 1
    d_min = -(cfg.qo + b - 1)
    seg = rtab[:, d_min - cfg.lo : d_min - cfg.lo + W]  # (H, W, D)
    vis = min(W, cfg.qo + b) if cfg.causal else W
    shape = (qvs.shape[0], qvs.shape[1], R, W)
    pd = qvs.new_empty(shape) if buf is None else buf[: shape[0] * shape[1] * R * W].view(shape)  # (B, H', R, W)
    torch.matmul(qvs, seg[:, :vis].transpose(-1, -2), out=pd[..., :vis])
    if vis < W:
        pd[..., vis:] = float("-inf")
    st = pd.stride()
    view = pd.as_strided((pd.shape[0], pd.shape[1], R, C), (st[0], st[1], W - 1, 1), pd.storage_offset() + R - 1)
    return pd, view, vis


def _block_backward_kernel(pd: Tensor, qb: Tensor, kb: Tensor, vb: Tensor, gb: Tensor, lse: Tensor, delta: Tensor,
                           scale: float, z: Tensor, dqb: Tensor, dkb: Tensor, dvb: Tensor, sbuf: Tensor,
                           pbuf: Tensor) -> None:
    """One block of the backward with the compiled passes: the logits ``scale q k^T + skew(pd) - lse`` in one
    pass, ``dS = P (dP - delta)`` and its skewed copy into ``z (M, R, vis)`` in another.

    ``pd (M, R, W)``: position logits by offset; ``qb, kb, vb, gb``: ``(M, R|C, D)``; ``lse, delta``: ``(M, R)``.
    The block's gradients are added in place to ``dqb (M, R, D)``, ``dkb (M, C, D)`` and ``dvb (M, C, Dv)``
    (views of the call's gradients: no per-block result tensors and no separate additions). ``sbuf`` and
    ``pbuf`` (flat, at least ``M R C`` entries each) hold the logits and ``dP``, reused across blocks.
    """
    M, R, C = qb.shape[0], qb.shape[1], kb.shape[1]
    s = sbuf[: M * R * C].view(M, R, C)
    t = parts.now()
    torch.baddbmm(s, qb, kb.transpose(1, 2), beta=0.0, alpha=scale, out=s)
    parts.add("content matmuls", t)
    floor = -708.0 if s.dtype == torch.float64 else -87.0  # as kernels.exp_: no subnormal exp
    t = parts.now()
    relkey_kernel.logits_(s, pd, lse, floor)
    parts.add("kernel passes", t)
    t = parts.now()
    p = s.exp_()
    parts.add("exp", t)
    t = parts.now()
    dvb.baddbmm_(p.transpose(1, 2), gb)
    dp = torch.bmm(gb, vb.transpose(1, 2), out=pbuf[: M * R * C].view(M, R, C))
    parts.add("content matmuls", t)
    t = parts.now()
    ds = relkey_kernel.ds_(dp, p, delta, z)
    parts.add("kernel passes", t)
    t = parts.now()
    dqb.baddbmm_(ds, kb, alpha=scale)
    dkb.baddbmm_(ds.transpose(1, 2), qb, alpha=scale)
    parts.add("content matmuls", t)


class _RelKeyFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cfg: _RelKeyCfg, qu, qv, k, v, rtab):
        flash, _ = flash_ops()
        B, H, Nq = cfg.B, cfg.H, cfg.Nq
        rt = rtab.to(qu.dtype)
        qvs = qv * cfg.scale  # the scale folded into (q + v): no (rows, W) pass per block
        out = torch.empty(B, H, Nq, v.shape[-1], dtype=qu.dtype, device=qu.device)
        lse = torch.empty(B, H, Nq, dtype=qu.dtype, device=qu.device)
        rows = min(cfg.fwd_rows, Nq)
        pdbuf = qu.new_empty(B * rows * (rows + cfg.keys(Nq) - 1))  # one buffer for every block's term
        for h in range(H):
            hs = slice(h, h + 1)
            for a in range(0, Nq, cfg.fwd_rows):
                b = min(Nq, a + cfg.fwd_rows)
                C = cfg.keys(b)
                t = parts.now()
                _, view, _ = _relkey_pd(cfg, qvs[:, hs, a:b], rt[hs], a, b, C, pdbuf)
                parts.add("position matmuls", t)
                t = parts.now()
                o, l = flash(qu[:, hs, a:b], k[:, hs, :C], v[:, hs, :C], 0.0, False, attn_mask=view, scale=cfg.scale)
                out[:, hs, a:b] = o
                lse[:, hs, a:b] = l
                parts.add("flash forward", t)
        ctx.cfg = cfg
        ctx.rtab_dtype = rtab.dtype
        ctx.save_for_backward(qu, qvs, k, v, rt, out, lse)
        return out

    @staticmethod
    @first_order
    def backward(ctx, dout):
        cfg: _RelKeyCfg = ctx.cfg
        qu, qvs, k, v, rt, out, lse = ctx.saved_tensors
        B, H, Nq = cfg.B, cfg.H, cfg.Nq
        D, Dv = qu.shape[-1], v.shape[-1]
        dout = dout.contiguous()
        delta = (dout * out).sum(-1)  # (B, H, Nq)
        # contiguous whatever the inputs' layout (a model's q is a (B, N, H, D) buffer seen as (B, H, N, D)): the
        # blocks add into (B * H, rows, D) views of these
        dqu, dqv, dk, dv = (torch.zeros(x.shape, dtype=x.dtype, device=x.device) for x in (qu, qvs, k, v))
        drt = torch.zeros_like(rt)
        G = max(1, min(H, cfg.heads_per_block))
        fused = relkey_kernel.usable(qu, qvs, k, v, rt, out, dout)  # the compiled elementwise passes
        # dS by offset: one buffer, re-zeroed only when a block's R changes or its C shrinks: while (R, C) grow,
        # each block overwrites every entry the previous one wrote (row t starts at column R - 1 - t), so the
        # rest stays zero. Before: a fresh (R, R + C - 1) zero buffer per block.
        rows = min(cfg.rows, Nq)
        zbuf = qu.new_empty(B * G, rows, rows + cfg.keys(Nq) - 1)
        # the term, the logits and dP: one buffer each for every block (no fresh pages per block)
        pdbuf, sbuf, pbuf = (qu.new_empty(B * G * rows * w) for w in (rows + cfg.keys(Nq) - 1, cfg.keys(Nq),
                                                                       cfg.keys(Nq)))
        for h0 in range(0, H, G):
            hs = slice(h0, min(H, h0 + G))
            g = hs.stop - hs.start
            rth = rt[hs]
            last = (0, 0)  # (R, C) of the previous block; R = 0 zeroes the buffer first
            for a in range(0, Nq, cfg.rows):
                b = min(Nq, a + cfg.rows)
                R, C = b - a, cfg.keys(b)
                W = R + C - 1
                t = parts.now()
                pd, view, vis = _relkey_pd(cfg, qvs[:, hs, a:b], rth, a, b, C, pdbuf)
                parts.add("position matmuls", t)
                qb = qu[:, hs, a:b].reshape(B * g, R, D)
                kb = k[:, hs, :C].reshape(B * g, C, D)
                vb = v[:, hs, :C].reshape(B * g, C, Dv)
                gb = dout[:, hs, a:b].reshape(B * g, R, Dv)
                if fused:  # the kernel writes every column of z's rows: no stale entries, no re-zeroing
                    z = zbuf[: B * g, :R, :vis]
                    # g == H (all heads per block), so the (B, H, rows, D) slices view as (B * H, rows, D)
                    _block_backward_kernel(pd.view(B * g, R, W), qb, kb, vb, gb, lse[:, hs, a:b].reshape(B * g, R),
                                           delta[:, hs, a:b].reshape(B * g, R), cfg.scale, z,
                                           dqu[:, hs, a:b].view(B * g, R, D), dk[:, hs, :C].view(B * g, C, D),
                                           dv[:, hs, :C].view(B * g, C, Dv), sbuf, pbuf)
                    z = zbuf[: B * g, :R, :W]
                else:
                    if R != last[0] or C < last[1]:
                        zbuf[: B * g].zero_()
                    last = (R, C)
                    s = torch.empty(B, g, R, C, dtype=qu.dtype, device=qu.device)
                    torch.sub(view, lse[:, hs, a:b, None], out=s)
                    z = zbuf[: B * g, :R, :W]  # dS laid out by offset, like pd
                    gq, gk, gv = block_backward(s.view(B * g, R, C), qb, kb, vb, gb,
                                                delta[:, hs, a:b, None].reshape(B * g, R, 1), cfg.scale,
                                                skewed(z, R, C, anti=False))
                    dv[:, hs, :C] += gv.view(B, g, C, Dv)
                    dqu[:, hs, a:b] += gq.view(B, g, R, D)
                    dk[:, hs, :C] += gk.view(B, g, C, D)
                d_min = -(cfg.qo + b - 1)
                seg = rth[:, d_min - cfg.lo : d_min - cfg.lo + vis]  # (g, vis, D)
                z4 = z.view(B, g, R, W)[..., :vis]  # dS is zero on the columns past vis (never visible)
                drs = drt[hs, d_min - cfg.lo : d_min - cfg.lo + vis]  # (g, vis, D)
                t = parts.now()
                if B == 1:  # both products added in place, as batched matmuls over the heads
                    dqv[0, hs, a:b].baddbmm_(z4[0], seg, alpha=cfg.scale)
                    drs.baddbmm_(z4[0].transpose(-1, -2), qvs[0, hs, a:b])
                else:
                    dqv[:, hs, a:b] += torch.matmul(z4, seg).mul_(cfg.scale)
                    drs += torch.matmul(z4.transpose(-1, -2), qvs[:, hs, a:b]).sum(0)
                parts.add("position matmuls", t)
        return None, dqu, dqv, dk, dv, drt.to(ctx.rtab_dtype)
