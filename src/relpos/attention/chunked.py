"""Memory-efficient attention for every scheme (``impl="chunked"``).

Extra memory grows with ``N x block`` (or ``N x D``), never ``N x N``, in the
forward *and* the backward pass: every engine here is a
:class:`torch.autograd.Function` that saves only ``q, k, v``, the output and one
log-sum-exp per row, and recomputes position terms block by block in backward.
Gradients reach every learned tensor of the scheme (tables, slopes, MLPs, and
tensors a scheme borrows from the model, such as DeBERTa's bound projections).

The implementation picks one of five internal engines per call (see
:func:`engine_for`; the choice is logged at DEBUG level under ``relpos.attention``).
Each serves the whole request exactly -- they are strategies of this one
implementation, not fallbacks to another.

``"sdpa"``
    No position term inside attention (NoPE, RoPE and xPos after rotating q
    and k): :func:`torch.nn.functional.scaled_dot_product_attention`, which is
    already a fused, memory-efficient kernel.

``"regions"`` (CPU, float32/float64, contiguous positions, no key padding)
    Toeplitz bias schemes (ALiBi, Sandwich, KERPLE, T5, DPB, ...). The bias of
    offset ``d = j - i`` is evaluated once on the ``Nq + Nk - 1`` distinct offsets.
    With the keys stored in *reverse* order, the bias of any rectangle of
    (query, key) pairs is a Hankel matrix: a zero-copy strided view of the
    reversed offset vector (strides ``(1, 1)``), which PyTorch's fused CPU flash
    kernel accepts as ``attn_mask``. Causal attention is cut into a staircase of
    rectangles (large rectangles below the diagonal, small masked squares on
    it) so the masked half is skipped; the partial results are merged with
    their log-sum-exps, and the backward pass calls the flash backward kernel on
    each rectangle with the *global* output and log-sum-exp, which gives exact
    partial gradients. A learned bias then needs ``dL/dbias`` per offset, i.e.
    the diagonal sums of ``dS = P * (dP - rowsum(dO * O))``:

    * for schemes constant beyond a distance ``M`` (T5: ``max_distance``) under
      causal masking, only the band ``-M < d <= 0`` is recomputed; the
      saturated offsets get minus the band's total, because every row of ``dS``
      sums to zero;
    * otherwise the backward is one manual pass over query blocks (the same five
      matmuls as a fused kernel), reading the bias through Hankel views and
      writing ``dS`` into a skewed buffer whose column sums are the per-offset
      gradients.

``"shaw"`` (Shaw's key and value tables; same conditions as ``"regions"``)
    Beyond the clip distance ``k`` every pair uses the last table rows, so the
    far region is *plain* attention with keys ``k_j + aK[-k]`` and values
    ``v_j + aV[-k]`` (``q.(k + a) = q.k + q.a`` exactly): one causal call of the
    fused kernel (``is_causal`` on the shifted diagonal) forward and backward,
    whose key/value gradients also give the gradients of those table rows. Only
    the band ``|j - i| < k`` (``N x k`` pairs) is formed explicitly, as batched
    block matmuls read through skewed views.

``"relkey"`` (Transformer-XL; same conditions)
    ``u . k_j`` is folded into the queries (``(q + u) . k``); the position term
    ``(q + v) . W_R R_{i-j}`` is one ``(rows, Nq + Nk)`` matmul per query block
    against ``W_R R`` on the distinct offsets, and the ``(rows, keys)`` term is
    a zero-copy strided view of it, passed to the fused kernel as its mask. The
    backward recomputes it and reads/writes ``dS`` through the same skew.

``"blocks"`` (everything else: FIRE and other non-Toeplitz biases, DeBERTa,
CoPE, FoX, explicit positions, key padding, half precision, other devices)
    Query blocks against all (causally visible) keys; each block forms its
    logits, softmax and output explicitly, calling the scheme's own
    ``bias``/``score``/``value`` on just that block (FIRE's MLP through
    :func:`relpos.attention.dense.fast_bias`, its exact piecewise-linear form).
    Bias-only blocks use the fused kernel for the forward. Backward recomputes
    each block and obtains the scheme's gradients by differentiating the
    recomputed term once. Fully masked rows give zeros, never NaN.

Numerics: probabilities are formed with :func:`_exp_`, which clamps logits at
-87 first: PyTorch's vectorised ``exp`` is ~100x slower on inputs whose result
is subnormal. Subnormals elsewhere (matmuls on tiny probabilities, e.g. ALiBi
far keys) are a CPU-wide cost that ``torch.set_flush_denormal(True)`` removes;
``relpos bench`` sets it (see ``benchmarks/README.md``).

Block sizes: see :data:`BLOCK_BYTES` (tests lower it to exercise many blocks).
"""

from __future__ import annotations

import logging
import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from relpos.attention import Request
from relpos.attention.dense import fast_bias, rotated_qk
from relpos.distance import offsets_range

__all__ = ["supports", "run", "engine_for", "saturation_distance", "BLOCK_BYTES"]

log = logging.getLogger("relpos.attention")

