"""Reference attention: float64, every term from the scheme's own reference.

This is the oracle the tests hold every other implementation to. It is written
for clarity, not speed: it forms the full ``(B, H, Nq, Nk)`` logits in float64.
"""

from __future__ import annotations

import torch
from torch import Tensor

from relpos.attention import Request, check_finite


def supports(req: Request) -> str | None:
    if req.dropout_p > 0:
        return (f"dropout_p={req.dropout_p} > 0: the float64 reference is deterministic (the oracle); "
                f"pass dropout_p=0 or use impl='dense'")
    return None


def masked_softmax(logits: Tensor, mask: Tensor | None) -> Tensor:
    """Softmax over the last dim; rows with no allowed entry give all zeros."""
    if mask is None:
        return torch.softmax(logits, dim=-1)
    filled = logits.masked_fill(~mask, float("-inf"))
    valid = mask.any(dim=-1, keepdim=True)
    filled = torch.where(valid, filled, torch.zeros_like(filled))
    return torch.where(valid, torch.softmax(filled, dim=-1), torch.zeros_like(filled))


def run(req: Request) -> Tensor:
    check_finite(req)
    enc = req.encoding
    seq_len = int(req.kpos.max()) + 1
    q = enc.reference_rotate(req.q, req.qpos, is_query=True, seq_len=seq_len).double()  # (B, H, Nq, D)
    G = req.groups  # grouped-query attention: the oracle simply repeats each key/value head G times
    k = enc.reference_rotate(req.k.repeat_interleave(G, 1), req.kpos, is_query=False, seq_len=seq_len).double()
    v = req.v.repeat_interleave(G, 1).double()  # (B, H, Nk, Dv)
    logits = req.scale * torch.einsum("bhtd,bhjd->bhtj", q, k)  # (B, H, Nq, Nk)
    b = enc.reference_bias(req.qpos, req.kpos)
    if b is not None:
        logits = logits + b
    s = enc.reference_score(q, k, req.qpos, req.kpos, req.scale)
    if s is not None:
        logits = logits + s
    p = masked_softmax(logits, req.mask())
    out = torch.einsum("bhtj,bhjd->bhtd", p, v)
    extra = enc.reference_value(p, req.qpos, req.kpos)
    if extra is not None:
        out = out + extra
    return out.to(req.q.dtype)
