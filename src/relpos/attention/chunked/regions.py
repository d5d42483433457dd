"""The ``"regions"`` engine: Toeplitz biases (and none) on CPU through Hankel views.

Serves ALiBi, Sandwich, KERPLE, T5, DPB and any scheme with ``toeplitz = True``
(and causal attention with no term but a query offset), on CPU in float32/float64
with contiguous positions, no key padding and ``Dv == D``. The bias of offset
``d = j - i`` is evaluated once on the ``Nq + Nk - 1`` distinct offsets. With the
keys stored in *reverse* order, the bias of any rectangle of (query, key) pairs
is a Hankel matrix: a zero-copy strided view of the reversed offset vector
(strides ``(1, 1)``), which PyTorch's fused CPU flash kernel accepts as
``attn_mask``. Causal attention is cut into a staircase of rectangles (large
rectangles below the diagonal, small masked squares on it) so the masked half is
skipped; the partial results are merged with their log-sum-exps, and the
backward pass calls the flash backward kernel on each rectangle with the
*global* output and log-sum-exp, which gives exact partial gradients. A learned
bias then needs ``dL/dbias`` per offset, i.e. the diagonal sums of
``dS = P * (dP - rowsum(dO * O))``:

* for schemes constant beyond a distance ``M`` (:meth:`Encoding.saturation_distance`,
  e.g. T5's ``max_distance``) under causal masking, only the band
  ``-M < d <= 0`` is recomputed; the saturated offsets get minus the band's
  total, because every row of ``dS`` sums to zero;
* otherwise the backward is one manual pass over query blocks (the same five
  matmuls as a fused kernel), reading the bias through Hankel views and
  writing ``dS`` into a skewed buffer whose column sums are the per-offset
  gradients (:func:`~relpos.attention.chunked.kernels.block_backward`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from relpos.attention import Request
from relpos.attention.chunked.kernels import block_backward, cpu_flash_ok, flash_ops, knob, merge, skewed, staircase
from relpos.first_order import first_order

NAME = "regions"


def eligible(req: Request) -> bool:
    """A Toeplitz bias (or no term at all) on contiguous positions, served by the CPU flash kernel."""
    sites = req.encoding.acts_on - {"embedding", "qk"}
    toeplitz = sites == {"bias"} and req.toeplitz
    return (not sites or toeplitz) and cpu_flash_ok(req)


def saturation_distance(enc) -> int | None:
    """``enc.saturation_distance()`` as an int, or None (see :meth:`Encoding.saturation_distance`)."""
    hook = getattr(enc, "saturation_distance", None)
    m = hook() if callable(hook) else None
    return None if m is None else int(m)


def run(req: Request, q: Tensor, k: Tensor, tvals: Tensor | None, lo: int) -> Tensor:
    """``q, k``: rotated; ``tvals (H, L)``: the bias on offsets ``lo..`` (None: no term)."""
    cfg = _RegionCfg(req, lo, saturation_distance(req.encoding))
    return _RegionFn.apply(cfg, q, k, req.v, tvals)


class _RegionCfg:
    """Static description of one call of the ``"regions"`` engine."""

    def __init__(self, req: Request, lo: int, saturation: int | None) -> None:
        B, H, Nq, Nk, D = req.shape
        self.B, self.H, self.Nq, self.Nk = B, H, Nq, Nk
        self.scale = req.scale
        self.causal = req.causal
        self.qo = req.q_offset
        self.lo = lo
        self.L = Nq + Nk - 1
        self.saturation = saturation
        force = knob("FORCE_ROWS")
        self.rects = staircase(Nq, Nk, self.qo, self.causal, knob("DIAG_ROWS") if force is None else force)
        self.cd = req.q.dtype
        itemsize = torch.finfo(self.cd).bits // 8
        # backward passes work on HEADS_PER_BLOCK heads x rows x keys (sized to stay in cache)
        self.heads_per_block = knob("HEADS_PER_BLOCK")
        g = max(1, min(H, self.heads_per_block))
        if force is not None:
            self.rows = int(force)
        else:
            target = knob("HANKEL_BLOCK_BYTES") // max(1, B * g * Nk * itemsize)
            self.rows = int(max(knob("MIN_ROWS"), min(256, target)))



def _hankel_mask(rv: Tensor, cfg: _RegionCfg, a0: int, a1: int, c0: int, c1: int) -> Tensor:
    """Bias of queries ``[a0, a1)`` x keys ``[c0, c1)`` *in reversed key order*, as a strided view.

    ``rv`` is the offset vector reversed (``rv[L-1-r]`` is the term of offset
    ``lo + r``). For local query ``t`` and reversed local key ``j'`` the offset is
    ``(c1 - 1 - qo - a0) - t - j'``, so the entry is ``rv[base + t + j']``.
    """
    R, C = a1 - a0, c1 - c0
    d_top = c1 - 1 - cfg.qo - a0
    base = cfg.L - 1 - (d_top - cfg.lo)
    Hs = rv.stride(0) if rv.shape[0] > 1 else 0
    return rv.as_strided((1, rv.shape[0], R, C), (0, Hs, 1, 1), rv.storage_offset() + base)


class _RegionFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cfg: _RegionCfg, q, k, v, tvals):
        flash, _ = flash_ops()
        Nk = cfg.Nk
        kr, vr = k.flip(2), v.flip(2)  # reversed key order: Hankel masks become strided views
        rv = _masked_reversed(cfg, tvals, q)
        out = lse = None
        for a0, a1, c0, c1, diag in cfg.rects:
            mask = None if rv is None or (not diag and tvals is None) else _hankel_mask(rv, cfg, a0, a1, c0, c1)
            o, l = flash(q[:, :, a0:a1], kr[:, :, Nk - c1 : Nk - c0], vr[:, :, Nk - c1 : Nk - c0], 0.0, False,
                         attn_mask=mask, scale=cfg.scale)
            if len(cfg.rects) == 1:
                out, lse = o, l
                break
            if out is None:
                out = torch.zeros(cfg.B, cfg.H, cfg.Nq, v.shape[-1], dtype=o.dtype, device=o.device)
                lse = torch.full((cfg.B, cfg.H, cfg.Nq), -math.inf, dtype=l.dtype, device=l.device)
            merge(out, lse, slice(a0, a1), o, l)
        ctx.cfg = cfg
        ctx.save_for_backward(q, kr, vr, tvals, out, lse)
        return out

    @staticmethod
    @first_order
    def backward(ctx, dout):
        cfg: _RegionCfg = ctx.cfg
        q, kr, vr, tvals, out, lse = ctx.saved_tensors
        dout = dout.contiguous()
        rv = _masked_reversed(cfg, tvals, q)
        need_t = tvals is not None and ctx.needs_input_grad[4]
        drv = None
        if need_t and cfg.saturation is None or need_t and not cfg.causal:
            # dS is needed everywhere: one manual pass gives dq, dk, dv and the bias gradient
            dq, dkr, dvr, drv = _hankel_backward(cfg, q, kr, vr, rv, out, lse, dout, band=None, want_qkv=True)
        else:
            dq, dkr, dvr = _flash_backward(cfg, q, kr, vr, rv, tvals is not None, out, lse, dout)
            if need_t:
                _, _, _, drv = _hankel_backward(cfg, q, kr, vr, rv, out, lse, dout, band=cfg.saturation,
                                                want_qkv=False)
        dt = None
        if drv is not None:
            dt = drv.flip(-1)  # back to increasing offsets
            if need_t and cfg.causal and cfg.saturation is not None:
                _saturate(dt, cfg)
            dt = dt.to(tvals.dtype)
            if tvals.shape[0] == 1 and dt.shape[0] != 1:
                dt = dt.sum(0, keepdim=True)
        return None, dq, dkr.flip(2), dvr.flip(2), dt


def _flash_backward(cfg: _RegionCfg, q, kr, vr, rv, has_bias: bool, out, lse, dout):
    """Exact ``dq, dk, dv`` (keys reversed) from the flash backward kernel, rectangle by rectangle."""
    _, flash_bwd = flash_ops()
    Nk = cfg.Nk
    dq = torch.zeros_like(q)
    dkr = torch.zeros_like(kr)
    dvr = torch.zeros_like(vr)
    for a0, a1, c0, c1, diag in cfg.rects:
        mask = None if rv is None or (not diag and not has_bias) else _hankel_mask(rv, cfg, a0, a1, c0, c1)
        ks = slice(Nk - c1, Nk - c0)
        gq, gk, gv = flash_bwd(dout[:, :, a0:a1], q[:, :, a0:a1], kr[:, :, ks], vr[:, :, ks],
                               out[:, :, a0:a1], lse[:, :, a0:a1], 0.0, False, attn_mask=mask, scale=cfg.scale)
        if len(cfg.rects) == 1:
            return gq, gk, gv
        dq[:, :, a0:a1] += gq
        dkr[:, :, ks] += gk
        dvr[:, :, ks] += gv
    return dq, dkr, dvr


def _hankel_backward(cfg: _RegionCfg, q, kr, vr, rv, out, lse, dout, *, band: int | None, want_qkv: bool):
    """Manual backward in query blocks, keys reversed, bias read through Hankel views.

    Per block: ``P = exp(bias + scale q k^T - lse)``, ``dS = P * (dO v^T - rowsum(dO * O))``,
    written straight into a skewed buffer whose column sums are the sums of
    ``dS`` along each offset (anti-diagonals in reversed key order). With
    ``want_qkv`` it also forms ``dq = scale dS k``, ``dk = scale dS^T q``,
    ``dv = P^T dO`` (5 matmuls in all, like a fused kernel). With ``band = M``
    (causal only) only keys within ``M - 1`` of each block's first query are visited.

    Returns ``(dq, dk_reversed, dv_reversed, d_rv)`` with ``d_rv`` the gradient of
    the reversed offset vector ``(H, L)`` (None entries when not requested).
    """
    B, H, Nq, Nk, qo, L = cfg.B, cfg.H, cfg.Nq, cfg.Nk, cfg.qo, cfg.L
    D, Dv = q.shape[-1], vr.shape[-1]
    dt = q.dtype
    delta = (dout * out).sum(-1)  # (B, H, Nq)
    drv = torch.zeros(H, L, dtype=dt, device=q.device)
    dq = torch.zeros_like(q) if want_qkv else None
    dkr = torch.zeros_like(kr) if want_qkv else None
    dvr = torch.zeros_like(vr) if want_qkv else None
    rows = cfg.rows
    G = max(1, min(H, cfg.heads_per_block))  # heads per block (cache-sized working set)
    Wmax = rows + Nk - 1
    skew = torch.empty(B * G, rows, Wmax, dtype=dt, device=q.device)
    for h0 in range(0, H, G):
        h1 = min(H, h0 + G)
        g = h1 - h0
        hs = slice(h0, h1)
        skew.zero_()
        last_cb = 0
        rvh = rv[hs] if rv.shape[0] > 1 else rv
        for a in range(0, Nq, rows):
            b = min(Nq, a + rows)
            R = b - a
            C = min(Nk, qo + b) if cfg.causal else Nk
            c0 = 0 if band is None else max(0, qo + a - band + 1)
            if c0 >= C:
                continue
            Cb = C - c0
            W = R + Cb - 1
            if Cb < last_cb:  # a narrower block would leave earlier entries inside its skewed rows
                skew[: B * g, :R, :W].zero_()
            last_cb = Cb
            ks = slice(Nk - C, Nk - c0)  # keys [c0, C) in reversed order
            d_top = C - 1 - qo - a
            base = L - 1 - (d_top - cfg.lo)
            mv = rvh.as_strided((1, rvh.shape[0], R, Cb), (0, rvh.stride(0) if rvh.shape[0] > 1 else 0, 1, 1),
                                rvh.storage_offset() + base)
            s = torch.empty(B, g, R, Cb, dtype=dt, device=q.device)
            torch.sub(mv, lse[:, hs, a:b, None], out=s)
            qb = q[:, hs, a:b].reshape(B * g, R, D)
            kb = kr[:, hs, ks].reshape(B * g, Cb, D)
            vb = vr[:, hs, ks].reshape(B * g, Cb, Dv)
            gb = dout[:, hs, a:b].reshape(B * g, R, Dv)
            zv = skewed(skew[: B * g], R, Cb, anti=True)  # dS laid out along anti-diagonals
            gq, gk, gv = block_backward(s.view(B * g, R, Cb), qb, kb, vb, gb,
                                        delta[:, hs, a:b, None].reshape(B * g, R, 1), cfg.scale, zv,
                                        want_qkv=want_qkv)
            if want_qkv:
                dvr[:, hs, ks] += gv.view(B, g, Cb, Dv)
                dq[:, hs, a:b] += gq.view(B, g, R, D)
                dkr[:, hs, ks] += gk.view(B, g, Cb, D)
            sums = skew[: B * g, :R, :W].sum(1).view(B, g, W).sum(0)  # (g, W): anti-diagonal m = t + j'
            drv[hs, base : base + W] += sums
    return dq, dkr, dvr, drv


def _saturate(dt: Tensor, cfg: _RegionCfg) -> None:
    """Band pass (causal, saturating scheme): put the exact total of offsets ``<= -M`` at ``-M``.

    Only the band blocks' partial sums landed on offsets ``<= -M``; since every row
    of ``dS`` sums to zero, their exact total is minus the sum over the rest.
    """
    M = cfg.saturation
    if -M < cfg.lo:
        return
    cut = -M - cfg.lo  # index of offset -M
    dt[:, : cut + 1] = 0
    dt[:, cut] = -dt[:, cut + 1 :].sum(-1)


def _masked_reversed(cfg: _RegionCfg, tvals: Tensor | None, q: Tensor) -> Tensor | None:
    """The offset vector in q's dtype, -inf at future offsets (causal), reversed; None if no mask is needed."""
    if tvals is None and not cfg.causal:
        return None
    if tvals is None:
        vals = torch.zeros(1, cfg.L, dtype=q.dtype, device=q.device)
    else:
        vals = tvals.detach().to(q.dtype)
    if cfg.causal:
        n_future = cfg.L - 1 + cfg.lo  # offsets 1 .. hi are the last entries
        if n_future > 0:
            vals = vals.clone()
            vals[:, cfg.L - n_future :] = float("-inf")
    return vals.flip(-1).contiguous()