#: Target size in bytes of one block of logits ``(B, H, rows, keys)`` in the
#: ``"blocks"`` engine and of the recomputation passes of ``"regions"``.
BLOCK_BYTES = 8 * 2**20
#: Minimum / maximum query rows per block.
MIN_ROWS, MAX_ROWS = 16, 1024
#: Size of the masked diagonal squares of the causal staircase (``"regions"``).
DIAG_ROWS = 256
#: Working set of one block of the ``"regions"`` backward passes: heads per block and
#: target bytes of one ``(B, heads, rows, keys)`` tensor (small enough to stay in cache).
HEADS_PER_BLOCK = 2
HANKEL_BLOCK_BYTES = 2 * 2**20
#: Testing hook: force this many query rows per block (None = automatic).
FORCE_ROWS: int | None = None


def supports(req: Request) -> str | None:
    """Every scheme, mode and device is served (``"blocks"`` covers all)."""
    return None


# ----------------------------------------------------------------------------- helpers


def _flash_ops():
    """PyTorch's fused CPU flash-attention forward/backward ops, or None."""
    ops = torch.ops.aten
    try:
        return ops._scaled_dot_product_flash_attention_for_cpu, ops._scaled_dot_product_flash_attention_for_cpu_backward
    except (AttributeError, RuntimeError):  # pragma: no cover - older/newer torch
        return None


def _rows_per_block(bh: int, keys: int, itemsize: int) -> int:
    if FORCE_ROWS is not None:
        return int(FORCE_ROWS)
    r = BLOCK_BYTES // max(1, bh * keys * itemsize)
    r = max(MIN_ROWS, min(MAX_ROWS, int(r)))
    return r


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def saturation_distance(enc) -> int | None:
    """Distance ``M`` beyond which a Toeplitz bias is one constant per side, or None.

    ``relative_bias(d)`` must be the *same function of the parameters* for every
    ``d <= -M`` (and for every ``d >= M``). A scheme may declare it with a
    ``saturation_distance()`` method; T5 is known here (its buckets saturate at
    ``max_distance``).
    """
    hook = getattr(enc, "saturation_distance", None)
    if callable(hook):
        m = hook()
        return None if m is None else int(m)
    if getattr(enc, "name", "") == "t5" and hasattr(enc, "max_distance"):
        return int(enc.max_distance)
    return None


def _toeplitz_block(vals: Tensor, lo: int, d_min: int, rows: int, cols: int) -> Tensor:
    """``out[..., t, j] = vals[..., (d_min + rows - 1) + j - t - lo]``: a ``(..., rows, cols)`` copy.

    ``vals[..., r]`` holds the term of offset ``lo + r``; the block covers
    offsets ``d_min .. d_min + rows + cols - 2`` with offset ``d_min`` at the
    bottom-left corner.
    """
    s = d_min - lo
    seg = vals[..., s : s + rows + cols - 1]
    return seg.unfold(-1, cols, 1).flip(-2)  # row r of unfold is t = rows-1-r


def _diag_sums(ds: Tensor) -> Tensor:
    """Sums of ``ds (H, R, C)`` along diagonals: ``out[h, m] = sum_{j - t + R - 1 = m} ds[h, t, j]``."""
    H, R, C = ds.shape
    W = R + C - 1
    z = ds.new_zeros(H, R, W)
    # write row t at columns (R-1-t) .. (R-1-t+C-1): flat index t*W + (j - t + R - 1)
    z.as_strided((H, R, C), (R * W, W - 1, 1), z.storage_offset() + R - 1).copy_(ds)
    return z.sum(1)


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


def _probe_leaves(req: Request, q: Tensor, k: Tensor, gen_bias: bool) -> list[Tensor]:
    """Leaves the scheme's per-block terms depend on (found on a 1 x 1 probe)."""
    enc = req.encoding
    leaves: list[Tensor] = []
    with torch.enable_grad():
        qp, kp = req.qpos[:, :1], req.kpos[:, :1]
        outs = []
        if gen_bias:
            outs.append(fast_bias(enc, qp, kp))
        if "score" in enc.acts_on:
            outs.append(enc.score(q[:, :, :1].detach(), k[:, :, :1].detach(), qp, kp, req.scale))
        if "value" in enc.acts_on:
            B, H = q.shape[:2]
            p = torch.ones(B, H, 1, 1, dtype=_compute_dtype(q.dtype), device=q.device)
            outs.append(enc.value(p, qp, kp))
    for o in outs:
        if isinstance(o, Tensor) and o.requires_grad:
            for leaf in _leaf_tensors(o):
                if all(leaf is not x for x in leaves):
                    leaves.append(leaf)
    return leaves


def _exp_(t: Tensor) -> Tensor:
    """In-place ``exp`` that first raises inputs to the smallest normal float's log.

    PyTorch's vectorised ``exp`` takes a slow path (about 100x) for inputs whose
    result is subnormal or zero, which masked (-inf) and far-away logits are.
    ``exp(-87)`` is ``1.6e-38`` for float32 (``exp(-708)`` for float64): such
    entries add nothing a float can resolve, and fully masked rows are zeroed
    explicitly by the callers.
    """
    floor = -708.0 if t.dtype == torch.float64 else -87.0
    return t.clamp_min_(floor).exp_()


