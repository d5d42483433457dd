"""Forgetting gates (FoX): a data-dependent, ALiBi-like decay bias.

Paper: Lin, Nikishin, He and Courville 2025, "Forgetting Transformer: Softmax
Attention with a Forget Gate", https://arxiv.org/abs/2503.02130

Formula (causal attention only). Every key ``t`` carries a per-head forget gate
``f_t in (0, 1)``; the bias between query ``i`` and key ``j <= i`` is the log of
the product of the gates passed on the way back from ``i`` to ``j``::

    log f_t     = logsigmoid(w_h . k_t + b_h)
    logits[i, j] += sum_{t = j+1 .. i} log f_t  =  c_i - c_j,   c_t = sum_{s <= t} log f_s

so the bias is 0 on the diagonal, never positive, and never increases as ``j``
moves into the past. With ``w = 0`` it is ALiBi with slope ``-logsigmoid(b_h)``
per head (the paper's "data-independent" gate); data dependence lets a head
forget quickly after some tokens and slowly after others.

Gate input (a relpos design choice). The paper computes ``f_t`` from the
layer input ``x_t`` (``w_f^T x_t + b_f``); inside ``relpos.attention`` only q, k
and v exist, so the gate logit is a per-head linear function of the *key*
vector, ``w_h . k_t + b_h`` (``k_t = W_k x_t``, so this is the paper's gate with
``w_f`` restricted to the row space of that head's key projection). Parameters:
``gate_weight (H, D)`` ~ N(0, init_std^2) and ``gate_bias (H,)`` = ``bias_init`` (0, as
the paper's data-dependent gate).

Sign and scaling: the bias is in logit units, added *after* the ``1/sqrt(D)``
scaling; positions enter only through the order of keys (``integer_positions =
False``): query ``i`` sits at key index ``#{t : kpos_t <= qpos_i} - 1`` (see
:func:`relpos.encodings.cope.query_key_index`). Padding keys between ``j`` and
``i`` would contribute their gates (left and right padding never do).

Numerics: the gate logits, ``logsigmoid`` and the cumulative sum are computed in
float32 (float64 for float64 inputs); the bias is the difference of two
cumulative sums, exact up to float32 rounding of ``c``. A pair's term depends on
every key between the two (implementations pass every key of a row). Cached decoding is exact:
pass the whole cache as keys, the cumulative sum runs over it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from relpos.encodings.base import Encoding
from relpos.validation import MAX_TABLE, check_float, check_int
from relpos.encodings.cope import query_key_index

__all__ = ["ForgettingGate"]


class ForgettingGate(Encoding):
    """Per-token forget gates from the keys; cumulative log-gates as the bias.

    Args:
        n_heads: heads H.
        head_dim: per-head dimension D.
        init_std: std of the normal initialisation of ``gate_weight`` (default 0.02).
        bias_init: initial gate bias (default 0, i.e. ``f = 1/2`` for a zero key).

    Example:
        >>> enc = ForgettingGate(n_heads=1, head_dim=2, init_std=0.0, bias_init=math.log(3.0))
        >>> k = torch.zeros(1, 1, 3, 2); pos = torch.arange(3)[None]
        >>> s = enc.score(k, k, pos, pos, 1.0).detach()[0, 0]  # f = 3/4 everywhere
        >>> torch.allclose(s, torch.tensor([[0.0, 0, 0], [1, 0, 0], [2, 1, 0]]) * math.log(0.75))
        True
    """

    name = "fox"
    acts_on = frozenset({"score"})
    causal_only = True
    integer_positions = False
    paper = "https://arxiv.org/abs/2503.02130"

    def __init__(self, n_heads: int = 8, head_dim: int = 64, *, init_std: float = 0.02,
                 bias_init: float = 0.0) -> None:
        super().__init__(n_heads)
        check_int("head_dim", head_dim, 1, MAX_TABLE)
        check_float("init_std", init_std, 0)
        check_float("bias_init", bias_init)
        self.head_dim = head_dim
        self.gate_weight = nn.Parameter(torch.randn(n_heads, head_dim) * init_std)  # (H, D)
        self.gate_bias = nn.Parameter(torch.full((n_heads,), float(bias_init)))  # (H,)

    # ------------------------------------------------------------ fast path

    def log_forget_gates(self, k: Tensor) -> Tensor:
        """``log f_t`` per head and key.

        Args:
            k: ``(B, H, Nk, D)`` keys.
        Returns:
            ``(B, H, Nk)`` float32 (float64 for float64 keys), all <= 0.
        """
        cdt = torch.promote_types(k.dtype, torch.float32)
        logit = torch.einsum("bhjd,hd->bhj", k.to(cdt), self.gate_weight.to(cdt)) + self.gate_bias.to(cdt)[:, None]
        return F.logsigmoid(logit)

    def key_bias(self, k: Tensor, kpos: Tensor) -> Tensor:
        """``-c_j``: the score ``c_i - c_j`` minus its per-query part ``c_i`` (softmax ignores it).

        Returns ``(B, H, Nk)`` float32 (float64 for float64 keys).
        """
        return -self.log_forget_gates(k).cumsum(-1)

    def score(self, q: Tensor, k: Tensor, qpos: Tensor, kpos: Tensor, scale: float) -> Tensor:
        B, H, Nq, _ = q.shape
        Nk = k.shape[2]
        c = self.log_forget_gates(k).cumsum(-1)  # (B, H, Nk): c_t = sum_{s <= t} log f_s
        idx = query_key_index(qpos, kpos)  # (B|1, Nq)
        c_q = c.gather(-1, idx.clamp(min=0)[:, None].expand(B, H, Nq))  # (B, H, Nq): c_{i}
        out = c_q[..., :, None] - c[..., None, :]  # (B, H, Nq, Nk)
        j = torch.arange(Nk, device=idx.device)
        vis = (j[None, None, :] <= idx[:, :, None])[:, None]  # (B|1, 1, Nq, Nk)
        return out * vis

    # ------------------------------------------------------------ reference

    def reference_score(self, q: Tensor, k: Tensor, qpos: Tensor, kpos: Tensor, scale: float) -> Tensor:
        k = k.double()
        B, H, Nq, _ = q.shape
        Nk = k.shape[2]
        w, bias = self.gate_weight.double(), self.gate_bias.double()
        # log f_t = log sigmoid(w_h . k_t + b_h), written out
        logit = torch.einsum("bhtd,hd->bht", k, w) + bias[:, None]
        log_f = -torch.log1p(torch.exp(-logit))  # (B, H, Nk)
        Bp = max(B, qpos.shape[0], kpos.shape[0])
        qp_l, kp_l = qpos.expand(Bp, -1).tolist(), kpos.expand(Bp, -1).tolist()
        out = torch.zeros(B, H, Nq, Nk, dtype=torch.float64, device=q.device)
        for b in range(B):
            for i in range(Nq):
                last = sum(1 for t in kp_l[b] if t <= qp_l[b][i]) - 1  # the query's key index
                for j in range(last + 1):
                    out[b, :, i, j] = log_f[b, :, j + 1 : last + 1].sum(-1)  # sum_{t=j+1..i} log f_t
        return out
