"""The ``"piecewise"`` engine: a bias piecewise linear in a normalised distance (FIRE), with the fused kernel.

Serves any scheme whose only term inside attention is a bias with the form of
:meth:`~relpos.encodings.base.Encoding.piecewise_bias` (``x = num(|i - j|) / den(i)``, then per head
``alpha[h, m] x + beta[h, m]`` on the segment ``m`` of ``x``), on CPU in float32/float64 with contiguous
positions, no key padding, ``Dv == D`` and the compiled kernels built (:mod:`relpos.kernels.fire`);
other calls take the ``"blocks"`` engine, which computes the same numbers. Calls whose queries all sit
where the bias is Toeplitz (FIRE below its threshold) take ``"regions"`` first.

Per call the scheme gives ``O(N)`` tensors, with autograd to its parameters outside the engine's
Function: ``num`` on the distances ``0 .. max |i - j|``, ``inv = 1 / den`` on the query positions, and the
segments. Forward, per block of query rows: the kernel writes the bias (causal keys ``-inf``) as the
fused flash kernel's additive mask. Backward, per block: the content logits ``scale q k^T`` (one
matmul), the kernel's pass adding the bias and subtracting the row's log-sum-exp, PyTorch's vectorised
``exp``, ``dP = dO v^T``, and the kernel's pass forming ``dS = P (dP - delta)`` that sums, in the same
walk over ``dS``, the gradients of ``alpha`` and ``beta`` per segment and of ``num`` and ``inv`` (for
the scheme's scale and threshold); then ``dv``, ``dq`` and ``dk`` from ``P`` and ``dS``. No
``(N, N)`` tensor and no per-pair segment index or hidden layer is formed; memory is ``O(N x rows)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from relpos.attention import Request
from relpos.attention.chunked import parts
from relpos.attention.chunked.kernels import compute_dtype, cpu_flash_ok, flash_ops, rows_per_block
from relpos.first_order import first_order
from relpos.kernels import fire as fire_kernel

NAME = "piecewise"


def eligible(req: Request) -> bool:
    """The bias is the scheme's only term and piecewise linear, served by the CPU flash kernel and ours."""
    enc = req.encoding
    return (enc.acts_on - {"embedding", "qk"} == {"bias"} and enc.implements("piecewise_bias")
            and cpu_flash_ok(req) and fire_kernel.usable(req.q))


def run(req: Request, q: Tensor, k: Tensor, tvals: Tensor | None, lo: int) -> Tensor:
    """``q, k``: rotated; ``tvals`` is unused (a Toeplitz call takes ``"regions"``)."""
    B, H, Nq, Nk, D = req.shape
    pw = req.encoding.piecewise_bias()
    dist = torch.arange(max(req.q_offset + Nq, Nk), device=q.device)  # every |i - j| of the call
    num = pw.num(dist)  # (T,) with autograd to the scheme's parameters
    inv = 1.0 / pw.den(req.qpos[0])  # (Nq,)
    alpha, beta, z = pw.segments()  # (H, K + 1) twice, (K,)
    return _PiecewiseFn.apply(_Cfg(req), q, k, req.v, num, inv, alpha, beta, z.detach())