def _add_grads(acc: list, grads) -> None:
    for i, g in enumerate(grads):
        if g is None:
            continue
        acc[i] = g if acc[i] is None else acc[i] + g


# ------------------------------------------------------------------ engine selection


def _toeplitz_terms(req: Request) -> bool:
    enc = req.encoding
    return "bias" in enc.acts_on and enc.toeplitz and req.contiguous


def engine_for(req: Request) -> str:
    """Which internal engine :func:`run` uses: ``"sdpa"``, ``"regions"``, ``"shaw"``, ``"relkey"`` or ``"blocks"``."""
    enc = req.encoding
    sites = enc.acts_on - {"embedding", "qk"}
    if not sites and req.key_padding_mask is None:
        return "sdpa" if (not req.causal or (req.q_offset == 0 and req.q.shape[2] == req.k.shape[2])) else _regions_or_blocks(req)
    if sites == {"bias"} and _toeplitz_terms(req) and req.key_padding_mask is None:
        return _regions_or_blocks(req)
    if sites <= {"score", "value"} and _shaw_eligible(req):
        return "shaw"
    if sites == {"score"} and _relkey_eligible(req):
        return "relkey"
    return "blocks"


def _regions_or_blocks(req: Request) -> str:
    ok = (
        req.q.device.type == "cpu"
        and req.q.dtype in (torch.float32, torch.float64)
        and req.key_padding_mask is None
        and req.contiguous
        and _flash_ops() is not None
    )
    return "regions" if ok else "blocks"


def run(req: Request) -> Tensor:
    q, k = rotated_qk(req)  # autograd handles the rotation (O(N D))
    engine = engine_for(req)
    B, H, Nq, Nk, D = req.shape
    log.debug("chunked: scheme=%s engine=%s B=%d H=%d Nq=%d Nk=%d causal=%s",
              req.encoding.name, engine, B, H, Nq, Nk, req.causal)
    if engine == "sdpa":
        return F.scaled_dot_product_attention(q, k, req.v, is_causal=req.causal, scale=req.scale)
    enc = req.encoding
    tvals, lo = None, -(req.q_offset + Nq - 1)  # offsets d = j - i run from lo to Nk - 1 - q_offset
    if _toeplitz_terms(req):
        offs = offsets_range(Nq, Nk, req.q_offset).to(q.device)
        lo = int(offs[0])
        tvals = enc.relative_bias(offs)  # (H, Nq + Nk - 1), float32, autograd to the parameters
        if tvals.dim() != 2:
            raise RuntimeError(f"scheme {enc.name!r}: relative_bias returned shape {tuple(tvals.shape)}")
    if engine == "regions":
        cfg = _RegionCfg(req, lo, saturation_distance(enc))
        return _RegionFn.apply(cfg, q, k, req.v, tvals)
    if engine == "shaw":
        vt = enc.value_table if "value" in enc.acts_on else None
        return _ShawFn.apply(_ShawCfg(req), q, k, req.v, enc.key_table, vt)
    if engine == "relkey":
        # Transformer-XL: scale * ((q + u) . k_j + (q + v) . W_R R_{i-j}); R is indexed by r = i - j = -d
        offs = offsets_range(Nq, Nk, req.q_offset).to(q.device)
        rtab = enc.projected(-offs)  # (H, L, D) float32, autograd to W_R
        u = enc.u.to(q.dtype)[None, :, None, :]
        vb = enc.v.to(q.dtype)[None, :, None, :]
        return _RelKeyFn.apply(_RelKeyCfg(req, lo), q + u, q + vb, k, req.v, rtab)
    gen_bias = "bias" in enc.acts_on and tvals is None
    leaves = _probe_leaves(req, q, k, gen_bias) if (gen_bias or enc.acts_on & {"score", "value"}) else []
    cfg = _BlockCfg(req, lo, gen_bias, len(leaves))
    out = _BlockFn.apply(cfg, q, k, req.v, tvals, *leaves)
    return out


# ------------------------------------------------------------------- "blocks" engine


class _BlockCfg:
    """Static description of one call of the ``"blocks"`` engine."""

    def __init__(self, req: Request, lo: int, gen_bias: bool, n_leaves: int) -> None:
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
        self.lo = lo
        self.gen_bias = gen_bias
        self.has_score = "score" in enc.acts_on
        self.has_value = "value" in enc.acts_on
        self.n_leaves = n_leaves
        self.cd = _compute_dtype(req.q.dtype)
        itemsize = torch.finfo(self.cd).bits // 8
        self.rows = _rows_per_block(B * H, Nk, itemsize)
        # bias-only terms without padding: the forward can use the fused CPU kernel
        self.fused_forward = (
            not self.has_score and not self.has_value and self.kpm is None
            and req.q.device.type == "cpu" and _flash_ops() is not None
        )

    def blocks(self):
        for a in range(0, self.Nq, self.rows):
            b = min(self.Nq, a + self.rows)
            C = min(self.Nk, self.qo + b) if self.causal else self.Nk
            yield a, b, C


