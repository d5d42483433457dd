"""Dense attention: materialise the position terms, then one fused softmax.

Position-only terms of Toeplitz schemes are evaluated on the ``Nq + Nk - 1``
distinct offsets and expanded once (:func:`relpos.distance.toeplitz`), never
from an ``Nq x Nk`` bucket computation, and never copied per batch element.
When a scheme adds nothing to the value side the final step is
``torch.nn.functional.scaled_dot_product_attention`` with the terms as an
additive mask.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from relpos.attention import Request
from relpos.distance import offsets_range, toeplitz


def supports(req: Request) -> str | None:
    return None


def position_bias(req: Request) -> Tensor:
    """The ``"bias"`` term, ``(B or 1, H, Nq, Nk)`` float32."""
    enc = req.encoding
    B, H, Nq, Nk, _ = req.shape
    if enc.toeplitz and req.contiguous:
        offs = offsets_range(Nq, Nk, req.q_offset).to(req.q.device)
        vals = enc.relative_bias(offs)  # (H, Nq + Nk - 1)
        return toeplitz(vals, Nq, Nk)[None]  # (1, H, Nq, Nk)
    return enc.bias(req.qpos, req.kpos)


def rotated_qk(req: Request) -> tuple[Tensor, Tensor]:
    enc = req.encoding
    if "qk" not in enc.acts_on:
        return req.q, req.k
    seq_len = int(req.kpos.max()) + 1
    q = enc.rotate(req.q, req.qpos, is_query=True, seq_len=seq_len)
    k = enc.rotate(req.k, req.kpos, is_query=False, seq_len=seq_len)
    return q, k


def additive_terms(req: Request, q: Tensor, k: Tensor) -> Tensor | None:
    """Sum of the bias and score terms in logit units, or None."""
    enc = req.encoding
    add = None
    if "bias" in enc.acts_on:
        add = position_bias(req)
    if "score" in enc.acts_on:
        s = enc.score(q, k, req.qpos, req.kpos, req.scale)
        add = s if add is None else add + s
    return add


def run(req: Request) -> Tensor:
    enc = req.encoding
    q, k = rotated_qk(req)  # (B, H, Nq, D), (B, H, Nk, D)
    add = additive_terms(req, q, k)  # (B|1, H|1, Nq, Nk) or None
    mask = req.mask()  # (B|1, 1, Nq, Nk) bool or None
    B, H, Nq, Nk, _ = req.shape
    dtype = q.dtype

    valid = None
    if mask is not None:
        valid = mask.any(dim=-1, keepdim=True)  # (B|1, 1, Nq, 1)
        if not bool(valid.all()):
            # Rows with no key: let them attend everywhere, then zero them.
            mask = mask | ~valid
        else:
            valid = None

    if "value" in enc.acts_on:
        logits = req.scale * (q @ k.transpose(-1, -2))
        if add is not None:
            logits = logits + add.to(dtype)
        if mask is not None:
            logits = logits.masked_fill(~mask, float("-inf"))
        p = torch.softmax(logits.float(), dim=-1).to(dtype)
        out = p @ req.v + enc.value(p, req.qpos, req.kpos).to(dtype)
    else:
        use_is_causal = (
            add is None and req.causal and req.key_padding_mask is None and req.q_offset == 0 and Nq == Nk
        )
        if use_is_causal:
            out = F.scaled_dot_product_attention(q, k, req.v, is_causal=True, scale=req.scale)
        else:
            attn_mask = None
            if add is not None:
                attn_mask = add.to(dtype)
                if mask is not None:
                    attn_mask = attn_mask.masked_fill(~mask, float("-inf"))
            elif mask is not None:
                attn_mask = mask
            out = F.scaled_dot_product_attention(q, k, req.v, attn_mask=attn_mask, scale=req.scale)
    if valid is not None:
        out = out * valid.to(out.dtype)
    return out