class _Cfg:
    """Static description of one call."""

    def __init__(self, req: Request) -> None:
        B, H, Nq, Nk, D = req.shape
        self.B, self.H, self.Nq, self.Nk = B, H, Nq, Nk
        self.scale, self.causal, self.qo = req.scale, req.causal, req.q_offset
        self.cd = compute_dtype(req.q.dtype)
        # the backward holds two (B H, rows, keys) blocks at once (the logits and dP): both count in the budget
        # (measured at (1, 8, 2048, 64): 64 rows per block against 128 for one, 0.05-0.1x of SDPA faster)
        self.rows = rows_per_block(B * H, 2 * Nk, torch.finfo(self.cd).bits // 8)

    def max_block(self) -> int:
        """Entries per head of the largest ``(rows, keys)`` block."""
        return max((b - a) * C for a, b, C in self.blocks())

    def blocks(self):
        for a in range(0, self.Nq, self.rows):
            b = min(self.Nq, a + self.rows)
            yield a, b, (min(self.Nk, self.qo + b) if self.causal else self.Nk)


class _PiecewiseFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cfg: _Cfg, q, k, v, num, inv, alpha, beta, z):
        cd = cfg.cd
        flash, _ = flash_ops()
        B, H, Nq = cfg.B, cfg.H, cfg.Nq
        qc, kc, vc = q.to(cd), k.to(cd), v.to(cd)
        tabs = [t.detach().to(cd).contiguous() for t in (num, inv, alpha, beta, z)]
        nm, iv, al, be, zz = tabs
        out = torch.empty(B, H, Nq, vc.shape[-1], dtype=cd, device=q.device)
        lse = torch.empty(B, H, Nq, dtype=cd, device=q.device)
        buf = torch.empty(H * cfg.max_block(), dtype=cd, device=q.device)  # one buffer: no page faults per block
        for a, b, C in cfg.blocks():
            mask = buf[: H * (b - a) * C].view(H, b - a, C)
            t = parts.now()
            fire_kernel.bias_(mask, nm, iv[a:b], al, be, zz, cfg.qo + a, causal=cfg.causal)
            parts.add("kernel passes", t)
            t = parts.now()
            o, l = flash(qc[:, :, a:b], kc[:, :, :C], vc[:, :, :C], 0.0, False, attn_mask=mask[None], scale=cfg.scale)
            out[:, :, a:b] = o
            lse[:, :, a:b] = l
            parts.add("flash forward", t)
        ctx.cfg = cfg
        ctx.in_dtypes = tuple(t.dtype for t in (q, k, v, num, inv, alpha, beta))
        ctx.save_for_backward(qc, kc, vc, out, lse, *tabs)
        return out.to(q.dtype)

    @staticmethod
    @first_order
    def backward(ctx, dout):
        cfg: _Cfg = ctx.cfg
        qc, kc, vc, out, lse, nm, iv, al, be, zz = ctx.saved_tensors
        B, H = cfg.B, cfg.H
        M, D, Dv = B * H, qc.shape[-1], vc.shape[-1]
        do = dout.to(cfg.cd).contiguous()
        delta = (do * out).sum(-1)  # (B, H, Nq)
        dq, dk, dv = (torch.zeros(t.shape, dtype=t.dtype, device=t.device) for t in (qc, kc, vc))  # contiguous
        grads = tuple(torch.zeros(t.shape, dtype=torch.float64, device=t.device) for t in (al, be, nm, iv))
        floor = -708.0 if cfg.cd == torch.float64 else -87.0  # as kernels.exp_: no subnormal exp
        dq3, dk3, dv3 = dq.view(M, cfg.Nq, D), dk.view(M, cfg.Nk, D), dv.view(M, cfg.Nk, Dv)
        sbuf, pbuf = (qc.new_empty(M * cfg.max_block()) for _ in range(2))  # reused: no page faults per block
        for a, b, C in cfg.blocks():
            R = b - a
            qb = qc[:, :, a:b].reshape(M, R, D)
            kb = kc[:, :, :C].reshape(M, C, D)
            vb = vc[:, :, :C].reshape(M, C, Dv)
            gb = do[:, :, a:b].reshape(M, R, Dv)
            s = sbuf[: M * R * C].view(M, R, C)
            t = parts.now()
            torch.baddbmm(s, qb, kb.transpose(1, 2), beta=0.0, alpha=cfg.scale, out=s)
            parts.add("content matmuls", t)
            t = parts.now()
            fire_kernel.logits_(s, lse[:, :, a:b].reshape(M, R), nm, iv[a:b], al, be, zz, cfg.qo + a,
                                causal=cfg.causal, floor=floor)
            parts.add("kernel passes", t)
            t = parts.now()
            p = s.exp_()
            parts.add("exp", t)
            t = parts.now()
            dp = torch.bmm(gb, vb.transpose(1, 2), out=pbuf[: M * R * C].view(M, R, C))
            parts.add("content matmuls", t)
            t = parts.now()
            ds = fire_kernel.ds_(dp, p, delta[:, :, a:b].reshape(M, R), nm, iv[a:b], al, be, zz, cfg.qo + a,
                                 causal=cfg.causal, grads=(grads[0], grads[1], grads[2], grads[3][a:b]))
            parts.add("kernel passes", t)
            t = parts.now()
            dv3[:, :C].baddbmm_(p.transpose(1, 2), gb)  # p is zero on masked keys
            dq3[:, a:b].baddbmm_(ds, kb, alpha=cfg.scale)
            dk3[:, :C].baddbmm_(ds.transpose(1, 2), qb, alpha=cfg.scale)
            parts.add("content matmuls", t)
        q_dt, k_dt, v_dt, n_dt, i_dt, a_dt, b_dt = ctx.in_dtypes
        ga, gbeta, gn, gi = grads
        return (None, dq.to(q_dt), dk.to(k_dt), dv.to(v_dt), gn.to(n_dt), gi.to(i_dt), ga.to(a_dt),
                gbeta.to(b_dt), None)
