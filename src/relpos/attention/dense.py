"""Dense attention: materialise the position terms, then one fused softmax.

The ``(Nq, Nk)`` position term is formed once per call and shared by the whole
batch (shape ``(1, H, Nq, Nk)``; never copied per batch element). Toeplitz terms
are evaluated on the ``Nq + Nk - 1`` distinct offsets and expanded with one
strided copy (:func:`relpos.offsets.toeplitz`), never from an ``Nq x Nk``
bucket computation. Under causal masking the future offsets are set to -inf
*before* the expansion, so the mask costs nothing extra. When a scheme adds
nothing to the value side the final step is
:func:`torch.nn.functional.scaled_dot_product_attention` with the term as an
additive mask (the fused kernel when the term needs no gradient).

Memory grows with ``Nq x Nk``; use ``impl="chunked"`` for long sequences.

The helpers :func:`rotated_qk`, :func:`position_bias` and :func:`additive_terms`
are shared with other modules (the model's attention maps, the explorer).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from relpos.attention import Request, check_finite
from relpos.attention import dense_relkey
from relpos.offsets import offsets_range, skew_rows, skew_rows_past, skewed_product, toeplitz
from relpos.first_order import first_order

__all__ = ["supports", "run", "position_bias", "rotated_qk", "additive_terms", "row_has_key", "group_rows",
           "ungroup_rows", "grouped_scores", "expand_kv", "score_keys"]


# ------------------------------------------------------------ grouped-query attention
# Query head h reads key/value head h // G (G = H // Hkv), the layout repeat_interleave
# gives. Instead of copying k and v per query head, the G query heads of one key head are
# stacked as G * Nq rows: (B, H, Nq, X) -> (B, Hkv, G * Nq, X) is a view of a contiguous
# tensor, so q @ k^T and p @ v run against the Hkv key/value heads as they are.


def group_rows(t: Tensor, G: int) -> Tensor:
    """``(B|1, H|1, Nq, X)`` -> ``(B|1, H/G|1, G * Nq, X)``: query head ``hkv * G + g`` becomes rows ``g * Nq + t``."""
    if G == 1:
        return t
    b, h, n, x = t.shape
    if h == 1 and n == 1:  # shared by heads and rows (a key padding mask): broadcasts as it is
        return t
    if h == 1:  # a term shared by the heads (a mask): repeat it for the G row blocks
        return t[:, :, None].expand(b, 1, G, n, x).reshape(b, 1, G * n, x)
    return t.reshape(b, h // G, G * n, x)


def ungroup_rows(t: Tensor, G: int) -> Tensor:
    """Inverse of :func:`group_rows`: ``(B, Hkv, G * Nq, X)`` -> ``(B, Hkv * G, Nq, X)``."""
    if G == 1:
        return t
    b, hk, gn, x = t.shape
    return t.reshape(b, hk * G, gn // G, x)


def grouped_scores(q: Tensor, k: Tensor) -> Tensor:
    """``q (B, H, Nq, D) @ k (B, Hkv, Nk, D)^T`` -> ``(B, H, Nq, Nk)`` without copying ``k``."""
    G = q.shape[1] // k.shape[1]
    return ungroup_rows(group_rows(q, G) @ k.transpose(-1, -2), G)


def expand_kv(t: Tensor, G: int) -> Tensor:
    """``(B, Hkv, N, X)`` -> ``(B, Hkv * G, N, X)``, a copy (the reference, and terms that read per-head keys)."""
    return t if G == 1 else t.repeat_interleave(G, dim=1)


def score_keys(req: Request, k: Tensor) -> Tensor:
    """Keys as a scheme's ``score`` reads them: one per query head.

    Under grouped-query attention this is an expanded copy, ``O(B H Nk D)``, for the
    content-dependent schemes whose score reads the keys (Transformer-XL's ``u . k``,
    DeBERTa's p2c, CoPE's gates, FoX's gates); clipped-table schemes (Shaw) read only q.
    Attention itself (``q . k``, ``p @ v``) never copies them.
    """
    G = req.groups
    if G == 1 or req.encoding.clipped_tables() is not None:
        return k
    return expand_kv(k, G)


def supports(req: Request) -> str | None:
    return None


def position_bias(req: Request, *, causal_fill: bool = False) -> Tensor:
    """The ``"bias"`` term, ``(B or 1, H, Nq, Nk)`` float32.

    Args:
        req: the request.
        causal_fill: for Toeplitz schemes on contiguous positions, put -inf at
            future offsets (``j > i``) so the result is also the causal mask.
    """
    enc = req.encoding
    B, H, Nq, Nk, _ = req.shape
    if req.toeplitz and req.contiguous:
        offs = offsets_range(Nq, Nk, req.q_offset).to(req.q.device)  # (Nq + Nk - 1,)
        vals = enc.relative_bias(offs)  # (H, Nq + Nk - 1)
        if causal_fill:
            vals = vals.masked_fill(offs > 0, float("-inf"))
        return toeplitz(vals, Nq, Nk)[None]  # (1, H, Nq, Nk)
    return enc.bias(req.qpos, req.kpos)


def rotated_qk(req: Request) -> tuple[Tensor, Tensor]:
    """``q, k`` after the scheme's rotation (unchanged for schemes without a ``"qk"`` site)."""
    enc = req.encoding
    if "qk" not in enc.acts_on:
        return req.q, req.k
    seq_len = int(req.kpos.max()) + 1
    q = enc.rotate(req.q, req.qpos, is_query=True, seq_len=seq_len)
    k = enc.rotate(req.k, req.kpos, is_query=False, seq_len=seq_len)
    return q, k


def additive_terms(req: Request, q: Tensor, k: Tensor, *, causal_fill: bool = False, past: bool = False):
    """Sum of the bias and score terms in logit units (no masking), or None.

    Args:
        causal_fill: see :func:`position_bias` (only affects Toeplitz biases).
        past: return ``(term, causal_in_term)``, where a causal call on default positions asks the
            scheme for :meth:`~relpos.encodings.base.Encoding.bias_past` (a bias that is not Toeplitz here)
            and :meth:`~relpos.encodings.base.Encoding.score_past` (the past offsets only), -inf for future
            keys: ``causal_in_term`` True when either gave one.
    """
    enc = req.encoding
    add, in_term = None, False
    fold = past and past_columns(req) is not None  # a causal call on default positions: -inf may be folded in
    if "bias" in enc.acts_on:
        if fold and not req.toeplitz:
            add = enc.bias_past(req.qpos, req.kpos)  # -inf at future keys, or None
            in_term = add is not None
        if add is None:
            add = position_bias(req, causal_fill=causal_fill)
    if "score" in enc.acts_on:
        s = None
        if fold:
            s = enc.score_past(q, score_keys(req, k), req.qpos, req.kpos, req.scale)
            in_term = in_term or s is not None
        if s is None:
            s = enc.score(q, score_keys(req, k), req.qpos, req.kpos, req.scale)
        add = s if add is None else add + s
    return (add, in_term) if past else add


def row_has_key(req: Request) -> Tensor | None:
    """``(B, 1, Nq, 1)`` bool (``(B|1, H|1, Nq, 1)`` with an ``attn_mask``): whether each query row
    has at least one allowed key.

    None when every row has one (no key padding: causal rows always see key 0).
    Computed in ``O(B N)`` from the padding mask, without forming the mask (with an
    ``attn_mask``, from the whole ``(B|1, H|1, Nq, Nk)`` mask).
    """
    if req.attn_mask is not None:
        ok = req.mask().any(-1, keepdim=True)  # (B|1, H|1, Nq, 1)
        return None if bool(ok.all()) else ok
    kpm = req.key_padding_mask
    if kpm is None:
        return None
    B, H, Nq, Nk, _ = req.shape
    if req.causal:
        seen = kpm.cumsum(-1) > 0  # (B, Nk): some real key at index <= j
        last = (torch.arange(Nq, device=kpm.device) + req.q_offset).clamp(max=Nk - 1)
        ok = seen[:, last]  # (B, Nq)
    else:
        ok = kpm.any(-1, keepdim=True).expand(B, Nq)
    if bool(ok.all()):
        return None
    return ok[:, None, :, None]


class _TermAttention(torch.autograd.Function):
    """``o = softmax(scale q k^T + term) v`` and ``p``, with a backward that also gives the term's gradient.

    PyTorch's fused CPU kernel cannot give an additive mask a gradient, so SDPA falls back
    to its math path when the term needs one; that path runs its matmuls on 4-d views (one
    small GEMM per batch entry with copies), checks for fully masked rows and lets autograd
    chain the softmax. Here the five backward matmuls run as 3-d ``bmm`` on contiguous
    ``(B H, N, D)`` tensors and ``dS = P (dP - rowsum(P dP))`` is formed once, feeding
    ``dq``, ``dk`` and the term's gradient (summed to the term's broadcast shape). ``p``
    is returned for schemes with a value term (Shaw's ``sum_j p_ij a_ij``); its gradient
    joins ``dP``. The caller guarantees every row has an allowed key (:func:`row_has_key`),
    as the dense path does. Float32/float64 only; second derivatives are refused.
    """

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, term: Tensor, scale: float) -> tuple[Tensor, Tensor]:
        B, H, Nq, D = q.shape
        Nk, Dv = k.shape[2], v.shape[3]
        q3, k3, v3 = q.reshape(B * H, Nq, D), k.reshape(B * H, Nk, D), v.reshape(B * H, Nk, Dv)
        s = torch.bmm(q3, k3.transpose(1, 2)).view(B, H, Nq, Nk).mul_(scale).add_(term)  # (B, H, Nq, Nk)
        p = torch.softmax(s, dim=-1)  # (B, H, Nq, Nk)
        o = torch.bmm(p.view(B * H, Nq, Nk), v3)  # (B H, Nq, Dv)
        ctx.save_for_backward(q3, k3, v3, p, o)
        ctx.scale, ctx.term_shape = scale, term.shape
        ctx.set_materialize_grads(False)
        return o.view(B, H, Nq, Dv), p

    @staticmethod
    @first_order
    def backward(ctx, go: Tensor | None, gp: Tensor | None):
        q3, k3, v3, p, o = ctx.saved_tensors
        B, H, Nq, Nk = p.shape
        p3 = p.view(B * H, Nq, Nk)
        if go is None:
            go = o.new_zeros(B, H, Nq, o.shape[-1])
        go3 = go.reshape(B * H, Nq, -1)
        dv = torch.bmm(p3.transpose(1, 2), go3)  # (B H, Nk, Dv)
        ds = torch.bmm(go3, v3.transpose(1, 2))  # dP (B H, Nq, Nk)
        if gp is None:
            delta = (go3 * o).sum(-1, keepdim=True)  # rowsum(P dP) = rowsum(dO o) when o = P v
        else:
            ds.add_(gp.reshape(B * H, Nq, Nk))
            delta = (ds * p3).sum(-1, keepdim=True)
        ds.sub_(delta).mul_(p3)  # dS = P (dP - rowsum(P dP))
        dq = torch.bmm(ds, k3).mul_(ctx.scale)
        dk = torch.bmm(ds.transpose(1, 2), q3).mul_(ctx.scale)
        dterm = ds.view(B, H, Nq, Nk).sum_to_size(ctx.term_shape)  # (B|1, H|1, Nq, Nk)
        return dq.view(B, H, Nq, -1), dk.view(B, H, Nk, -1), dv.view(B, H, Nk, -1), dterm, None


