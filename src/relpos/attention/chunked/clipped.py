"""The ``"clipped"`` engine: clipped key (and value) tables, e.g. Shaw et al. 2018.

Serves any scheme whose :meth:`~relpos.encodings.base.Encoding.clipped_tables`
returns its tables (score ``scale q_i . aK[clip(j - i)]``, value term
``sum_j p_ij aV[clip(j - i)]``), on CPU in float32/float64 with contiguous
positions, no key padding and ``Dv == D``. Beyond the clip distance ``k`` every
pair uses the last table rows, so the far region is *plain* attention with keys
``k_j + aK[-k]`` and values ``v_j + aV[-k]`` (``q.(k + a) = q.k + q.a`` exactly):
one causal call of the fused kernel (``is_causal`` on the shifted diagonal)
forward and backward, whose key/value gradients also give the gradients of
those table rows. Only the band ``|j - i| < k`` (``N x k`` pairs) is formed
explicitly, as batched block matmuls read through skewed views.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from relpos.attention import Request
from relpos.attention.chunked.kernels import (
    cpu_flash_ok,
    flash_rects_bwd,
    flash_rects_fwd,
    knob,
    merge,
    offset_staircase,
)
from relpos.first_order import first_order

NAME = "clipped"


def eligible(req: Request) -> bool:
    """The scheme's terms are all clipped tables, served by the CPU flash kernel."""
    enc = req.encoding
    sites = enc.acts_on - {"embedding", "qk"}
    if not sites or not sites <= {"score", "value"} or not cpu_flash_ok(req):
        return False
    tables = enc.clipped_tables()
    return tables is not None and ("value" not in sites or tables.value is not None)


def run(req: Request, q: Tensor, k: Tensor, tvals: Tensor | None, lo: int) -> Tensor:
    """``q, k``: rotated (``tvals``/``lo`` are unused: the tables carry the positions)."""
    tables = req.encoding.clipped_tables()
    vt = tables.value if "value" in req.encoding.acts_on else None
    return _ClippedFn.apply(_ClippedCfg(req, tables.k), q, k, req.v, tables.key, vt)


class _ClippedCfg:
    """Static description of one call of the ``"shaw"`` engine.

    Offsets ``d = j - i``: far-left ``d <= -k`` (table row 0), band ``-k < d < kR``,
    far-right ``d >= kR`` (row ``2k``; bidirectional only), with ``kR = max(k, 1)``.
    """

    def __init__(self, req: Request, k: int) -> None:
        B, H, Nq, Nk, D = req.shape
        self.B, self.H, self.Nq, self.Nk = B, H, Nq, Nk
        self.scale, self.causal, self.qo = req.scale, req.causal, req.q_offset
        self.kk = int(k)
        self.kR = max(self.kk, 1)
        # the diagonal squares use the kernel's own causal mode, which skips masked blocks:
        # one square (plus one rectangle) is cheapest
        S = max(Nq, Nk) if knob("FORCE_ROWS") is None else knob("FORCE_ROWS")
        self.left = offset_staircase(Nq, Nk, self.qo - self.kk, S)
        hi = 0 if self.causal else self.kR - 1
        self.band = list(range(-self.kk + 1, hi + 1))  # offsets computed explicitly
        # far-right in flipped coordinates (t' = Nq-1-t, j' = Nk-1-j): j' <= t' + o2
        self.right = [] if self.causal else offset_staircase(Nq, Nk, Nk - Nq - self.qo - self.kR, S)



