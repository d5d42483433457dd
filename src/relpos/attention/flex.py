"""FlexAttention (``impl="flex"``): each scheme's logit term as a ``score_mod``.

:func:`torch.nn.attention.flex_attention.flex_attention` calls a small function
``score_mod(score, b, h, q_idx, kv_idx)`` on every logit; with ``torch.compile``
it is fused into one attention kernel (the fast path on GPUs). Masks (causal,
``key_mask``, ``attn_mask``) go into a ``BlockMask`` so fully masked blocks are
skipped. Dropout (``dropout_p > 0``) is refused: FlexAttention has none.

How each kind of scheme is written as a ``score_mod`` (``d = j - i``):

* rotary schemes (RoPE, xPos): q and k are rotated first; no ``score_mod``.
* Toeplitz biases (ALiBi, T5, KERPLE, Sandwich, DPB, ...): the bias is evaluated
  on the distinct offsets, ``vals (H, L)``, and the ``score_mod`` looks up
  ``vals[h, d - d_min]``. Learned tables keep their gradient through the
  captured ``vals`` (GPU backward).
* clipped key tables (:meth:`~relpos.encodings.base.Encoding.clipped_tables`,
  Shaw): ``scale * q @ aK^T`` gives ``(B, H, Nq, 2k + 1)`` per-offset
  scores and the ``score_mod`` picks ``[b, h, q, clip(d) + k]`` (``O(N k)``).
* any other bias or score (FIRE, Transformer-XL, DeBERTa, CoPE, FoX): the term is
  materialised once, ``(B or 1, H, Nq, Nk)``, and looked up -- correct and fused,
  but its memory is ``O(N^2)``.
* value terms (Shaw's value table) cannot be a ``score_mod``: unsupported.

On CPU PyTorch has no FlexAttention backward, so a request that needs gradients
raises :class:`~relpos.attention.UnsupportedError` (use ``impl="chunked"``), and the
forward runs uncompiled (a materialising reference implementation in PyTorch),
which is what the tests use to check every ``score_mod`` against the reference.
On CUDA the call is compiled (:data:`COMPILE`).
"""

from __future__ import annotations

import importlib.util
import warnings

import torch
from torch import Tensor

from relpos.attention import Request
from relpos.attention.dense import additive_terms, rotated_qk, row_has_key
from relpos.offsets import offsets_range

__all__ = ["supports", "expressible", "run", "available", "COMPILE"]

#: Compile flex_attention: None = on CUDA only; True/False to force.
COMPILE: bool | None = None

_compiled = {}
#: Causal block masks without key padding, by ``(Nq, Nk, q_offset, device)``: they depend on nothing else, and
#: building one evaluates the mask on every ``(q, k)`` pair, ``O(Nq Nk)`` work on every call before the cache.
_CAUSAL_MASKS: dict = {}
#: Entries kept (oldest dropped first); a BlockMask holds ``O(Nq Nk / 128^2)`` integers.
CAUSAL_MASKS_MAX = 16


def available() -> bool:
    """Whether this PyTorch has FlexAttention."""
    return importlib.util.find_spec("torch.nn.attention.flex_attention") is not None


def _needs_grad(req: Request) -> bool:
    if not torch.is_grad_enabled():
        return False
    if any(t.requires_grad for t in (req.q, req.k, req.v)):
        return True
    return any(p.requires_grad for p in req.encoding.parameters())


def expressible(req: Request) -> str | None:
    """Why this request cannot be written as FlexAttention at all (None if it can)."""
    if not available():
        return "this PyTorch has no torch.nn.attention.flex_attention"
    if "value" in req.encoding.acts_on:
        return "a value-side term (Shaw's value table) cannot be written as a FlexAttention score_mod"
    return None


def supports(req: Request) -> str | None:
    reason = expressible(req)
    if reason:
        return reason
    if req.dropout_p > 0:
        return f"dropout_p={req.dropout_p} > 0: FlexAttention has no attention dropout; use impl='dense'"
    if req.q.device.type == "cpu" and _needs_grad(req):
        return (
            "PyTorch has no FlexAttention backward on CPU; run under torch.no_grad() "
            "(inference) or use impl='chunked' for training on CPU"
        )
    if req.q.dtype != req.k.dtype or req.q.dtype != req.v.dtype:
        return "q, k and v must share a dtype"
    return None


def _flex_fn(device: torch.device):
    from torch.nn.attention.flex_attention import flex_attention

    use = COMPILE if COMPILE is not None else device.type == "cuda"
    if not use:
        return flex_attention
    fn = _compiled.get("flex")
    if fn is None:
        fn = _compiled["flex"] = torch.compile(flex_attention, dynamic=False)
    return fn


