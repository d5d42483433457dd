"""The ``"blocks"`` engine: query blocks against all (causally visible) keys.

Serves every request (FIRE and other non-Toeplitz biases, DeBERTa, CoPE, FoX,
explicit positions, key padding, an ``attn_mask``, half precision, any device, ``Dv != D``). Each
block forms its logits, softmax and output explicitly, calling the scheme's own
``bias``/``score``/``value`` on just that block; on CPU, blocks whose terms are additive (a bias,
a score that does not read the content logits; no value term, no padding) use the fused flash kernel
for the forward, the terms as its additive mask. The backward recomputes each block and
obtains the scheme's gradients by differentiating the recomputed term once.
Fully masked rows give zeros, never NaN.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from relpos.attention import Request
from relpos.encodings.base import Encoding, ScoreState
from relpos.attention.chunked.kernels import (
    add_grads,
    compute_dtype,
    exp_,
    flash_ops,
    rows_per_block,
    toeplitz_block,
)
from relpos.first_order import first_order
from relpos.kernels.toeplitz import diag_sums

NAME = "blocks"

#: Keys per tile of the backward where a block's keys exceed it (terms local to each pair; see
#: ``_BlockFn.backward``): a (B H, 128, 1024) float32 tile stays nearer the cache than a whole row of keys.
#: The backward's content passes alone at (8 heads, 128 rows, 2048 keys, D = 64) took 0.72x the time of whole
#: rows in tiles of 1024 keys (0.75x in tiles of 512); DeBERTa at N = 2048, forward and backward, 0.96x
#: bidirectional and 0.95-1.13x causal in two A/Bs beside a running sweep (`benchmarks/README.md`).
KEY_TILE = 1024


def eligible(req: Request) -> bool:
    """Always: this engine is the general case."""
    return True


def _leaf_tensors(t: Tensor) -> list[Tensor]:
    """Leaf tensors requiring grad that ``t`` was computed from (walks the autograd graph)."""
    out, seen, stack = [], set(), [t.grad_fn] if t.grad_fn is not None else []
    ids = set()
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        var = getattr(fn, "variable", None)
        if var is not None:
            if id(var) not in ids:
                ids.add(id(var))
                out.append(var)
            continue
        stack.extend(f for f, _ in fn.next_functions)
    return out


def _probe_leaves(req: Request, q: Tensor, k: Tensor, gen_bias: bool, score: bool) -> list[Tensor]:
    """Leaves the scheme's per-block terms depend on (found on a 1 x 1 probe); ``score=False``
    when the score's dependencies arrive as a per-call :class:`~relpos.encodings.base.ScoreState`."""
    enc = req.encoding
    leaves: list[Tensor] = []
    with torch.enable_grad():
        qp, kp = req.qpos[:, :1], req.kpos[:, :1]
        outs = []
        if gen_bias:
            outs.append(enc.bias(qp, kp))
        if score and "score" in enc.acts_on:
            outs.append(enc.score(q[:, :, :1].detach(), k[:, :, :1].detach(), qp, kp, req.scale))
        if "value" in enc.acts_on:
            B, H = q.shape[:2]
            p = torch.ones(B, H, 1, 1, dtype=compute_dtype(q.dtype), device=q.device)
            outs.append(enc.value(p, qp, kp))
    for o in outs:
        if isinstance(o, Tensor) and o.requires_grad:
            for leaf in _leaf_tensors(o):
                if all(leaf is not x for x in leaves):
                    leaves.append(leaf)
    return leaves



def run(req: Request, q: Tensor, k: Tensor, tvals: Tensor | None, lo: int) -> Tensor:
    """``q, k``: rotated; ``tvals (H, L)``: the Toeplitz bias on offsets ``lo..`` or None."""
    enc = req.encoding
    gen_bias = "bias" in enc.acts_on and tvals is None
    # a score with per-call state (projected tables): built once here, autograd to the parameters
    # outside the Function, each block reads it (ScoreState); its gradient comes back once
    # causal on contiguous positions: the mask hides every pair with kpos > qpos, the state need not cover them
    state = (enc.score_state(q, k, req.qpos, req.kpos, req.scale, past_only=req.causal and req.contiguous)
             if "score" in enc.acts_on else None)
    leaves = (_probe_leaves(req, q, k, gen_bias, state is None)
              if (gen_bias or enc.acts_on & {"score", "value"}) else [])
    cfg = _BlockCfg(req, lo, gen_bias, len(leaves), state)
    return _BlockFn.apply(cfg, q, k, req.v, tvals, *leaves, *(state.tensors if state is not None else ()))