class _Band:
    """The band of offsets ``d in [dlo, dhi]`` (``j = qo + t + d``) as batched block matmuls.

    Queries are cut into blocks of ``R >= nb`` rows; block ``i`` meets the keys of
    one window of ``R + nb - 1`` consecutive (zero-padded) keys, so ``q_block @ window^T``
    is a small dense matrix whose diagonals ``[t, t + u]`` are the band. Skewed
    strided views read and write those diagonals without copies or index tensors.
    """

    def __init__(self, cfg: "_ClippedCfg", device) -> None:
        self.dlo, self.dhi = cfg.band[0], cfg.band[-1]
        self.nb = nb = self.dhi - self.dlo + 1
        self.R = R = max(nb, 32)
        self.nblk = -(-cfg.Nq // R)
        self.Wk = R + nb - 1
        self.Nq, self.Nk, self.qo = cfg.Nq, cfg.Nk, cfg.qo
        self.front = max(0, -(cfg.qo + self.dlo))  # zero keys before key 0
        self.start = cfg.qo + self.dlo + self.front  # padded index of block 0's first key
        self.total = max(self.start + (self.nblk - 1) * R + self.Wk, self.front + cfg.Nk)
        t = torch.arange(self.nblk * R, device=device)[:, None]
        j = t + cfg.qo + torch.arange(self.dlo, self.dhi + 1, device=device)[None, :]
        self.valid = (t < cfg.Nq) & (j >= 0) & (j < cfg.Nk)  # (nblk*R, nb)

    def pad_keys(self, x: Tensor) -> Tensor:
        """``(B, H, Nk, E)`` -> zero-padded ``(B, H, total, E)``."""
        B, H, _, E = x.shape
        out = x.new_zeros(B, H, self.total, E)
        out[:, :, self.front : self.front + self.Nk] = x
        return out

    def windows(self, xp: Tensor) -> Tensor:
        """Padded keys -> ``(B, H, nblk, Wk, E)`` windows (a strided view)."""
        w = xp[:, :, self.start :].unfold(2, self.Wk, self.R)[:, :, : self.nblk]  # (B, H, nblk, E, Wk)
        return w.transpose(-1, -2)

    def fold(self, dw: Tensor) -> Tensor:
        """Gradient of :meth:`windows`: ``(B, H, nblk, Wk, E)`` -> ``(B, H, Nk, E)``."""
        B, H, n, Wk, E = dw.shape
        R = self.R
        acc = dw.new_zeros(B, H, (n + 1) * R, E)
        acc[:, :, : n * R] += dw[:, :, :, :R].reshape(B, H, n * R, E)
        if Wk > R:
            acc.view(B, H, n + 1, R, E)[:, :, 1:, : Wk - R] += dw[:, :, :, R:]
        full = dw.new_zeros(B, H, max(self.total, self.start + (n + 1) * R), E)
        full[:, :, self.start : self.start + (n + 1) * R] += acc
        return full[:, :, self.front : self.front + self.Nk]

    def rows(self, x: Tensor) -> Tensor:
        """``(B, H, Nq, E)`` -> zero-padded blocks ``(B, H, nblk, R, E)``."""
        B, H, Nq, E = x.shape
        if self.nblk * self.R != Nq:
            x = torch.cat([x, x.new_zeros(B, H, self.nblk * self.R - Nq, E)], 2)
        return x.reshape(B, H, self.nblk, self.R, E)

    def diag(self, m: Tensor) -> Tensor:
        """Band view ``(B, H, nblk, R, nb)`` of a contiguous ``(B, H, nblk, R, Wk)`` block matrix."""
        B, H, n, R, Wk = m.shape
        st = m.stride()
        return m.as_strided((B, H, n, R, self.nb), (st[0], st[1], st[2], Wk + 1, 1), m.storage_offset())

    def embed(self, band: Tensor) -> Tensor:
        """``(B, H, nblk*R, nb)`` band values -> dense block matrices ``(B, H, nblk, R, Wk)``."""
        B, H = band.shape[:2]
        m = band.new_zeros(B, H, self.nblk, self.R, self.Wk)
        self.diag(m).copy_(band.view(B, H, self.nblk, self.R, self.nb))
        return m


def _band_logits(cfg: "_ClippedCfg", band: _Band, q: Tensor, kw: Tensor, A: Tensor) -> Tensor:
    """Band logits ``(B, H, nblk*R, nb)``, -inf where the key does not exist."""
    B, H = q.shape[:2]
    qb = band.rows(q)  # (B, H, nblk, R, D)
    m = torch.matmul(qb, kw.transpose(-1, -2))  # (B, H, nblk, R, Wk)
    s = band.diag(m).reshape(B, H, band.nblk * band.R, band.nb)
    idx = [d + cfg.kk for d in cfg.band]
    s = s + torch.matmul(band.rows(q).reshape(B, H, -1, q.shape[-1]), A[:, idx].transpose(-1, -2))
    s.mul_(cfg.scale)
    return s.masked_fill_(~band.valid, float("-inf"))


class _ClippedFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cfg: _ClippedCfg, q, k, v, a, b):
        B, H, Nq, Nk, qo, kk = cfg.B, cfg.H, cfg.Nq, cfg.Nk, cfg.qo, cfg.kk
        A = (a if a.dim() == 3 else a[None]).to(q.dtype)  # (H|1, 2k+1, D)
        Bt = None if b is None else (b if b.dim() == 3 else b[None]).to(q.dtype)
        out = torch.zeros(B, H, Nq, v.shape[-1], dtype=q.dtype, device=q.device)
        lse = torch.full((B, H, Nq), -math.inf, dtype=q.dtype, device=q.device)
        # far-left: keys k + aK[-k], values v + aV[-k]
        kL = k + A[None, :, 0, None, :]
        vL = v if Bt is None else v + Bt[None, :, 0, None, :]
        flash_rects_fwd(q, kL, vL, cfg.left, cfg.scale, out, lse, flip=False)
        if cfg.right:
            kR = k + A[None, :, 2 * kk, None, :]
            vR = v if Bt is None else v + Bt[None, :, 2 * kk, None, :]
            flash_rects_fwd(q.flip(2), kR.flip(2), vR.flip(2), cfg.right, cfg.scale, out, lse, flip=True)
        if cfg.band:
            band = _Band(cfg, q.device)
            kw = band.windows(band.pad_keys(k))
            s = _band_logits(cfg, band, q, kw, A)  # (B, H, nblk*R, nb)
            m = s.amax(-1, keepdim=True)
            m = torch.where(m == -math.inf, torch.zeros_like(m), m)
            p = (s - m).exp_()
            l = p.sum(-1)  # (B, H, nblk*R)
            vw = band.windows(band.pad_keys(v))  # (B, H, nblk, Wk, Dv)
            ob = torch.matmul(band.embed(p), vw).reshape(B, H, -1, v.shape[-1])
            if Bt is not None:
                ob += torch.matmul(p, Bt[:, [d + kk for d in cfg.band]])
            lb = torch.where(l > 0, m[..., 0] + l.log(), torch.full_like(l, -math.inf))
            ob = ob / l.clamp_min(torch.finfo(l.dtype).tiny)[..., None]
            merge(out, lse, slice(0, Nq), ob[:, :, :Nq], lb[:, :, :Nq])
        ctx.cfg = cfg
        ctx.save_for_backward(q, k, v, a, b, out, lse)
        return out

    @staticmethod
    @first_order
    def backward(ctx, dout):
        cfg: _ClippedCfg = ctx.cfg
        q, k, v, a, b, out, lse = ctx.saved_tensors
        B, H, Nq, Nk, qo, kk = cfg.B, cfg.H, cfg.Nq, cfg.Nk, cfg.qo, cfg.kk
        dout = dout.contiguous()
        A = (a if a.dim() == 3 else a[None]).to(q.dtype)
        Bt = None if b is None else (b if b.dim() == 3 else b[None]).to(q.dtype)
        dq = torch.zeros_like(q)
        dk = torch.zeros_like(k)
        dv = torch.zeros_like(v)
        dA = torch.zeros(H, 2 * kk + 1, q.shape[-1], dtype=q.dtype, device=q.device)
        dBt = None if Bt is None else torch.zeros(H, 2 * kk + 1, v.shape[-1], dtype=q.dtype, device=q.device)
        for rects, row, flip in ((cfg.left, 0, False), (cfg.right, 2 * kk, True)):
            if not rects:
                continue
            kX = k + A[None, :, row, None, :]
            vX = v if Bt is None else v + Bt[None, :, row, None, :]
            gk = torch.zeros_like(k)
            gv = torch.zeros_like(v)
            if flip:
                gq = torch.zeros_like(q)
                flash_rects_bwd(dout.flip(2), q.flip(2), kX.flip(2), vX.flip(2), out.flip(2), lse.flip(2),
                                 rects, cfg.scale, gq, gk, gv)
                gq, gk, gv = gq.flip(2), gk.flip(2), gv.flip(2)
                dq += gq
            else:
                flash_rects_bwd(dout, q, kX, vX, out, lse, rects, cfg.scale, dq, gk, gv)
            dk += gk
            dv += gv
            dA[:, row] += gk.sum((0, 2))  # d(k + aK[row]) / d aK[row] = identity for every key
            if dBt is not None:
                dBt[:, row] += gv.sum((0, 2))
        if cfg.band:
            band = _Band(cfg, q.device)
            Dq, Dv = q.shape[-1], v.shape[-1]
            kw = band.windows(band.pad_keys(k))
            vw = band.windows(band.pad_keys(v))
            s = _band_logits(cfg, band, q, kw, A)  # (B, H, nR, nb)
            lse_p = band.rows(lse[..., None]).reshape(B, H, -1, 1)
            p = (s - lse_p).exp_()  # -inf -> 0 (invalid keys, padded rows)
            dob = band.rows(dout)  # (B, H, nblk, R, Dv)
            bidx = [d + kk for d in cfg.band]
            dp = band.diag(torch.matmul(dob, vw.transpose(-1, -2))).reshape(p.shape)
            if Bt is not None:
                dp = dp + torch.matmul(dob.reshape(B, H, -1, Dv), Bt[:, bidx].transpose(-1, -2))
            delta = band.rows((dout * out).sum(-1, keepdim=True)).reshape(B, H, -1, 1)
            ds = p * (dp - delta)  # (B, H, nR, nb)
            dsm = band.embed(ds)  # (B, H, nblk, R, Wk)
            qb = band.rows(q)
            gq = torch.matmul(dsm, kw).reshape(B, H, -1, Dq)
            gq += torch.matmul(ds, A[:, bidx])
            dq += gq[:, :, :Nq].mul_(cfg.scale)
            dk += band.fold(torch.matmul(dsm.transpose(-1, -2), qb)).mul_(cfg.scale)
            dv += band.fold(torch.matmul(band.embed(p).transpose(-1, -2), dob))
            qflat = qb.reshape(B, H, -1, Dq)
            dA[:, bidx] += torch.einsum("bhtu,bhtd->hud", ds, qflat).mul_(cfg.scale)
            if dBt is not None:
                dBt[:, bidx] += torch.einsum("bhtu,bhtd->hud", p, dob.reshape(B, H, -1, Dv))
        da = dA.to(a.dtype) if a.dim() == 3 else dA.sum(0).to(a.dtype)
        db = None
        if b is not None:
            db = dBt.to(b.dtype) if b.dim() == 3 else dBt.sum(0).to(b.dtype)
        return None, dq, dk, dv, da, db