def _mask_block(s: Tensor, cfg: _BlockCfg, a: int, b: int, C: int) -> None:
    """Set masked logits of block rows ``[a, b)`` x keys ``[0, C)`` to -inf, in place."""
    if cfg.causal:
        first = cfg.qo + a + 1  # row a sees keys <= qo + a
        if first < C:
            t = torch.arange(a, b, device=s.device)[:, None] + cfg.qo
            j = torch.arange(first, C, device=s.device)[None, :]
            s[..., first:].masked_fill_(j > t, float("-inf"))
    if cfg.kpm is not None:
        s.masked_fill_(~cfg.kpm[:, None, None, :C], float("-inf"))


def _block_base(cfg: _BlockCfg, qb: Tensor, kr: Tensor, tvals: Tensor | None, a: int, b: int, C: int,
                sub: Tensor | None = None) -> Tensor:
    """``scale * q k^T + toeplitz bias [- sub]`` for one block, ``(B, H, R, C)`` in the compute dtype."""
    B, H, R = cfg.B, cfg.H, b - a
    s = torch.empty(B, H, R, C, dtype=cfg.cd, device=qb.device)
    q3 = qb.reshape(B * H, R, qb.shape[-1])
    k3 = kr.reshape(B * H, C, kr.shape[-1]).transpose(1, 2)
    if tvals is not None:
        tb = _toeplitz_block(tvals, cfg.lo, -(cfg.qo + b - 1), R, C)  # (H, R, C)
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