class _BlockCfg:
    """Static description of one call of the ``"blocks"`` engine."""

    use_fused = True

    def __init__(self, req: Request, lo: int, gen_bias: bool, n_leaves: int, state=None) -> None:
        enc = req.encoding
        B, H, Nq, Nk, D = req.shape
        self.enc = enc
        self.B, self.H, self.Nq, self.Nk = B, H, Nq, Nk
        self.Dv = req.v.shape[-1]
        self.scale = req.scale
        self.causal = req.causal
        self.qo = req.q_offset
        self.qpos, self.kpos = req.qpos, req.kpos
        self.kpm = req.key_padding_mask
        self.am = req.attn_mask  # (B|1, H|1, Nq, Nk) bool or None
        self.may_be_empty = self.kpm is not None or self.am is not None  # rows with no allowed key
        self.lo = lo
        self.gen_bias = gen_bias
        self.has_score = "score" in enc.acts_on
        self.has_value = "value" in enc.acts_on
        self.n_leaves = n_leaves
        self.state = None if state is None else ScoreState((), state.axes, state.meta)  # tensors: inputs after the leaves
        # the scheme adds its state's gradient itself (Encoding.score_with_backward overridden)
        self.manual_score_grad = state is not None and (
            type(enc).score_with_backward is not Encoding.score_with_backward)
        # the score reads the block's content logits (CoPE's gates): s holds exactly scale q k^T when the
        # scheme adds its term, and the term's gradient to them joins ds before dq and dk
        self.reads_logits = self.manual_score_grad and enc.reads_logits
        if self.reads_logits and "bias" in enc.acts_on:
            raise NotImplementedError(f"scheme {enc.name!r}: a score that reads the content logits beside a "
                                      "bias is not served by the blocks engine")
        self.cd = compute_dtype(req.q.dtype)
        itemsize = torch.finfo(self.cd).bits // 8
        self.rows = rows_per_block(B * H, Nk, itemsize)
        # additive terms (a bias, a score that does not read the content logits) without padding: the
        # forward can pass them to the fused CPU kernel as its additive mask
        # (``_BlockCfg.use_fused``, a testing hook: False sends every block through the explicit forward)
        self.fused_forward = (
            _BlockCfg.use_fused and not self.has_value and not self.reads_logits and not self.may_be_empty
            and self.Dv == D and req.q.device.type == "cpu" and flash_ops() is not None
        )

    def blocks(self):
        for a in range(0, self.Nq, self.rows):
            b = min(self.Nq, a + self.rows)
            C = min(self.Nk, self.qo + b) if self.causal else self.Nk
            yield a, b, C

    def tiles(self, tile: int | None):
        """``(a, b, c0, C)``: each block's rows ``[a, b)`` with its keys ``[0, C)`` whole, or in tiles ``[c0, C)``
        of ``tile`` keys where a block has more."""
        for a, b, C in self.blocks():
            step = C if tile is None or C <= tile else tile
            for c0 in range(0, C, step):
                yield a, b, c0, min(C, c0 + step)


def _mask_block(s: Tensor, cfg: _BlockCfg, a: int, b: int, C: int, c0: int = 0) -> None:
    """Set masked logits of block rows ``[a, b)`` x keys ``[c0, C)`` (``s``'s columns) to -inf, in place."""
    if cfg.causal:
        first = max(cfg.qo + a + 1, c0)  # row a sees keys <= qo + a
        if first < C:
            t = torch.arange(a, b, device=s.device)[:, None] + cfg.qo
            j = torch.arange(first, C, device=s.device)[None, :]
            s[..., first - c0:].masked_fill_(j > t, float("-inf"))
    if cfg.kpm is not None:
        s.masked_fill_(~cfg.kpm[:, None, None, c0:C], float("-inf"))
    if cfg.am is not None:
        s.masked_fill_(~cfg.am[:, :, a:b, c0:C], float("-inf"))


