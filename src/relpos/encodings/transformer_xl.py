"""Transformer-XL relative attention: global content/position biases u, v and a
projected sinusoid of the distance.

Paper: Dai et al. 2019, "Transformer-XL: Attentive Language Models Beyond a
Fixed-Length Context", https://arxiv.org/abs/1901.02860 (section 3.3)

Formula. With ``q_i = W_q x_i`` and ``k_j = W_k x_j`` per head, the paper's
relative score is the sum of four terms::

    A_ij = q_i . k_j            (a) content
         + q_i . W_R R_{i-j}    (b) content-dependent position
         + u   . k_j            (c) global content bias
         + v   . W_R R_{i-j}    (d) global position bias

and the logit is ``A_ij / sqrt(D)``: all four terms sit *inside* the scaling.
relpos forms ``(a)`` itself (``scale * q.k``), so :meth:`TransformerXL.score`
returns ``scale * ((c) + (b) + (d)) = scale * (u . k_j + (q_i + v) . W_R R_{i-j})``.

Sign convention: Transformer-XL's own, the distance ``r = i - j`` (query minus
key), which is >= 0 for the past keys of causal attention. relpos elsewhere
writes ``d = j - i``; here ``r = -d``. ``R_r`` is the sinusoid of ``r`` in
Transformer-XL's concatenated layout::

    R_r = [sin(r w_0), ..., sin(r w_{C/2-1}), cos(r w_0), ..., cos(r w_{C/2-1})],
    w_c = base^(-2c / C)

with ``C = d_model`` and ``base = 10000`` (computed in float32, float64 in the
reference; an odd ``C`` drops the last ``cos``). Negative ``r`` (future keys in
bidirectional attention) use the same formula.

Parameters: ``r_proj`` = ``W_R``, a ``d_model -> H * D`` projection stored as
``(H, D, C)`` (one ``D``-wide slice per head); ``u`` and ``v``, ``(H, D)`` each.

Sharing across layers: in the paper ``u`` and ``v`` are single global vectors
shared by every layer, while ``W_R`` belongs to each layer (the released code's
``untie_r`` flag gives per-layer ``u, v`` instead). In relpos a scheme module is
one unit: the model's ``share_encoding`` option shares the whole module (``u``,
``v`` *and* ``W_R``) across layers; the default (False) gives every layer its own
``u``, ``v`` and ``W_R``, i.e. the ``untie_r=True`` setting.

Positions: distances come from ``qpos`` and ``kpos``, so cached decoding
(``q_offset > 0``) and segment recurrence (keys = memory of earlier segments +
the current segment) give exactly the distances of one long sequence.

Efficient form: ``R`` and ``W_R R`` are evaluated once per *distinct* distance
(``Nq + Nk - 1`` of them for contiguous positions), ``(q + v)`` is multiplied by
those ``(H, L, D)`` rows giving ``(B, H, Nq, L)``, and a gather by each pair's
distance (Transformer-XL's "relative shift") yields ``(B, H, Nq, Nk)``. No
``Nq x Nk x D`` tensor is formed outside the reference.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from relpos.encodings.base import Encoding, RelativeKeys
from relpos.validation import MAX_TABLE, check_float, check_int

__all__ = ["TransformerXL", "txl_sinusoid"]


def txl_sinusoid(r: Tensor, dim: int, base: float = 10000.0, *, dtype: torch.dtype = torch.float32) -> Tensor:
    """Transformer-XL's position sinusoid ``[sin(r w), cos(r w)]``.

    Args:
        r: integer distances ``i - j``, any shape ``S``.
        dim: width ``C`` (>= 1).
        base: wavelength base (> 1).
        dtype: float32 or float64.

    Returns:
        ``(*S, C)`` tensor.

    Example:
        >>> txl_sinusoid(torch.tensor([0, 1]), 4)
        tensor([[0.0000, 0.0000, 1.0000, 1.0000],
                [0.8415, 0.0100, 0.5403, 0.9999]])
    """
    half = (dim + 1) // 2
    inv_freq = base ** (-torch.arange(0, 2 * half, 2, dtype=dtype, device=r.device) / dim)  # (ceil(C/2),)
    ang = r.to(dtype)[..., None] * inv_freq  # (*S, ceil(C/2))
    return torch.cat((ang.sin(), ang.cos()), dim=-1)[..., :dim]


class TransformerXL(Encoding):
    """Transformer-XL relative attention term (Dai et al. 2019).

    Args:
        n_heads: heads H.
        head_dim: per-head dimension D.
        d_model: width ``C`` of the sinusoid ``R`` (input of ``W_R``); defaults
            to ``H * D``.
        base: sinusoid wavelength base (> 1), 10000 in the paper.
        init_std: std of the normal initialisation of ``u`` and ``v``
            (``W_R`` is initialised with std ``1/sqrt(C)``).

    Parameters: ``r_proj (H, D, C)``, ``u (H, D)``, ``v (H, D)``; in all
    ``H * D * (C + 2)``.

    Example:
        >>> enc = TransformerXL(n_heads=2, head_dim=4)
        >>> enc.num_params()
        80
        >>> q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4)
        >>> enc.score(q, k, torch.tensor([[2, 3, 4]]), torch.arange(5)[None], scale=0.5).shape
        torch.Size([1, 2, 3, 5])
    """

    name = "transformer-xl"
    pairwise_score = True  # a pair's score reads that pair only: any key range may be evaluated alone
    acts_on = frozenset({"score"})
    relative = True
    integer_positions = True
    paper = "https://arxiv.org/abs/1901.02860"

    def __init__(
        self,
        n_heads: int = 8,
        head_dim: int = 64,
        d_model: int | None = None,
        *,
        base: float = 10000.0,
        init_std: float = 0.02,
    ) -> None:
        super().__init__(n_heads)
        check_int("head_dim", head_dim, 1, MAX_TABLE)
        if d_model is None:
            d_model = n_heads * head_dim
        check_int("d_model", d_model, 1, MAX_TABLE)
        check_float("base", base, 1, lo_open=True)
        check_float("init_std", init_std, 0)
        self.head_dim = head_dim
        self.d_model = d_model
        self.base = float(base)
        self.r_proj = nn.Parameter(torch.randn(n_heads, head_dim, d_model) / math.sqrt(d_model))  # (H, D, C)
        self.u = nn.Parameter(torch.randn(n_heads, head_dim) * init_std)  # (H, D)
        self.v = nn.Parameter(torch.randn(n_heads, head_dim) * init_std)  # (H, D)

    def _check_heads(self, q: Tensor) -> None:
        if q.shape[1] != self.n_heads or q.shape[-1] != self.head_dim:
            raise ValueError(
                f"Transformer-XL was built for (H, D) = ({self.n_heads}, {self.head_dim}), "
                f"got q with H={q.shape[1]}, D={q.shape[-1]}"
            )

    def relative_keys(self) -> RelativeKeys:
        """``score = scale (u . k_j + (q_i + v) . W_R R_{i-j})``: relative keys ``W_R R_{-d}``."""
        return RelativeKeys(self.u, self.v, lambda d: self.projected(-d))

    def check_dims(self, head_dim: int, value_dim: int) -> None:
        if head_dim != self.head_dim:
            raise ValueError(f"q and k must have D = {self.head_dim} (Transformer-XL's head_dim), got D = {head_dim}")

    def projected(self, r: Tensor) -> Tensor:
        """``W_R R_r`` per head for distances ``r`` (shape ``(L,)``): float32 ``(H, L, D)``."""
        R = txl_sinusoid(r, self.d_model, self.base)  # (L, C) float32
        return torch.einsum("hdc,lc->hld", self.r_proj.float(), R)  # (H, L, D)

    @staticmethod
    def distinct_distances(qpos: Tensor, kpos: Tensor) -> tuple[Tensor, Tensor]:
        """The distinct distances ``r = i - j`` and each pair's index into them.

        For contiguous positions this is the ``Nq + Nk - 1`` consecutive
        distances. Otherwise the covering range ``min..max`` is used when it is
        no larger than ``Nq * Nk``, else the sorted unique values.

        Returns:
            ``(r (L,) int64, idx (B|1, Nq, Nk) int64)`` with ``r[idx] = i - j``.
        """
        dist = qpos[:, :, None].long() - kpos[:, None, :].long()  # (B|1, Nq, Nk)
        lo, hi = int(dist.min()), int(dist.max())
        if hi - lo + 1 <= dist.shape[1] * dist.shape[2]:  # always true for contiguous positions
            return torch.arange(lo, hi + 1, device=dist.device), dist - lo
        r, idx = torch.unique(dist, return_inverse=True)
        return r, idx

    def score(self, q: Tensor, k: Tensor, qpos: Tensor, kpos: Tensor, scale: float) -> Tensor:
        self._check_heads(q)
        B, H, Nq, D = q.shape
        Nk = k.shape[2]
        dtype = q.dtype
        content = torch.einsum("hd,bhjd->bhj", self.u.to(dtype), k)[:, :, None, :]  # (B, H, 1, Nk): (c)
        r, idx = self.distinct_distances(qpos.to(q.device), kpos.to(q.device))  # (L,), (B|1, Nq, Nk)
        wr = self.projected(r).to(dtype)  # (H, L, D)
        qv = q + self.v.to(dtype)[None, :, None, :]  # (B, H, Nq, D)
        per_dist = torch.matmul(qv, wr.transpose(-1, -2))  # (B, H, Nq, L): (b) + (d) per distance
        position = torch.gather(per_dist, -1, idx[:, None].expand(B, H, Nq, Nk))  # (B, H, Nq, Nk)
        return scale * (content + position)

    # ------------------------------------------------------------ reference

    def reference_score(self, q: Tensor, k: Tensor, qpos: Tensor, kpos: Tensor, scale: float) -> Tensor:
        self._check_heads(q)
        B = q.shape[0]
        C = self.d_model
        qp, kp = qpos.expand(B, -1).tolist(), kpos.expand(B, -1).tolist()
        w = [self.base ** (-2 * c / C) for c in range((C + 1) // 2)]  # frequencies w_c
        # R_{i-j} for every pair, from the formula, float64: (B, Nq, Nk, C).
        rel = []
        for b in range(B):
            rows = []
            for i in qp[b]:
                cols = []
                for j in kp[b]:
                    r = i - j  # Transformer-XL's sign: query minus key
                    vec = [math.sin(r * wc) for wc in w] + [math.cos(r * wc) for wc in w]
                    cols.append(vec[:C])
                rows.append(cols)
            rel.append(rows)
        R = torch.tensor(rel, dtype=torch.float64, device=q.device)  # (B, Nq, Nk, C)
        WR = self.r_proj.double()  # (H, D, C)
        u, v = self.u.double(), self.v.double()  # (H, D)
        q, k = q.double(), k.double()
        pos = torch.einsum("hdc,btjc->bhtjd", WR, R)  # (B, H, Nq, Nk, D): W_R R_{i-j}
        term_b = torch.einsum("bhtd,bhtjd->bhtj", q, pos)
        term_c = torch.einsum("hd,bhjd->bhj", u, k)[:, :, None, :]
        term_d = torch.einsum("hd,bhtjd->bhtj", v, pos)
        return scale * (term_b + term_c + term_d)