class _BlockFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cfg: _BlockCfg, q, k, v, tvals, *leaves):
        enc, cd = cfg.enc, cfg.cd
        qc, kc, vc = q.to(cd), k.to(cd), v.to(cd)
        tv = None if tvals is None else tvals.to(cd)
        B, H, Nq = cfg.B, cfg.H, cfg.Nq
        out = torch.empty(B, H, Nq, cfg.Dv, dtype=cd, device=q.device)
        lse = torch.empty(B, H, Nq, dtype=cd, device=q.device)
        tiny = torch.finfo(cd).tiny
        fused = _flash_ops() if cfg.fused_forward else None
        for a, b, C in cfg.blocks():
            qb, kr, vr = qc[:, :, a:b], kc[:, :, :C], vc[:, :, :C]
            qp, kp = cfg.qpos[:, a:b], cfg.kpos[:, :C]
            if fused is not None:
                # position term (+ causal -inf) as the fused kernel's additive mask
                mask = fast_bias(enc, qp, kp).to(cd) if tv is None else _toeplitz_block(tv, cfg.lo, -(cfg.qo + b - 1), b - a, C)[None]
                if cfg.causal and cfg.qo + a + 1 < C:
                    mask = mask.clone() if tv is not None else mask
                    _mask_block(mask, cfg, a, b, C)
                o, l = fused[0](qb, kr, vr, 0.0, False, attn_mask=mask, scale=cfg.scale)
                out[:, :, a:b] = o
                lse[:, :, a:b] = l
                continue
            s = _block_base(cfg, qb, kr, tv, a, b, C)
            if cfg.gen_bias:
                s += fast_bias(enc, qp, kp).to(cd)
            if cfg.has_score:
                s += enc.score(qb, kr, qp, kp, cfg.scale).to(cd)
            _mask_block(s, cfg, a, b, C)
            m = s.amax(-1, keepdim=True)
            empty = m == -math.inf  # rows with no allowed key
            m = torch.where(empty, torch.zeros_like(m), m)
            p = _exp_(s.sub_(m))
            if cfg.kpm is not None:
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
        ctx.save_for_backward(qc, kc, vc, tv, out, lse, *leaves)
        return out.to(q.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        cfg: _BlockCfg = ctx.cfg
        enc, cd = cfg.enc, cfg.cd
        qc, kc, vc, tv, out, lse, *leaves = ctx.saved_tensors
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
        for a, b, C in cfg.blocks():
            R = b - a
            qb, kr, vr = qc[:, :, a:b], kc[:, :, :C], vc[:, :, :C]
            qp, kp = cfg.qpos[:, a:b], cfg.kpos[:, :C]
            dob = do[:, :, a:b]
            s = _block_base(cfg, qb, kr, tv, a, b, C)
            sc = qleaf = kleaf = bb = None
            if cfg.gen_bias:
                with torch.enable_grad():  # evaluated once: its value now, its gradient below
                    bb = fast_bias(enc, qp, kp)  # (B|1, H, R, C)
                s += bb.detach().to(cd)
            if cfg.has_score:
                with torch.enable_grad():
                    qleaf = qb.detach().requires_grad_(True)
                    kleaf = kr.detach().requires_grad_(True)
                    sc = enc.score(qleaf, kleaf, qp, kp, cfg.scale)
                s += sc.detach().to(cd)
            _mask_block(s, cfg, a, b, C)
            lb = lse[:, :, a:b, None]
            p = _exp_(s.sub_(lb))  # normalised probabilities
            if cfg.kpm is not None:
                p.masked_fill_(lb == math.inf, 0.0)  # rows with no allowed key
            dp = torch.matmul(dob, vr.transpose(-1, -2))  # (B, H, R, C)
            if cfg.has_value:
                with torch.enable_grad():
                    pleaf = p.detach().requires_grad_(True)
                    val = enc.value(pleaf, qp, kp)
                    g = torch.autograd.grad(val, [pleaf, *leaves], dob.to(val.dtype), allow_unused=True)
                dp += g[0].to(cd)
                _add_grads(dleaves, g[1:])
                d_row = (p * dp).sum(-1, keepdim=True)
            else:
                d_row = delta[:, :, a:b, None]
            if need_v:
                dv[:, :, :C] += torch.matmul(p.transpose(-1, -2), dob)
            ds = dp.sub_(d_row).mul_(p)  # (B, H, R, C)
            if need_q:
                dq[:, :, a:b] += torch.matmul(ds, kr).mul_(cfg.scale)
            if need_k:
                dk[:, :, :C] += torch.matmul(ds.transpose(-1, -2), qb).mul_(cfg.scale)
            if dtv is not None:
                d_min = -(cfg.qo + b - 1)
                s0 = d_min - cfg.lo
                dtv[:, s0 : s0 + R + C - 1] += _diag_sums(ds.sum(0))
            if bb is not None and bb.requires_grad:
                gb = ds if bb.shape[0] == B else ds.sum(0, keepdim=True)
                g = torch.autograd.grad(bb, leaves, gb.to(bb.dtype), allow_unused=True)
                _add_grads(dleaves, g)
            if sc is not None:
                g = torch.autograd.grad(sc, [qleaf, kleaf, *leaves], ds.to(sc.dtype), allow_unused=True)
                if g[0] is not None and need_q:
                    dq[:, :, a:b] += g[0].to(cd)
                if g[1] is not None and need_k:
                    dk[:, :, :C] += g[1].to(cd)
                _add_grads(dleaves, g[2:])
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
        return tuple(grads)


# ------------------------------------------------------------------ "regions" engine


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
        self.rects = _staircase(Nq, Nk, self.qo, self.causal, DIAG_ROWS if FORCE_ROWS is None else FORCE_ROWS)
        self.cd = req.q.dtype
        itemsize = torch.finfo(self.cd).bits // 8
        # backward passes work on HEADS_PER_BLOCK heads x rows x keys (sized to stay in cache)
        self.heads_per_block = HEADS_PER_BLOCK
        g = max(1, min(H, HEADS_PER_BLOCK))
        if FORCE_ROWS is not None:
            self.rows = int(FORCE_ROWS)
        else:
            self.rows = int(max(MIN_ROWS, min(256, HANKEL_BLOCK_BYTES // max(1, B * g * Nk * itemsize))))


def _staircase(Nq: int, Nk: int, qo: int, causal: bool, S: int) -> list[tuple[int, int, int, int, bool]]:
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
        flash, _ = _flash_ops()
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
            lo_, oo = lse[:, :, a0:a1], out[:, :, a0:a1]
            new = torch.logaddexp(lo_, l)
            oo.mul_(torch.exp(lo_ - new)[..., None]).add_(o * torch.exp(l - new)[..., None])
            lse[:, :, a0:a1] = new
        ctx.cfg = cfg
        ctx.save_for_backward(q, kr, vr, tvals, out, lse)
        return out

    @staticmethod
    @once_differentiable
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
    _, flash_bwd = _flash_ops()
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
        rvh = rv[hs] if rv.shape[0] > 1 else rv
        for a in range(0, Nq, rows):
            b = min(Nq, a + rows)
            R = b - a
            C = min(Nk, qo + b) if cfg.causal else Nk
            c0 = 0 if band is None else max(0, qo + a - band + 1)
            if c0 >= C:
                continue
            Cb = C - c0
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
            p = _exp_(s.view(B * g, R, Cb).baddbmm_(qb, kb.transpose(1, 2), alpha=cfg.scale))
            if want_qkv:
                dvr[:, hs, ks] += torch.bmm(p.transpose(1, 2), gb).view(B, g, Cb, Dv)
            dp = torch.baddbmm(-delta[:, hs, a:b, None].reshape(B * g, R, 1), gb, vb.transpose(1, 2))
            W = R + Cb - 1
            zv = skew.as_strided((B * g, R, Cb), (rows * Wmax, Wmax + 1, 1), skew.storage_offset())
            ds = torch.mul(p, dp, out=zv)  # (B*g, R, Cb), also laid out along anti-diagonals
            if want_qkv:
                dq[:, hs, a:b] += torch.bmm(ds, kb).mul_(cfg.scale).view(B, g, R, D)
                dkr[:, hs, ks] += torch.bmm(ds.transpose(1, 2), qb).mul_(cfg.scale).view(B, g, Cb, D)
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


# --------------------------------------------------------------------- "shaw" engine


def _shaw_eligible(req: Request) -> bool:
    enc = req.encoding
    return (
        getattr(enc, "name", "") == "shaw"
        and isinstance(getattr(enc, "key_table", None), Tensor)
        and isinstance(getattr(enc, "k", None), int)
        and req.contiguous
        and req.key_padding_mask is None
        and req.q.device.type == "cpu"
        and req.q.dtype in (torch.float32, torch.float64)
        and _flash_ops() is not None
    )


def _offset_staircase(Nq: int, Nk: int, o: int, S: int) -> list[tuple[int, int, int, int, bool]]:
    """Rectangles covering ``{(t, j): 0 <= j <= t + o, j < Nk}`` (rows without keys skipped).

    Diagonal squares carry a top-left-aligned causal mask (the kernel's ``is_causal``).
    """
    t0 = max(0, -o)
    if t0 >= Nq:
        return []
    out = []
    for a0, a1, c0, c1, diag in _staircase(Nq - t0, Nk, o + t0, True, S):
        c1 = min(c1, Nk)
        if c0 < c1:
            out.append((a0 + t0, a1 + t0, c0, c1, diag))
    return out


class _ShawCfg:
    """Static description of one call of the ``"shaw"`` engine.

    Offsets ``d = j - i``: far-left ``d <= -k`` (table row 0), band ``-k < d < kR``,
    far-right ``d >= kR`` (row ``2k``; bidirectional only), with ``kR = max(k, 1)``.
    """

    def __init__(self, req: Request) -> None:
        enc = req.encoding
        B, H, Nq, Nk, D = req.shape
        self.B, self.H, self.Nq, self.Nk = B, H, Nq, Nk
        self.scale, self.causal, self.qo = req.scale, req.causal, req.q_offset
        self.kk = int(enc.k)
        self.kR = max(self.kk, 1)
        # the diagonal squares use the kernel's own causal mode, which skips masked blocks:
        # one square (plus one rectangle) is cheapest
        S = max(Nq, Nk) if FORCE_ROWS is None else FORCE_ROWS
        self.left = _offset_staircase(Nq, Nk, self.qo - self.kk, S)
        hi = 0 if self.causal else self.kR - 1
        self.band = list(range(-self.kk + 1, hi + 1))  # offsets computed explicitly
        # far-right in flipped coordinates (t' = Nq-1-t, j' = Nk-1-j): j' <= t' + o2
        self.right = [] if self.causal else _offset_staircase(Nq, Nk, Nk - Nq - self.qo - self.kR, S)


def _merge(out: Tensor, lse: Tensor, rows: slice, o: Tensor, l: Tensor) -> None:
    """Fold a partial result ``(o, l)`` of ``rows`` into the running ``(out, lse)``."""
    lo_, oo = lse[:, :, rows], out[:, :, rows]
    new = torch.logaddexp(lo_, l)
    new_safe = torch.where(new == -math.inf, torch.zeros_like(new), new)
    oo.mul_(torch.exp(lo_ - new_safe)[..., None]).add_(o * torch.exp(l - new_safe)[..., None])
    lse[:, :, rows] = new


def _flash_rects_fwd(q, k, v, rects, scale, out, lse, *, flip: bool) -> None:
    flash, _ = _flash_ops()
    Nq, Nk = q.shape[2], k.shape[2]
    for a0, a1, c0, c1, diag in rects:
        if flip:  # rects are in flipped coordinates; q, k, v are passed flipped
            o, l = flash(q[:, :, a0:a1], k[:, :, c0:c1], v[:, :, c0:c1], 0.0, diag, scale=scale)
            _merge(out, lse, slice(Nq - a1, Nq - a0), o.flip(2), l.flip(2))
        else:
            o, l = flash(q[:, :, a0:a1], k[:, :, c0:c1], v[:, :, c0:c1], 0.0, diag, scale=scale)
            _merge(out, lse, slice(a0, a1), o, l)


def _flash_rects_bwd(dout, q, k, v, out, lse, rects, scale, dq, dk, dv) -> None:
    """Accumulate exact partial gradients of ``rects`` (global ``out``/``lse``) into dq, dk, dv."""
    _, flash_bwd = _flash_ops()
    for a0, a1, c0, c1, diag in rects:
        gq, gk, gv = flash_bwd(dout[:, :, a0:a1], q[:, :, a0:a1], k[:, :, c0:c1], v[:, :, c0:c1],
                               out[:, :, a0:a1], lse[:, :, a0:a1], 0.0, diag, scale=scale)
        dq[:, :, a0:a1] += gq
        dk[:, :, c0:c1] += gk
        dv[:, :, c0:c1] += gv


class _Band:
    """The band of offsets ``d in [dlo, dhi]`` (``j = qo + t + d``) as batched block matmuls.

    Queries are cut into blocks of ``R >= nb`` rows; block ``i`` meets the keys of
    one window of ``R + nb - 1`` consecutive (zero-padded) keys, so ``q_block @ window^T``
    is a small dense matrix whose diagonals ``[t, t + u]`` are the band. Skewed
    strided views read and write those diagonals without copies or index tensors.
    """

    def __init__(self, cfg: "_ShawCfg", device) -> None:
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


def _shaw_band_logits(cfg: "_ShawCfg", band: _Band, q: Tensor, kw: Tensor, A: Tensor) -> Tensor:
    """Band logits ``(B, H, nblk*R, nb)``, -inf where the key does not exist."""
    B, H = q.shape[:2]
    qb = band.rows(q)  # (B, H, nblk, R, D)
    m = torch.matmul(qb, kw.transpose(-1, -2))  # (B, H, nblk, R, Wk)
    s = band.diag(m).reshape(B, H, band.nblk * band.R, band.nb)
    idx = [d + cfg.kk for d in cfg.band]
    s = s + torch.matmul(band.rows(q).reshape(B, H, -1, q.shape[-1]), A[:, idx].transpose(-1, -2))
    s.mul_(cfg.scale)
    return s.masked_fill_(~band.valid, float("-inf"))


class _ShawFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cfg: _ShawCfg, q, k, v, a, b):
        B, H, Nq, Nk, qo, kk = cfg.B, cfg.H, cfg.Nq, cfg.Nk, cfg.qo, cfg.kk
        A = (a if a.dim() == 3 else a[None]).to(q.dtype)  # (H|1, 2k+1, D)
        Bt = None if b is None else (b if b.dim() == 3 else b[None]).to(q.dtype)
        out = torch.zeros(B, H, Nq, v.shape[-1], dtype=q.dtype, device=q.device)
        lse = torch.full((B, H, Nq), -math.inf, dtype=q.dtype, device=q.device)
        # far-left: keys k + aK[-k], values v + aV[-k]
        kL = k + A[None, :, 0, None, :]
        vL = v if Bt is None else v + Bt[None, :, 0, None, :]
        _flash_rects_fwd(q, kL, vL, cfg.left, cfg.scale, out, lse, flip=False)
        if cfg.right:
            kR = k + A[None, :, 2 * kk, None, :]
            vR = v if Bt is None else v + Bt[None, :, 2 * kk, None, :]
            _flash_rects_fwd(q.flip(2), kR.flip(2), vR.flip(2), cfg.right, cfg.scale, out, lse, flip=True)
        if cfg.band:
            band = _Band(cfg, q.device)
            kw = band.windows(band.pad_keys(k))
            s = _shaw_band_logits(cfg, band, q, kw, A)  # (B, H, nblk*R, nb)
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
            _merge(out, lse, slice(0, Nq), ob[:, :, :Nq], lb[:, :, :Nq])
        ctx.cfg = cfg
        ctx.save_for_backward(q, k, v, a, b, out, lse)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        cfg: _ShawCfg = ctx.cfg
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
                _flash_rects_bwd(dout.flip(2), q.flip(2), kX.flip(2), vX.flip(2), out.flip(2), lse.flip(2),
                                 rects, cfg.scale, gq, gk, gv)
                gq, gk, gv = gq.flip(2), gk.flip(2), gv.flip(2)
                dq += gq
            else:
                _flash_rects_bwd(dout, q, kX, vX, out, lse, rects, cfg.scale, dq, gk, gv)
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
            s = _shaw_band_logits(cfg, band, q, kw, A)  # (B, H, nR, nb)
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


# ---------------------------------------------------------- "relkey" engine (Transformer-XL)


def _relkey_eligible(req: Request) -> bool:
    enc = req.encoding
    return (
        getattr(enc, "name", "") == "transformer-xl"
        and callable(getattr(enc, "projected", None))
        and all(isinstance(getattr(enc, n, None), Tensor) for n in ("u", "v"))
        and req.contiguous
        and req.key_padding_mask is None
        and req.q.device.type == "cpu"
        and req.q.dtype in (torch.float32, torch.float64)
        and _flash_ops() is not None
    )


class _RelKeyCfg:
    """Logits ``scale * (q_u . k_j + q_v . r[j - i])`` with ``r`` given on every offset ``lo..hi``."""

    def __init__(self, req: Request, lo: int) -> None:
        B, H, Nq, Nk, D = req.shape
        self.B, self.H, self.Nq, self.Nk = B, H, Nq, Nk
        self.scale, self.causal, self.qo, self.lo = req.scale, req.causal, req.q_offset, lo
        itemsize = torch.finfo(req.q.dtype).bits // 8
        if FORCE_ROWS is not None:
            self.fwd_rows = self.rows = int(FORCE_ROWS)
        else:
            self.fwd_rows = int(max(MIN_ROWS, min(512, BLOCK_BYTES // max(1, B * H * (Nk + 256) * itemsize))))
            self.rows = int(max(MIN_ROWS, min(256, BLOCK_BYTES // max(1, B * H * Nk * itemsize))))
        self.heads_per_block = H  # measured: all heads per block is fastest here (8 matmuls per block)

    def keys(self, b: int) -> int:
        return min(self.Nk, self.qo + b) if self.causal else self.Nk


def _relkey_pd(cfg: _RelKeyCfg, qv: Tensor, rtab: Tensor, a: int, b: int, C: int) -> tuple[Tensor, Tensor]:
    """Per-offset position logits of rows ``[a, b)`` and their ``(rows, C)`` strided view.

    ``pd[..., t, m] = scale * qv_t . r[d_min + m]`` with ``d_min = -(qo + b - 1)``; the
    pair ``(t, j)`` has offset ``j - qo - a - t`` = column ``j - t + R - 1``, so
    the ``(R, C)`` term is ``pd`` read with row stride ``W - 1`` (no copy).
    Future offsets (causal) are set to -inf in ``pd``.
    """
    R = b - a
    W = R + C - 1
    d_min = -(cfg.qo + b - 1)
    seg = rtab[:, d_min - cfg.lo : d_min - cfg.lo + W]  # (H, W, D)
    pd = torch.matmul(qv, seg.transpose(-1, -2)).mul_(cfg.scale)  # (B, H', R, W)
    if cfg.causal and cfg.qo + b < W:
        pd[..., cfg.qo + b :] = float("-inf")  # columns m >= qo + b are offsets d > 0
    st = pd.stride()
    view = pd.as_strided((pd.shape[0], pd.shape[1], R, C), (st[0], st[1], W - 1, 1), pd.storage_offset() + R - 1)
    return pd, view


class _RelKeyFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cfg: _RelKeyCfg, qu, qv, k, v, rtab):
        flash, _ = _flash_ops()
        B, H, Nq = cfg.B, cfg.H, cfg.Nq
        rt = rtab.to(qu.dtype)
        out = torch.empty(B, H, Nq, v.shape[-1], dtype=qu.dtype, device=qu.device)
        lse = torch.empty(B, H, Nq, dtype=qu.dtype, device=qu.device)
        for a in range(0, Nq, cfg.fwd_rows):
            b = min(Nq, a + cfg.fwd_rows)
            C = cfg.keys(b)
            _, view = _relkey_pd(cfg, qv[:, :, a:b], rt, a, b, C)
            o, l = flash(qu[:, :, a:b], k[:, :, :C], v[:, :, :C], 0.0, False, attn_mask=view, scale=cfg.scale)
            out[:, :, a:b] = o
            lse[:, :, a:b] = l
        ctx.cfg = cfg
        ctx.rtab_dtype = rtab.dtype
        ctx.save_for_backward(qu, qv, k, v, rt, out, lse)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        cfg: _RelKeyCfg = ctx.cfg
        qu, qv, k, v, rt, out, lse = ctx.saved_tensors
        B, H, Nq = cfg.B, cfg.H, cfg.Nq
        D, Dv = qu.shape[-1], v.shape[-1]
        dout = dout.contiguous()
        delta = (dout * out).sum(-1)  # (B, H, Nq)
        dqu, dqv, dk, dv = (torch.zeros_like(x) for x in (qu, qv, k, v))
        drt = torch.zeros_like(rt)
        G = max(1, min(H, cfg.heads_per_block))
        for h0 in range(0, H, G):
            hs = slice(h0, min(H, h0 + G))
            g = hs.stop - hs.start
            rth = rt[hs]
            for a in range(0, Nq, cfg.rows):
                b = min(Nq, a + cfg.rows)
                R, C = b - a, cfg.keys(b)
                W = R + C - 1
                pd, view = _relkey_pd(cfg, qv[:, hs, a:b], rth, a, b, C)
                s = torch.empty(B, g, R, C, dtype=qu.dtype, device=qu.device)
                torch.sub(view, lse[:, hs, a:b, None], out=s)
                qb = qu[:, hs, a:b].reshape(B * g, R, D)
                kb = k[:, hs, :C].reshape(B * g, C, D)
                vb = v[:, hs, :C].reshape(B * g, C, Dv)
                gb = dout[:, hs, a:b].reshape(B * g, R, Dv)
                p = _exp_(s.view(B * g, R, C).baddbmm_(qb, kb.transpose(1, 2), alpha=cfg.scale))
                dv[:, hs, :C] += torch.bmm(p.transpose(1, 2), gb).view(B, g, C, Dv)
                dp = torch.baddbmm(-delta[:, hs, a:b, None].reshape(B * g, R, 1), gb, vb.transpose(1, 2))
                z = pd.new_zeros(B * g, R, W)  # dS laid out by offset, like pd
                ds = torch.mul(p, dp, out=z.as_strided((B * g, R, C), (R * W, W - 1, 1), z.storage_offset() + R - 1))
                dqu[:, hs, a:b] += torch.bmm(ds, kb).mul_(cfg.scale).view(B, g, R, D)
                dk[:, hs, :C] += torch.bmm(ds.transpose(1, 2), qb).mul_(cfg.scale).view(B, g, C, D)
                d_min = -(cfg.qo + b - 1)
                seg = rth[:, d_min - cfg.lo : d_min - cfg.lo + W]  # (g, W, D)
                z4 = z.view(B, g, R, W)
                dqv[:, hs, a:b] += torch.matmul(z4, seg).mul_(cfg.scale)
                drt[hs, d_min - cfg.lo : d_min - cfg.lo + W] += torch.matmul(
                    z4.transpose(-1, -2), qv[:, hs, a:b]).sum(0).mul_(cfg.scale)
        return None, dqu, dqv, dk, dv, drt.to(ctx.rtab_dtype)