def _block_base(cfg: _BlockCfg, qb: Tensor, kr: Tensor, tvals: Tensor | None, a: int, b: int, C: int,
                sub: Tensor | None = None) -> Tensor:
    """``scale * q k^T + toeplitz bias [- sub]`` for one block, ``(B, H, R, C)`` in the compute dtype."""
    B, H, R = cfg.B, cfg.H, b - a
    s = torch.empty(B, H, R, C, dtype=cfg.cd, device=qb.device)
    q3 = qb.reshape(B * H, R, qb.shape[-1])
    k3 = kr.reshape(B * H, C, kr.shape[-1]).transpose(1, 2)
    if tvals is not None:
        tb = toeplitz_block(tvals, cfg.lo, -(cfg.qo + b - 1), R, C)  # (H, R, C)
        if sub is not None:
            torch.sub(tb, sub, out=s)
        else:
            s.copy_(tb)
        s.view(B * H, R, C).baddbmm_(q3, k3, alpha=cfg.scale)
    else:
        torch.baddbmm(s.view(B * H, R, C), q3, k3, beta=0.0, alpha=cfg.scale, out=s.view(B * H, R, C))
        if sub is not None:
            s.sub_(sub)
    return s


def _add_matmul(out: Tensor, x: Tensor, y: Tensor, alpha: float = 1.0) -> None:
    """``out += alpha * x @ y`` over ``(B, H)`` batches of views, in place (one ``baddbmm_``: no product temporary
    and no separate add pass) where ``out``'s batch dims merge, else through a temporary."""
    B, H = out.shape[:2]
    try:
        o3 = out.view(B * H, *out.shape[2:])
    except RuntimeError:  # pragma: no cover - the engine's gradient buffers are contiguous (B, H, N, D)
        out += torch.matmul(x, y).mul_(alpha)
        return
    o3.baddbmm_(x.reshape(B * H, *x.shape[2:]), y.reshape(B * H, *y.shape[2:]), alpha=alpha)


def _score(cfg: _BlockCfg, st, qb: Tensor, kr: Tensor, qp: Tensor, kp: Tensor) -> Tensor:
    """The scheme's score on one block: from the per-call state (already sliced) when the scheme has one."""
    if cfg.state is None:
        return cfg.enc.score(qb, kr, qp, kp, cfg.scale)
    return cfg.enc.score_with(ScoreState(tuple(st), cfg.state.axes, cfg.state.meta), qp, kp)


def _score_into(cfg: _BlockCfg, st, qb: Tensor, kr: Tensor, qp: Tensor, kp: Tensor, s: Tensor) -> object:
    """``s += the scheme's score on one block``, in place where the scheme can (:meth:`Encoding.score_into`);
    returns the scheme's context for :meth:`Encoding.score_with_backward`."""
    if cfg.state is None:
        s += cfg.enc.score(qb, kr, qp, kp, cfg.scale).to(s.dtype)
        return None
    return cfg.enc.score_into(ScoreState(tuple(st), cfg.state.axes, cfg.state.meta), qp, kp, s)


def _block_state(cfg: _BlockCfg, tensors, a: int, b: int, C: int, c0: int = 0) -> tuple:
    """The per-call score state's tensors (or their gradients) sliced to one block, keys ``[c0, C)`` (views)."""
    if cfg.state is None:
        return ()
    return cfg.state.block(tensors, a, b, C, c0).tensors



