"""The ``"keybias"`` engine: a score that is a per-key bias up to a per-query constant (FoX).

Serves schemes whose :meth:`~relpos.encodings.base.Encoding.key_bias` gives ``b_j``
with ``score(i, j) = r_i + b_j`` on every visible pair, for plain causal
attention (no query offset, ``Nq == Nk``, no key padding, contiguous positions)
in float32/float64 with ``Dv == D``. Softmax ignores ``r_i``, so the logits are
``scale q_i . k_j + b_j``: one extra channel carries the bias, ``q' = [q, 1]``,
``k' = [k, b / scale]``, ``v' = [v, 0]``, and the whole call is one fused causal
:func:`~torch.nn.functional.scaled_dot_product_attention` (memory ``O(N)``);
autograd carries the gradient of ``b`` back to the scheme's parameters and to k.
Forgetting-attention's ``c_i - c_j`` (a rank-one structure in log space) is the
example: ``b_j = -c_j``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from relpos.attention import Request

NAME = "keybias"


def eligible(req: Request) -> bool:
    """A per-key score on plain causal attention, in float32/float64, with ``Dv == D``."""
    enc = req.encoding
    B, H, Nq, Nk, D = req.shape
    return (
        enc.acts_on - {"embedding", "qk"} == {"score"}
        and enc.implements("key_bias")
        and req.causal and req.q_offset == 0 and Nq == Nk
        and req.key_padding_mask is None and req.contiguous
        and req.q.dtype in (torch.float32, torch.float64)
        and req.v.shape[-1] == D
    )


def run(req: Request, q: Tensor, k: Tensor, tvals: Tensor | None, lo: int) -> Tensor:
    B, H, Nq, Nk, D = req.shape
    b = req.encoding.key_bias(k, req.kpos)  # (B, H, Nk), autograd to k and the scheme's parameters
    q2 = torch.cat([q, q.new_ones(B, H, Nq, 1)], -1)  # (B, H, Nq, D + 1)
    k2 = torch.cat([k, (b / req.scale).to(k.dtype)[..., None]], -1)  # (B, H, Nk, D + 1)
    v2 = torch.cat([req.v, req.v.new_zeros(B, H, Nk, 1)], -1)  # (B, H, Nk, D + 1)
    out = F.scaled_dot_product_attention(q2, k2, v2, is_causal=True, scale=req.scale)
    return out[..., :D]
