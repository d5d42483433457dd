"""The ``"sdpa"`` engine: no position term inside attention (NoPE, RoPE, xPos after rotation).

:func:`torch.nn.functional.scaled_dot_product_attention` is already a fused,
memory-efficient kernel; it serves requests with no key padding that are either
bidirectional or plainly causal (no query offset, ``Nq == Nk``).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from relpos.attention import Request

NAME = "sdpa"


def eligible(req: Request) -> bool:
    """No term inside attention, no padding, and a mask SDPA's own causal mode expresses."""
    if req.encoding.acts_on - {"embedding", "qk"} or req.key_padding_mask is not None:
        return False
    return not req.causal or (req.q_offset == 0 and req.q.shape[2] == req.k.shape[2])


def run(req: Request, q: Tensor, k: Tensor, tvals: Tensor | None, lo: int) -> Tensor:
    return F.scaled_dot_product_attention(q, k, req.v, is_causal=req.causal, scale=req.scale)