class _BlockFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cfg: _BlockCfg, q, k, v, tvals, *rest):
        enc, cd = cfg.enc, cfg.cd
        leaves, st = rest[: cfg.n_leaves], rest[cfg.n_leaves :]
        qc, kc, vc = q.to(cd), k.to(cd), v.to(cd)
        tv = None if tvals is None else tvals.to(cd)
        B, H, Nq = cfg.B, cfg.H, cfg.Nq
        out = torch.empty(B, H, Nq, cfg.Dv, dtype=cd, device=q.device)
        lse = torch.empty(B, H, Nq, dtype=cd, device=q.device)
        tiny = torch.finfo(cd).tiny
        fused = flash_ops() if cfg.fused_forward else None
        for a, b, C in cfg.blocks():
            qb, kr, vr = qc[:, :, a:b], kc[:, :, :C], vc[:, :, :C]
            qp, kp = cfg.qpos[:, a:b], cfg.kpos[:, :C]
            if fused is not None:
                # position term (+ causal -inf) as the fused kernel's additive mask
                owned = True  # whether ``mask`` is this block's own tensor (may be written in place)
                if tv is not None:
                    mask, owned = toeplitz_block(tv, cfg.lo, -(cfg.qo + b - 1), b - a, C)[None], False  # (1, H, R, C)
                elif cfg.gen_bias:
                    mask = enc.bias(qp, kp).to(cd)  # (B|1, H, R, C)
                else:  # no bias: the score alone, or only the causal mask
                    mask = None
                if cfg.has_score:  # the score joins the mask: (B, H, R, C), a new tensor
                    sc = _score(cfg, _block_state(cfg, st, a, b, C), qb, kr, qp, kp).to(cd)
                    mask, owned = (sc if mask is None else sc.add_(mask)), True
                elif mask is None:
                    mask = torch.zeros(1, 1, b - a, C, dtype=cd, device=q.device)
                if cfg.causal and cfg.qo + a + 1 < C:
                    mask = mask if owned else mask.clone()
                    _mask_block(mask, cfg, a, b, C)
                o, l = fused[0](qb, kr, vr, 0.0, False, attn_mask=mask, scale=cfg.scale)
                out[:, :, a:b] = o
                lse[:, :, a:b] = l
                continue
            s = _block_base(cfg, qb, kr, tv, a, b, C)
            if cfg.gen_bias:
                s += enc.bias(qp, kp).to(cd)
            if cfg.has_score:
                _score_into(cfg, _block_state(cfg, st, a, b, C), qb, kr, qp, kp, s)
            _mask_block(s, cfg, a, b, C)
            m = s.amax(-1, keepdim=True)
            empty = m == -math.inf  # rows with no allowed key
            m = torch.where(empty, torch.zeros_like(m), m)
            p = exp_(s.sub_(m))
            if cfg.may_be_empty:
                p.masked_fill_(empty, 0.0)
            l = p.sum(-1, keepdim=True)  # (B, H, R, 1)
            if cfg.has_value:
                p.div_(l.clamp_min(tiny))
                o = p @ vr + enc.value(p, qp, kp).to(cd)
            else:
                o = (p @ vr).div_(l.clamp_min(tiny))
            out[:, :, a:b] = o
            lse[:, :, a:b] = torch.where(l > 0, m + l.log(), torch.full_like(l, math.inf)).squeeze(-1)
        ctx.cfg = cfg
        ctx.in_dtypes = (q.dtype, k.dtype, v.dtype)
        ctx.tvals_dtype = None if tvals is None else tvals.dtype
        ctx.save_for_backward(qc, kc, vc, tv, out, lse, *leaves, *st)
        return out.to(q.dtype)

    @staticmethod
    @first_order
    def backward(ctx, dout):
        cfg: _BlockCfg = ctx.cfg
        enc, cd = cfg.enc, cfg.cd
        qc, kc, vc, tv, out, lse, *rest = ctx.saved_tensors
        leaves, st = rest[: cfg.n_leaves], rest[cfg.n_leaves :]
        dstate = [torch.zeros_like(t) for t in st]  # gradient of the per-call score state
        need_q, need_k, need_v = ctx.needs_input_grad[1:4]
        need_t = ctx.needs_input_grad[4]
        do = dout.to(cd)
        dq = torch.zeros_like(qc)
        dk = torch.zeros_like(kc)
        dv = torch.zeros_like(vc)
        dtv = torch.zeros_like(tv) if (tv is not None and need_t) else None
        dleaves: list = [None] * len(leaves)
        delta = (do * out).sum(-1)  # (B, H, Nq)
        B, H = cfg.B, cfg.H
        # keys in tiles where every term is local to a pair (a bias of positions, a pairwise score; no Toeplitz
        # gradient, no value term): the tile's logits, probabilities and dS stay in cache across their passes
        local = not cfg.has_score or (enc.pairwise_score and not cfg.reads_logits)
        tile = KEY_TILE if (tv is None and not cfg.has_value and local) else None
        for a, b, c0, C in cfg.tiles(tile):
            R = b - a
            qb, kr, vr = qc[:, :, a:b], kc[:, :, c0:C], vc[:, :, c0:C]
            qp, kp = cfg.qpos[:, a:b], cfg.kpos[:, c0:C]
            dob = do[:, :, a:b]
            s = _block_base(cfg, qb, kr, tv, a, b, C - c0)
            sc = qleaf = kleaf = bb = sctx = None
            if cfg.gen_bias:
                with torch.enable_grad():  # evaluated once: its value now, its gradient below
                    bb = enc.bias(qp, kp)  # (B|1, H, R, C)
                s += bb.detach().to(cd)
            if cfg.has_score and cfg.manual_score_grad:  # the scheme writes the state's gradient itself
                sctx = _score_into(cfg, _block_state(cfg, st, a, b, C, c0), qb, kr, qp, kp, s)
            elif cfg.has_score:
                with torch.enable_grad():
                    qleaf = qb.detach().requires_grad_(True)
                    kleaf = kr.detach().requires_grad_(True)
                    stl = [t.detach().requires_grad_(True) for t in _block_state(cfg, st, a, b, C, c0)]
                    sc = _score(cfg, stl, qleaf, kleaf, qp, kp)
                s += sc.detach().to(cd)
            _mask_block(s, cfg, a, b, C, c0)
            lb = lse[:, :, a:b, None]
            p = exp_(s.sub_(lb))  # normalised probabilities
            if cfg.may_be_empty:
                p.masked_fill_(lb == math.inf, 0.0)  # rows with no allowed key
            dp = torch.matmul(dob, vr.transpose(-1, -2))  # (B, H, R, C)
            if cfg.has_value:
                with torch.enable_grad():
                    pleaf = p.detach().requires_grad_(True)
                    val = enc.value(pleaf, qp, kp)
                    g = torch.autograd.grad(val, [pleaf, *leaves], dob.to(val.dtype), allow_unused=True)
                dp += g[0].to(cd)
                add_grads(dleaves, g[1:])
                d_row = (p * dp).sum(-1, keepdim=True)
            else:
                d_row = delta[:, :, a:b, None]
            if need_v:
                _add_matmul(dv[:, :, c0:C], p.transpose(-1, -2), dob)
            ds = dp.sub_(d_row).mul_(p)  # (B, H, R, C)
            if cfg.reads_logits:  # ds += the term's gradient to the content logits, before dq and dk read it
                enc.score_with_backward(cfg.state.block(dstate, a, b, C), qp, kp, ds, sctx)  # (never tiled)
            if need_q:
                _add_matmul(dq[:, :, a:b], ds, kr, cfg.scale)
            if need_k:
                _add_matmul(dk[:, :, c0:C], ds.transpose(-1, -2), qb, cfg.scale)
            if dtv is not None:  # (never tiled: c0 = 0)
                d_min = -(cfg.qo + b - 1)
                s0 = d_min - cfg.lo
                dtv[:, s0 : s0 + R + C - 1] += diag_sums(ds.sum(0))
            if bb is not None and bb.requires_grad:
                gb = ds if bb.shape[0] == B else ds.sum(0, keepdim=True)
                g = torch.autograd.grad(bb, leaves, gb.to(bb.dtype), allow_unused=True)
                add_grads(dleaves, g)
            if cfg.has_score and cfg.manual_score_grad and not cfg.reads_logits:
                enc.score_with_backward(cfg.state.block(dstate, a, b, C, c0), qp, kp, ds, sctx)
            if sc is not None:
                g = torch.autograd.grad(sc, [qleaf, kleaf, *leaves, *stl], ds.to(sc.dtype), allow_unused=True)
                if g[0] is not None and need_q:
                    dq[:, :, a:b] += g[0].to(cd)
                if g[1] is not None and need_k:
                    dk[:, :, c0:C] += g[1].to(cd)
                add_grads(dleaves, g[2 : 2 + len(leaves)])
                for acc, blk in zip(_block_state(cfg, dstate, a, b, C, c0), g[2 + len(leaves) :]):
                    if blk is not None:
                        acc += blk
        q_dt, k_dt, v_dt = ctx.in_dtypes
        grads = [
            None,
            dq.to(q_dt) if need_q else None,
            dk.to(k_dt) if need_k else None,
            dv.to(v_dt) if need_v else None,
            None if dtv is None else dtv.to(ctx.tvals_dtype),
        ]
        for i, g in enumerate(dleaves):
            if g is not None:
                g = g.to(leaves[i].dtype)
            grads.append(g)
        grads += [g.to(st[i].dtype) for i, g in enumerate(dstate)]
        return tuple(grads)

