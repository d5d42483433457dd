"""CoPE: contextual position encoding (positions counted by content gates).

Paper: Golovneva, Wang, Weston and Sukhbaatar 2024, "Contextual Position
Encoding: Learning to Count What's Important", https://arxiv.org/abs/2405.18719

Formula, for a query ``i`` and a key ``j <= i`` (causal attention only)::

    g_it = sigmoid(scale * q_i . k_t)                 gates (the content logits)
    p_ij = sum_{t = j .. i} g_it                      contextual position, clipped at npos_max - 1
    e[p] = (p - floor p) e[ceil p] + (1 - (p - floor p)) e[floor p]     interpolated embedding
    logits[i, j] += q_i . e[p_ij]

``p_ij`` counts backwards from the query: it is ``g_ii`` in ``(0, 1)`` for the
query's own key and grows (never shrinks) as ``j`` moves into the past, by at most
1 per key. ``e`` is a learned ``(npos_max, D)`` table (one per head with
``per_head=True``, else shared by the heads), zero-initialised as in the paper.

Sign and scaling: positions count the past (``p_ij`` is an analogue of
``i - j + 1``). The gates use the *scaled* content logits and the position term
``q_i . e[p_ij]`` is added in logit units *without* the ``1/sqrt(D)`` factor,
as in the paper's reference code (the term sits outside the scaling).

Which keys count. CoPE is driven by the order of keys, not by integer
positions (``integer_positions = False``): query ``i`` sits at key index
``idx(i) = #{t : kpos_t <= qpos_i} - 1`` (``q_offset + t`` for the default
positions, and the same for any increasing explicit positions), and the keys
``t <= idx(i)`` are its past. Explicit positions only serve to find that place.
Padding: ``score()`` does not see the padding mask, so a padding key lying
*between* ``j`` and ``i`` would add its gate to ``p_ij``. Left padding (the
usual for batched decoding) and right padding never lie between a real query
and a real key, so they change nothing; only padding in the middle of a row
(packed sequences) would.

Cost: besides the content logits it needs a reverse cumulative sum over keys,
so a pair's term depends on every key between them: an implementation may split
queries into blocks but must give :meth:`CoPE.score` every key of a row.
Gates, counts and interpolation are computed in float32 (float64 for float64
inputs). Cached decoding is exact: pass the whole cache as keys.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from relpos.encodings.base import Encoding, ScoreState
from relpos.kernels import cope as kcope
from relpos.validation import MAX_TABLE, check_bool, check_float, check_int

__all__ = ["CoPE", "query_key_index"]


def query_key_index(qpos: Tensor, kpos: Tensor) -> Tensor:
    """Key index of each query: ``#{t : kpos_t <= qpos_i} - 1``.

    Args:
        qpos: ``(B or 1, Nq)`` int64.
        kpos: ``(B or 1, Nk)`` int64.
    Returns:
        ``(B or 1, Nq)`` int64 (``-1`` if no key is at or before the query).
    """
    return (kpos[:, None, :] <= qpos[:, :, None]).sum(-1) - 1


class CoPE(Encoding):
    """Contextual position encoding.

    Args:
        n_heads: heads H.
        head_dim: per-head dimension D.
        npos_max: number of integer positions in the table (>= 2); counts are
            clipped at ``npos_max - 1``. Default 64.
        per_head: one table per head (default False: one table for all heads,
            as in the paper's code).
        init_std: std of the normal initialisation of the table (default 0:
            zeros, as in the paper).

    Parameters: ``pos_emb`` of shape ``(H or 1, npos_max, D)``.

    Example:
        >>> enc = CoPE(n_heads=1, head_dim=2, npos_max=8)
        >>> q = torch.tensor([[[[4.0, 0.0]] * 3]]); k = torch.tensor([[[[4.0, 0.0]] * 3]])
        >>> pos = torch.arange(3)[None]
        >>> enc.positions(q, k, pos, pos, scale=1.0).round()[0, 0]
        tensor([[1., 0., 0.],
                [2., 1., 0.],
                [3., 2., 1.]])
    """

    name = "cope"
    acts_on = frozenset({"score"})
    causal_only = True
    integer_positions = False
    reads_logits = True
    paper = "https://arxiv.org/abs/2405.18719"

    def __init__(
        self,
        n_heads: int = 8,
        head_dim: int = 64,
        *,
        npos_max: int = 64,
        per_head: bool = False,
        init_std: float = 0.0,
    ) -> None:
        super().__init__(n_heads)
        check_int("head_dim", head_dim, 1, MAX_TABLE)
        check_int("npos_max", npos_max, 2, MAX_TABLE)
        check_bool("per_head", per_head)
        check_float("init_std", init_std, 0)
        self.head_dim = head_dim
        self.npos_max = npos_max
        self.per_head = per_head
        self.pos_emb = nn.Parameter(torch.randn(n_heads if per_head else 1, npos_max, head_dim) * init_std)

    # ------------------------------------------------------------ fast path

    def _logits(self, q: Tensor, k: Tensor, qpos: Tensor, kpos: Tensor, scale: float) -> tuple[Tensor, Tensor]:
        """``(z, last)``: the scaled content logits ``(B, H, Nq, Nk)`` in the compute dtype and each
        query's last key index ``(B|1, Nq)``."""
        cdt = torch.promote_types(q.dtype, torch.float32)
        z = (q.to(cdt) * scale) @ k.to(cdt).transpose(-1, -2)  # (B, H, Nq, Nk); scaled on the narrow side
        return z, query_key_index(qpos, kpos)

    def _position_logits(self, q: Tensor) -> Tensor:
        """``q e^T`` ``(B, H, Nq, npos_max)`` in the compute dtype: each query against the integer positions."""
        cdt = torch.promote_types(q.dtype, torch.float32)
        return q.to(cdt) @ self.pos_emb.to(cdt).transpose(-1, -2)

    def positions(self, q: Tensor, k: Tensor, qpos: Tensor, kpos: Tensor, scale: float) -> Tensor:
        """Contextual positions ``p_ij`` (clipped at ``npos_max - 1``; 0 for future keys).

        Args:
            q: ``(B, H, Nq, D)``; k: ``(B, H, Nk, D)``; positions as in :meth:`score`.
        Returns:
            ``(B, H, Nq, Nk)`` float32 (float64 for float64 inputs).
        """
        z, last = self._logits(q, k, qpos, kpos, scale)
        return kcope.positions(z, last, self.npos_max - 1)

    def score(self, q: Tensor, k: Tensor, qpos: Tensor, kpos: Tensor, scale: float) -> Tensor:
        z, last = self._logits(q, k, qpos, kpos, scale)
        L = self._position_logits(q)  # (B, H, Nq, npos_max)
        # the compiled kernel (relpos.kernels.cope) where built, else the same numbers in PyTorch
        return kcope.term(z, L, last) if kcope.usable(z, L) else kcope.reference(z, L, last)

    # ----------------------------------------------- blocked engines (reads_logits)

    def score_state(self, q: Tensor, k: Tensor, qpos: Tensor, kpos: Tensor, scale: float,
                    past_only: bool = False) -> ScoreState:
        """Each query's logits against the integer positions, ``q e^T`` ``(B, H, Nq, npos_max)``,
        once per call; the gates come from the engine's own content logits (:attr:`reads_logits`)."""
        return ScoreState((self._position_logits(q),), ("q",), {})

    def score_with(self, state: ScoreState, qpos: Tensor, kpos: Tensor) -> Tensor:
        raise NotImplementedError("CoPE's term reads the content logits: engines call score_into (reads_logits)")

    def score_into(self, state: ScoreState, qpos: Tensor, kpos: Tensor, out: Tensor) -> tuple:
        """``out`` holds the block's scaled content logits; adds the term in place (the compiled
        kernel where built). Returns the block's context for :meth:`score_with_backward`."""
        return kcope.add_into(out, state.tensors[0], query_key_index(qpos, kpos))

    def score_with_backward(self, grads: ScoreState, qpos: Tensor, kpos: Tensor, ds: Tensor,
                            ctx: object = None) -> bool:
        """The term's gradient to the content logits into ``ds``, to ``q e^T`` into ``grads``."""
        kcope.add_backward(ctx, ds, grads.tensors[0])
        return True

    # ------------------------------------------------------------ reference

    def reference_score(self, q: Tensor, k: Tensor, qpos: Tensor, kpos: Tensor, scale: float) -> Tensor:
        q, k = q.double(), k.double()
        B, H, Nq, D = q.shape
        Nk = k.shape[2]
        emb = self.pos_emb.double().expand(H, -1, -1)  # (H, npos_max, D)
        Bp = max(B, qpos.shape[0], kpos.shape[0])
        qp_l, kp_l = qpos.expand(Bp, -1).tolist(), kpos.expand(Bp, -1).tolist()
        cap = float(self.npos_max - 1)
        out = torch.zeros(B, H, Nq, Nk, dtype=torch.float64, device=q.device)
        for b in range(B):
            for i in range(Nq):
                last = sum(1 for t in kp_l[b] if t <= qp_l[b][i]) - 1  # the query's key index
                if last < 0:
                    continue
                gates = torch.sigmoid(scale * torch.einsum("hd,htd->ht", q[b, :, i], k[b, :, : last + 1]))  # (H, T)
                for j in range(last + 1):
                    p = gates[:, j : last + 1].sum(-1).clamp(max=cap)  # (H,) = sum_{t=j..i} g_it
                    for h in range(H):
                        ph = p[h]
                        if math.isnan(ph.item()):  # NaN in q or k: the term is NaN, as in every impl
                            out[b, h, i, j] = math.nan
                            continue
                        lo, hi = math.floor(ph.item()), math.ceil(ph.item())
                        frac = ph - lo
                        e = frac * emb[h, hi] + (1 - frac) * emb[h, lo]
                        out[b, h, i, j] = q[b, h, i] @ e
        return out
