"""Shaw et al. relative position representations: clipped key (and value) tables.

Paper: Shaw, Uszkoreit, Vaswani 2018, "Self-Attention with Relative Position
Representations", https://arxiv.org/abs/1803.02155 (sections 3.1-3.3)

Formula (eqs. 3, 4, 7 of the paper), for query ``i`` and key ``j``::

    r_ij   = clip(j - i, -k, k)                  # sign: d = j - i (key minus query)
    e_ij   = (q_i . k_j + q_i . aK[r_ij]) / sqrt(D)
    out_i  = sum_j p_ij (v_j + aV[r_ij])         # value table only if value=True

``aK`` and ``aV`` are learned ``(2k + 1, D)`` tables indexed by ``r + k``.
Scaling: the key term sits *inside* the ``1/sqrt(D)`` scaling, so
:meth:`Shaw.score` returns ``scale * q_i . aK[r_ij]``. The value term is added
to the attention output unscaled (:meth:`Shaw.value`).

Sharing: as in the paper, the tables are shared across heads by default
(``(2k + 1) x D`` each, e.g. 1,088 parameters for ``D = 64, k = 8``);
``per_head=True`` gives every head its own table ``(H, 2k + 1, D)``. Sharing
across layers is the model's choice (``share_encoding``); by default every layer
has its own tables, as in the paper.

Efficient form (section 3.3): ``q @ aK^T`` gives ``(B, H, Nq, 2k + 1)`` scores,
one per clipped offset, which are then gathered by each pair's offset; the value
term scatters ``p`` into the same ``2k + 1`` offset slots and multiplies by
``aV``. No ``Nq x Nk x D`` tensor is formed outside the reference.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from relpos.offsets import contiguous_offsets, skew_rows, skew_rows_past, skewed_product, unskew_rows
from relpos.encodings.base import ClippedTables, Encoding
from relpos.validation import MAX_TABLE, check_bool, check_float, check_int

__all__ = ["Shaw"]


def _against(x: Tensor, t: Tensor) -> Tensor:
    """``x (B, H, N, C) @ t (H|1, C, E)``: a shared table (``1``) as one matrix, so the product is one matmul over
    every row of the batch instead of ``B H`` small ones against copies of it."""
    return torch.matmul(x, t[0] if t.shape[0] == 1 else t)


class Shaw(Encoding):
    """Clipped relative position representations (Shaw et al. 2018).

    Args:
        n_heads: heads H.
        head_dim: per-head dimension D (the table width).
        k: clipping distance, an int >= 0. Offsets beyond ``+-k`` share the end
            rows; ``k = 0`` leaves one row (no position information beyond a
            constant). Default 16 (the paper's translation experiments use
            k = 16; its ablation finds no gain beyond k >= 2).
        value: also learn the value table ``aV`` (registry name ``"shaw-kv"``).
        per_head: one table per head ``(H, 2k + 1, D)`` instead of one shared.
        init_std: std of the normal initialisation of the tables.

    Parameters: ``key_table`` ``(2k + 1, D)`` or ``(H, 2k + 1, D)``, and
    ``value_table`` of the same shape when ``value=True``.

    Example:
        >>> enc = Shaw(n_heads=8, head_dim=64, k=8)
        >>> enc.num_params()
        1088
        >>> q = k = torch.randn(1, 8, 5, 64)
        >>> pos = torch.arange(5)[None]
        >>> enc.score(q, k, pos, pos, scale=0.125).shape
        torch.Size([1, 8, 5, 5])
    """

    name = "shaw"
    pairwise_score = True  # a pair's score reads that pair only: any key range may be evaluated alone
    acts_on = frozenset({"score"})
    relative = True
    integer_positions = True
    paper = "https://arxiv.org/abs/1803.02155"

    @classmethod
    def options_for_length(cls, train_len: int) -> dict:
        """Length-relative range (``relpos compare``'s rule): ``k = train_len - 1``, so every training
        offset has its own row and offsets past the training length share the edge row."""
        return {"k": max(int(train_len) - 1, 1)}

    def __init__(
        self,
        n_heads: int = 8,
        head_dim: int = 64,
        *,
        k: int = 16,
        value: bool = False,
        per_head: bool = False,
        init_std: float = 0.02,
    ) -> None:
        super().__init__(n_heads)
        check_int("head_dim", head_dim, 1, MAX_TABLE)
        check_int("k (the Shaw clipping distance)", k, 0, MAX_TABLE)
        check_bool("value", value)
        check_bool("per_head", per_head)
        check_float("init_std", init_std, 0)
        self.head_dim = head_dim
        self.k = k
        self.use_value = value
        self.per_head = per_head
        # The registry name of this configuration: ``impl="auto"``'s measured table keys its rows by it.
        self.name = "shaw-kv" if value else "shaw"
        shape = (n_heads, 2 * k + 1, head_dim) if per_head else (2 * k + 1, head_dim)
        self.key_table = nn.Parameter(torch.randn(shape) * init_std)
        if value:
            self.value_table = nn.Parameter(torch.randn(shape) * init_std)
        else:
            self.register_parameter("value_table", None)
        # A per-instance site set: the value site only exists with a value table.
        self.acts_on = frozenset({"score", "value"}) if value else frozenset({"score"})

    # ------------------------------------------------------------ capabilities

    def clipped_tables(self) -> ClippedTables:
        return ClippedTables(self.k, self.key_table, self.value_table)

    def check_dims(self, head_dim: int, value_dim: int) -> None:
        if head_dim != self.head_dim:
            raise ValueError(f"q and k must have D = {self.head_dim} (the key table's width), got D = {head_dim}")
        if self.value_table is not None and value_dim != self.head_dim:
            raise ValueError(
                f"v must have Dv = {self.head_dim} (the width of Shaw's value table), got Dv = {value_dim}"
            )

    # ------------------------------------------------------------ helpers

    def rel_index(self, qpos: Tensor, kpos: Tensor) -> Tensor:
        """Row of the table each pair uses: ``clip(j - i, -k, k) + k``, ``(B|1, Nq, Nk)`` int64."""
        d = kpos[:, None, :].long() - qpos[:, :, None].long()  # (B|1, Nq, Nk)
        return d.clamp(-self.k, self.k) + self.k

    def _table(self, table: Tensor, H: int, dtype: torch.dtype) -> Tensor:
        """The table as ``(H or 1, 2k + 1, D)`` in ``dtype``."""
        t = table.to(dtype)
        return t if self.per_head else t[None]

    def _check_heads(self, H: int) -> None:
        if self.per_head and H != self.n_heads:
            raise ValueError(f"per-head Shaw tables were built for n_heads={self.n_heads}, got H={H}")

    # ------------------------------------------------------------ fast paths

    def _offset_rows(self, qpos: Tensor, kpos: Tensor, table: Tensor, past: bool = False) -> Tensor | None:
        """For shared consecutive positions: the table row of every offset in skewed order,
        ``(H|1, Nq + Nk - 1, D)`` (a slice when no offset is clipped); else None. ``past``: only the
        offsets ``j - i <= 0``, the first columns (None if there are none)."""
        offs = contiguous_offsets(qpos, kpos)
        if offs is None:
            return None
        if past:
            offs = offs[offs <= 0]
            if offs.numel() == 0:
                return None
        lo, hi = int(offs[0]), int(offs[-1])
        if -self.k <= lo and hi <= self.k:
            return table[:, lo + self.k: hi + self.k + 1]
        return table[:, offs.clamp(-self.k, self.k) + self.k]

    def score(self, q: Tensor, k: Tensor, qpos: Tensor, kpos: Tensor, scale: float) -> Tensor:
        B, H, Nq, D = q.shape
        Nk = k.shape[2]
        self._check_heads(H)
        a = self._table(self.key_table, H, q.dtype)  # (H|1, R, D), R = 2k + 1
        rows = self._offset_rows(qpos, kpos, a)
        if rows is not None:  # q_i . aK[offset] on the Nq + Nk - 1 offsets, then the relative shift
            per_offset = _against(q, (rows * scale).transpose(-1, -2))  # (B, H, Nq, Nq + Nk - 1)
            return skew_rows(per_offset, Nq, Nk)  # (B, H, Nq, Nk)
        per_offset = _against(q, a.transpose(-1, -2))  # (B, H, Nq, R): q_i . aK[r] for every r
        idx = self.rel_index(qpos, kpos).to(q.device)  # (B|1, Nq, Nk)
        idx = idx[:, None].expand(B, H, Nq, Nk)
        return scale * torch.gather(per_offset, -1, idx)  # (B, H, Nq, Nk)

    def score_past(self, q: Tensor, k: Tensor, qpos: Tensor, kpos: Tensor, scale: float) -> Tensor | None:
        """The score on the offsets ``j - i <= 0`` only (about half the matmul and shift of :meth:`score`
        for self-attention), -inf for future keys."""
        B, H, Nq, D = q.shape
        Nk = k.shape[2]
        self._check_heads(H)
        rows = self._offset_rows(qpos, kpos, self._table(self.key_table, H, q.dtype), past=True)
        if rows is None:
            return None
        if rows.shape[1] >= Nk:  # one matmul over every query row (shared or per-head table)
            return skewed_product(q, rows * scale, Nk)  # (B, H, Nq, Nk), -inf past the diagonal
        per_offset = _against(q, (rows * scale).transpose(-1, -2))  # (B, H, Nq, W), W <= Nq + Nk - 1
        return skew_rows_past(per_offset, Nq, Nk)  # (B, H, Nq, Nk), -inf past the diagonal

    def value(self, p: Tensor, qpos: Tensor, kpos: Tensor) -> Tensor:
        if self.value_table is None:
            raise NotImplementedError("this Shaw encoding has no value table; build it with value=True ('shaw-kv')")
        B, H, Nq, Nk = p.shape
        self._check_heads(H)
        a = self._table(self.value_table, H, p.dtype)  # (H|1, R, D)
        rows = self._offset_rows(qpos, kpos, a)
        if rows is not None:  # weight per offset (a strided write), then against each offset's row
            return _against(unskew_rows(p), rows)  # (B, H, Nq, D)
        R = 2 * self.k + 1
        idx = self.rel_index(qpos, kpos).to(p.device)[:, None].expand(B, H, Nq, Nk)  # (B, H, Nq, Nk)
        mass = p.new_zeros(B, H, Nq, R).scatter_add(-1, idx, p)  # (B, H, Nq, R): weight per clipped offset
        return _against(mass, a)  # (B, H, Nq, D)

    # ------------------------------------------------------------ references

    def _ref_relations(self, table: Tensor, qpos: Tensor, kpos: Tensor) -> Tensor:
        """``a[clip(j - i)]`` for every pair, float64 ``(B, H or 1, Nq, Nk, D)`` (reference only)."""
        t = table.double()
        if not self.per_head:
            t = t[None]  # (1, R, D)
        B = max(qpos.shape[0], kpos.shape[0])
        qp, kp = qpos.expand(B, -1).tolist(), kpos.expand(B, -1).tolist()
        out = []
        for b in range(B):
            rows = []
            for i in qp[b]:
                cols = []
                for j in kp[b]:
                    r = min(max(j - i, -self.k), self.k)
                    cols.append(t[:, r + self.k])  # (H|1, D)
                rows.append(torch.stack(cols, dim=1))  # (H|1, Nk, D)
            out.append(torch.stack(rows, dim=1))  # (H|1, Nq, Nk, D)
        return torch.stack(out)  # (B, H|1, Nq, Nk, D)

    def reference_score(self, q: Tensor, k: Tensor, qpos: Tensor, kpos: Tensor, scale: float) -> Tensor:
        self._check_heads(q.shape[1])
        rel = self._ref_relations(self.key_table, qpos, kpos).to(q.device)  # (B, H|1, Nq, Nk, D)
        rel = rel.expand(q.shape[0], q.shape[1], -1, -1, -1)
        return scale * torch.einsum("bhtd,bhtjd->bhtj", q.double(), rel)

    def reference_value(self, p: Tensor, qpos: Tensor, kpos: Tensor) -> Tensor | None:
        if self.value_table is None:
            return None
        self._check_heads(p.shape[1])
        rel = self._ref_relations(self.value_table, qpos, kpos).to(p.device)
        rel = rel.expand(p.shape[0], p.shape[1], -1, -1, -1)
        return torch.einsum("bhtj,bhtjd->bhtd", p.double(), rel)