#: causal calls with at least this many query rows run :class:`_CausalTermAttention` (below it, one ``bmm`` over
#: the whole square costs less than the per-block calls; measured at the compare presets' shapes)
CAUSAL_BLOCK_ROWS = 256
#: row blocks of :class:`_CausalTermAttention`
CAUSAL_BLOCKS = 4


def causal_blocks(Nq: int, Nk: int, q_offset: int, n: int = CAUSAL_BLOCKS) -> tuple[tuple[int, int, int], ...]:
    """``(r0, r1, e)`` row blocks of a causal call: rows ``r0 .. r1 - 1`` see keys ``0 .. e - 1`` only
    (query ``i`` sees key ``j <= i + q_offset``).

    >>> causal_blocks(8, 8, 0, 4)
    ((0, 2, 2), (2, 4, 4), (4, 6, 6), (6, 8, 8))
    """
    T = -(-Nq // n)
    return tuple((r0, min(Nq, r0 + T), max(1, min(Nk, min(Nq, r0 + T) + q_offset))) for r0 in range(0, Nq, T))


class _CausalTermAttention(torch.autograd.Function):
    """:class:`_TermAttention` for a causal call, by row blocks that skip the keys no row of the block sees.

    Rows ``r0 .. r1 - 1`` meet keys ``0 .. e - 1`` only (:func:`causal_blocks`): with 4 blocks the matmuls and
    the softmax cover 5/8 of the square. Every skipped pair must be -inf in ``term`` (a causal mask), so that
    the result equals the whole square's; the term's gradient is 0 there. Returns ``o`` only (no value term).
    """

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, term: Tensor, scale: float, blocks: tuple) -> Tensor:
        B, H, Nq, D = q.shape
        Nk, Dv = k.shape[2], v.shape[3]
        q3, k3, v3 = q.reshape(B * H, Nq, D), k.reshape(B * H, Nk, D), v.reshape(B * H, Nk, Dv)
        o = q3.new_empty(B * H, Nq, Dv)
        ps = []
        for r0, r1, e in blocks:
            s = torch.bmm(q3[:, r0:r1], k3[:, :e].transpose(1, 2)).view(B, H, r1 - r0, e)  # (B, H, R, e)
            s.mul_(scale).add_(term[..., r0:r1, :e])
            p = torch.softmax(s, dim=-1).view(B * H, r1 - r0, e)
            o[:, r0:r1] = torch.bmm(p, v3[:, :e])  # (a strided out= would loop over the batch)
            ps.append(p)
        ctx.save_for_backward(q3, k3, v3, o, *ps)
        ctx.scale, ctx.term_shape, ctx.blocks, ctx.dims = scale, term.shape, blocks, (B, H, Nq, Nk)
        return o.view(B, H, Nq, Dv)

    @staticmethod
    @first_order
    def backward(ctx, go: Tensor):
        q3, k3, v3, o, *ps = ctx.saved_tensors
        B, H, Nq, Nk = ctx.dims
        go3 = go.reshape(B * H, Nq, -1)
        dq, dk, dv = torch.empty_like(q3), torch.zeros_like(k3), torch.zeros_like(v3)
        tb, th = ctx.term_shape[0], ctx.term_shape[1]
        dterm = go3.new_zeros(tb, th, Nq, Nk)  # in the term's broadcast shape: each block summed as it comes
        delta = (go3 * o).sum(-1, keepdim=True)  # rowsum(P dP) = rowsum(dO o)
        for (r0, r1, e), p in zip(ctx.blocks, ps):
            g = go3[:, r0:r1]
            dv[:, :e] += torch.bmm(p.transpose(1, 2), g)  # (an in-place baddbmm_ on a slice loops over the batch)
            ds = torch.bmm(g, v3[:, :e].transpose(1, 2)).sub_(delta[:, r0:r1]).mul_(p)  # dS (B H, R, e)
            dq[:, r0:r1] = torch.bmm(ds, k3[:, :e])
            dk[:, :e] += torch.bmm(ds.transpose(1, 2), q3[:, r0:r1])
            dterm[:, :, r0:r1, :e] = ds.view(B, H, r1 - r0, e).sum_to_size(tb, th, r1 - r0, e)
        dq.mul_(ctx.scale)
        dk.mul_(ctx.scale)
        return dq.view(B, H, Nq, -1), dk.view(B, H, Nk, -1), dv.view(B, H, Nk, -1), dterm, None, None