def _score_mod(req: Request, q: Tensor, k: Tensor):
    """A ``score_mod`` adding the scheme's bias and score terms, or None."""
    enc = req.encoding
    sites = enc.acts_on & {"bias", "score"}
    if not sites:
        return None
    B, H, Nq, Nk, _ = req.shape
    qo = req.q_offset
    qpos, kpos = req.qpos, req.kpos
    qb = 0 if qpos.shape[0] == 1 else None  # batch index into positions
    kb = 0 if kpos.shape[0] == 1 else None

    def offset(b, q_idx, kv_idx):
        if req.contiguous:
            return kv_idx - q_idx - qo
        return kpos[kb if kb is not None else b, kv_idx] - qpos[qb if qb is not None else b, q_idx]

    if sites == {"bias"} and req.toeplitz:
        if req.contiguous:
            offs = offsets_range(Nq, Nk, qo).to(q.device)
        else:
            d = kpos[:, None, :] - qpos[:, :, None]
            offs = torch.arange(int(d.min()), int(d.max()) + 1, device=q.device)
        d_min = int(offs[0])
        vals = enc.relative_bias(offs).to(q.dtype)  # (H, L)
        hsel = vals.shape[0] > 1

        def mod(score, b, h, q_idx, kv_idx):
            return score + vals[h if hsel else 0, offset(b, q_idx, kv_idx) - d_min]

        return mod

    tables = enc.clipped_tables() if sites == {"score"} else None
    if tables is not None:
        kk = tables.k
        table = tables.key.to(q.dtype)
        a = table if table.dim() == 3 else table[None]  # (H|1, 2k+1, D)
        per_off = req.scale * torch.matmul(q, a.transpose(-1, -2))  # (B, H, Nq, 2k+1)

        def mod(score, b, h, q_idx, kv_idx):
            r = torch.clamp(offset(b, q_idx, kv_idx), -kk, kk) + kk
            return score + per_off[b, h, q_idx, r]

        return mod

    add = additive_terms(req, q, k).to(q.dtype)  # (B|1, H, Nq, Nk): materialised once
    ab = add.shape[0] > 1

    def mod(score, b, h, q_idx, kv_idx):
        return score + add[b if ab else 0, h, q_idx, kv_idx]

    return mod


def _block_mask(req: Request, rowbad: Tensor | None):
    """Causal and padding masks as a ``BlockMask``; rows in ``rowbad (B, Nq)`` ignore padding."""
    B, H, Nq, Nk, _ = req.shape
    if req.attn_mask is not None:
        return _full_block_mask(req, rowbad)
    if not req.causal and req.key_padding_mask is None:
        return None
    from torch.nn.attention.flex_attention import create_block_mask

    qo = req.q_offset
    kpm = req.key_padding_mask
    cache = kpm is None and not torch.compiler.is_compiling()  # a compiled caller traces the build instead
    key = (Nq, Nk, qo, str(req.q.device))
    if cache and key in _CAUSAL_MASKS:
        return _CAUSAL_MASKS[key]
    if kpm is not None and rowbad is not None:
        def pad(b, q_idx, kv_idx):
            return kpm[b, kv_idx] | rowbad[b, q_idx]
    elif kpm is not None:
        def pad(b, q_idx, kv_idx):
            return kpm[b, kv_idx]
    else:
        pad = None

    if req.causal and pad is not None:
        def mask_mod(b, h, q_idx, kv_idx):
            return (kv_idx <= q_idx + qo) & pad(b, q_idx, kv_idx)
    elif req.causal:
        def mask_mod(b, h, q_idx, kv_idx):
            return kv_idx <= q_idx + qo
    else:
        def mask_mod(b, h, q_idx, kv_idx):
            return pad(b, q_idx, kv_idx)

    bm = create_block_mask(mask_mod, B if kpm is not None else None, None, Nq, Nk, device=req.q.device,
                           _compile=req.q.device.type == "cuda")  # compiled: no (Nq, Nk) mask in memory
    if cache:
        if len(_CAUSAL_MASKS) >= CAUSAL_MASKS_MAX:
            _CAUSAL_MASKS.pop(next(iter(_CAUSAL_MASKS)))
        _CAUSAL_MASKS[key] = bm
    return bm


def _full_block_mask(req: Request, rowbad: Tensor | None):
    """With an ``attn_mask``: the whole mask (causal, key mask, attn_mask) read per pair; rows in
    ``rowbad (B|1, H|1, Nq)`` see every key (they are zeroed afterwards)."""
    from torch.nn.attention.flex_attention import create_block_mask

    m = req.mask()  # (B|1, H|1, Nq, Nk)
    if rowbad is not None:
        m = m | rowbad[..., None]
    mb, mh = m.shape[0] > 1, m.shape[1] > 1

    def mask_mod(b, h, q_idx, kv_idx):
        return m[b if mb else 0, h if mh else 0, q_idx, kv_idx]

    return create_block_mask(mask_mod, m.shape[0] if mb else None, m.shape[1] if mh else None, m.shape[2],
                             m.shape[3], device=req.q.device, _compile=req.q.device.type == "cuda")


def run(req: Request) -> Tensor:
    q, k = rotated_qk(req)
    mod = _score_mod(req, q, k)
    valid = row_has_key(req)  # (B, 1, Nq, 1), (B|1, H|1, Nq, 1) with an attn_mask, or None
    # rows without keys see all keys, then are zeroed
    rowbad = None if valid is None else (~valid[..., 0] if req.attn_mask is not None else ~valid[:, 0, :, 0])
    bm = _block_mask(req, rowbad)
    v = req.v
    if not torch.is_grad_enabled():  # flex refuses CPU inputs that merely carry requires_grad
        q, k, v = q.detach(), k.detach(), v.detach()
    fn = _flex_fn(q.device)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
        # grouped-query attention: flex reads key/value head h // G itself (enable_gqa), no copy
        out = fn(q, k, v, score_mod=mod, block_mask=bm, scale=req.scale, enable_gqa=req.groups > 1)
    if valid is not None:
        out = out * valid.to(out.dtype)
    return out