def _use_term_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None) -> bool:
    """An additive float term that needs a gradient (SDPA's math fallback), float32/float64, grad mode on."""
    return (attn_mask is not None and attn_mask.is_floating_point() and attn_mask.requires_grad
            and torch.is_grad_enabled() and q.dtype in (torch.float32, torch.float64)
            and attn_mask.dtype == q.dtype == k.dtype == v.dtype and attn_mask.dim() == 4)


def _sdpa(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, scale: float, G: int,
          dropout_p: float = 0.0, causal_offset: int | None = None) -> Tensor:
    """SDPA with ``k, v`` of ``H / G`` heads: the query heads of a group as stacked rows.

    A term that needs a gradient goes through :class:`_TermAttention` instead of SDPA's math path (by causal
    row blocks, :class:`_CausalTermAttention`, when ``causal_offset`` says query ``i`` sees keys ``j <= i +
    causal_offset`` only and the term is -inf elsewhere);
    with dropout, any term goes through :func:`_dropped` (explicit probabilities), so that a seed
    gives the same draw with and without autograd. Every row must have an allowed key."""
    m = attn_mask if G == 1 or attn_mask is None else group_rows(attn_mask, G)
    qg = group_rows(q, G)
    if dropout_p > 0 and m is not None and m.is_floating_point():  # whatever the grad mode: one draw per seed
        out = _dropped(qg, k, v, m, scale, dropout_p)
    elif _use_term_attention(qg, k, v, m):
        Nq, Nk = qg.shape[2], k.shape[2]
        if causal_offset is not None and G == 1 and Nq >= CAUSAL_BLOCK_ROWS and m.shape[-2:] == (Nq, Nk):
            # the term is -inf past i + causal_offset: the row blocks skip those keys
            out = _CausalTermAttention.apply(qg, k, v, m, scale, causal_blocks(Nq, Nk, causal_offset))
        else:
            out = _TermAttention.apply(qg, k, v, m, scale)[0]
    else:
        out = F.scaled_dot_product_attention(qg, k, v, attn_mask=m, scale=scale, dropout_p=dropout_p)
    return ungroup_rows(out, G)


def _dropped(q: Tensor, k: Tensor, v: Tensor, m: Tensor, scale: float, dropout_p: float) -> Tensor:
    """``dropout(softmax(scale q k^T + m)) v`` with explicit probabilities (``m``: an additive float term)."""
    s = scale * (q @ k.transpose(-1, -2)) + m  # (B, H', R, Nk)
    p = torch.softmax(s if s.dtype == torch.float64 else s.float(), dim=-1).to(q.dtype)
    return F.dropout(p, dropout_p, training=True) @ v


def _masked_term(term: Tensor | None, mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """The additive term in ``dtype`` with -inf where ``mask`` (True = allowed) forbids a pair."""
    if term is None:
        return None
    term = term.to(dtype)
    return term if mask is None else term.masked_fill(~mask, float("-inf"))


def _with_value_term(req: Request, q: Tensor, k: Tensor, term: Tensor | None, mask: Tensor | None) -> Tensor:
    """Attention for a scheme with a ``"value"`` site: ``p v + value(p)``, ``(B, H, Nq, Dv)``."""
    enc, G, dtype = req.encoding, req.groups, q.dtype
    term = _masked_term(term, mask, dtype)
    m = None if term is None else group_rows(term, G)
    if req.dropout_p == 0 and _use_term_attention(group_rows(q, G), k, req.v, m):
        o, p = _TermAttention.apply(group_rows(q, G), k, req.v, m, req.scale)
        return ungroup_rows(o, G) + enc.value(ungroup_rows(p, G), req.qpos, req.kpos).to(dtype)
    logits = req.scale * grouped_scores(q, k)  # (B, H, Nq, Nk)
    if term is not None:
        logits = logits + term
    elif mask is not None:
        logits = logits.masked_fill(~mask, float("-inf"))
    p = torch.softmax(logits if dtype == torch.float64 else logits.float(), dim=-1).to(dtype)
    if req.dropout_p > 0:  # the dropped weights feed both p v and the value term
        p = F.dropout(p, req.dropout_p, training=True)
    return ungroup_rows(group_rows(p, G) @ req.v, G) + enc.value(p, req.qpos, req.kpos).to(dtype)


def past_columns(req: Request) -> int | None:
    """For a causal call on default positions: how many of the ``Nq + Nk - 1`` offset columns of
    :func:`relpos.offsets.skew_rows` a query can see (``j - i <= q_offset``); None otherwise."""
    if not (req.causal and req.contiguous):
        return None
    Nq, Nk = req.shape[2], req.shape[3]
    return min(Nq + req.q_offset, Nq + Nk - 1)


def _relative_key_parts(req: Request, q: Tensor, W: int | None) -> tuple[Tensor, Tensor, Tensor] | None:
    """``(q + u, q + v, keys)`` of a :class:`RelativeKeys` scheme on contiguous positions, ``keys`` ``(H, W, D)``
    on the first ``W`` offset columns (all ``Nq + Nk - 1`` when None) with the scale folded in (on the keys, not
    on their ``(B, H, Nq, W)`` product); None where the form does not apply (other schemes, explicit positions,
    grouped heads)."""
    enc = req.encoding
    if not req.contiguous or req.groups != 1 or enc.acts_on - {"embedding", "qk"} != {"score"}:
        return None
    rk = enc.relative_keys()
    if rk is None:
        return None
    offs = offsets_range(req.shape[2], req.shape[3], req.q_offset).to(q.device)
    keys = rk.keys(offs if W is None else offs[:W]).to(q.dtype) * req.scale  # (H, W, D)
    qu = q if rk.u is None else q + rk.u.to(q.dtype)[None, :, None, :]
    qv = q if rk.v is None else q + rk.v.to(q.dtype)[None, :, None, :]
    return qu, qv, keys


def _relative_key_term(req: Request, q: Tensor) -> tuple[Tensor, Tensor, bool] | None:
    """For a score of the :class:`RelativeKeys` form on contiguous positions: ``(q + u, term, causal_in_term)``.

    ``scale (q . k + u . k + (q + v) . r(j - i))`` is ``scale (q + u) . k`` plus the term
    ``scale (q + v) . r`` formed on the ``Nq + Nk - 1`` offsets (one matmul) and expanded
    by :func:`relpos.offsets.skew_rows` (B, H, Nq, Nk); a causal call forms only the offsets its
    queries see and gets -inf for the future keys (:func:`relpos.offsets.skew_rows_past`: the causal
    mask is then in the term, ``causal_in_term``). None where the form does not apply (other schemes,
    explicit positions, grouped heads).
    """
    Nq, Nk = req.shape[2], req.shape[3]
    W = past_columns(req)
    parts = _relative_key_parts(req, q, W)
    if parts is None:
        return None
    qu, qv, keys = parts
    if W is not None and W >= Nk:  # causal: one matmul per head over the batch's rows (measured faster)
        return qu, skewed_product(qv, keys, Nk), True
    per = torch.matmul(qv, keys.transpose(-1, -2))  # (B, H, Nq, W)
    if W is not None:  # W < Nk: keys past every query's reach
        return qu, skew_rows_past(per, Nq, Nk), True
    # all Nq + Nk - 1 offsets (bidirectional): skewed_product measured 0.95-1.07x of this here
    return qu, skew_rows(per, Nq, Nk), False


def _blocked_relative_keys(req: Request, q: Tensor, k: Tensor) -> Tensor | None:
    """Training-time causal self-attention of a :class:`RelativeKeys` scheme by row blocks that form only their
    slice of the term (:mod:`relpos.attention.dense_relkey`), in place of the whole skewed term through
    :class:`_TermAttention` or :class:`_CausalTermAttention`, at the sizes its ``relkey_blocks`` picks; None
    elsewhere."""
    B, H, Nq, Nk, _ = req.shape
    if not (req.causal and req.q_offset == 0 and Nq == Nk
            and req.key_padding_mask is None and req.attn_mask is None and req.dropout_p == 0
            and torch.is_grad_enabled() and q.dtype in (torch.float32, torch.float64)
            and q.dtype == k.dtype == req.v.dtype):
        return None
    n = dense_relkey.relkey_blocks(B, H, Nq, q.shape[-1])  # 0: the whole square
    if n == 0:
        return None
    parts = _relative_key_parts(req, q, Nq)  # the past offsets d <= 0
    if parts is None or not any(t.requires_grad for t in (q, k, req.v, parts[2])):
        return None
    qu, qv, keys = parts
    return dense_relkey.causal_relkey_attention(qu, qv, k, req.v, keys, req.scale, causal_blocks(Nq, Nk, 0, n))


def run(req: Request) -> Tensor:
    check_finite(req)
    enc = req.encoding
    if not enc.acts_on - {"embedding"} and req.key_padding_mask is None and req.attn_mask is None \
            and req.groups == 1 and (not req.causal or (req.q_offset == 0 and req.q.shape[2] == req.k.shape[2])):
        # nothing inside attention and no masks beyond plain causality (a position-free model): the fused call,
        # without the term, mask and row passes below (about 80 us of interpreter time per call)
        return F.scaled_dot_product_attention(req.q, req.k, req.v, is_causal=req.causal, scale=req.scale,
                                              dropout_p=req.dropout_p)
    q, k = rotated_qk(req)  # (B, H, Nq, D), (B, Hkv, Nk, D)
    B, H, Nq, Nk, _ = req.shape
    G = req.groups
    dtype = q.dtype
    toeplitz_causal = req.causal and req.toeplitz and req.contiguous
    if (out := _blocked_relative_keys(req, q, k)) is not None:
        return out
    rel = _relative_key_term(req, q)
    if rel is not None:  # Transformer-XL's form: the content bias u joins q for q . k
        q, add, causal_in_term = rel
    else:
        add, causal_in_term = additive_terms(req, q, k, causal_fill=toeplitz_causal, past=True)
    valid = row_has_key(req)  # (B, 1, Nq, 1) or None

    # Fast cases: no term and plain causal (or no) masking -> the fused kernel's own causal mode.
    no_masks = req.key_padding_mask is None and req.attn_mask is None
    plain_causal = req.causal and no_masks and req.q_offset == 0 and Nq == Nk
    drop = req.dropout_p
    if add is None and "value" not in enc.acts_on:
        if not req.causal and no_masks:
            return _sdpa(q, k, req.v, None, req.scale, G, drop)
        if plain_causal and G == 1:
            return F.scaled_dot_product_attention(q, k, req.v, is_causal=True, scale=req.scale, dropout_p=drop)
        if plain_causal:  # grouped: query heads g, g + G, ... against the shared k, v (no copy, fused causal)
            outs = [F.scaled_dot_product_attention(q[:, g::G], k, req.v, is_causal=True, scale=req.scale,
                                                   dropout_p=drop)
                    for g in range(G)]  # (B, Hkv, Nq, Dv) each
            return torch.stack(outs, 2).reshape(B, H, Nq, -1)

    # the boolean mask still to apply (causality is already in `add` when toeplitz_causal)
    mask = None
    if valid is not None:
        mask = req.mask() | ~valid  # rows without keys attend everywhere, then are zeroed
    elif req.attn_mask is not None:
        mask = req.mask()  # (B|1, H|1, Nq, Nk); a causal mask already in the term does no harm
    elif req.causal and not (toeplitz_causal or causal_in_term):
        mask = req.mask()  # (B|1, 1, Nq, Nk)
    elif req.key_padding_mask is not None:
        mask = req.key_padding_mask[:, None, None, :]  # (B, 1, 1, Nk)

    if "value" in enc.acts_on:
        out = _with_value_term(req, q, k, add, mask)
    else:
        # a causal call whose every row has a key: its term is -inf past i + q_offset (in the term or the mask)
        offset = req.q_offset if req.causal and valid is None else None
        out = _sdpa(q, k, req.v, mask if add is None else _masked_term(add, mask, dtype), req.scale, G, drop,
                    causal_offset=offset)
    if valid is not None:
        out = out * valid.to(out.dtype)
    return out
