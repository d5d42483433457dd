"""DeBERTa's disentangled attention: content-to-position and position-to-content.

Paper: He, Liu, Gao and Chen 2021, "DeBERTa: Decoding-enhanced BERT with
Disentangled Attention", https://arxiv.org/abs/2006.03654 (section 3.1), with the
DeBERTa-v2/v3 additions (log-bucketed positions, optional LayerNorm on the
position table, ``share_att_key``).

Formula. With ``r = i - j`` (**query minus key**, DeBERTa's own convention, the
opposite of relpos' usual ``j - i``) and the table row

    delta(i, j) = clamp(bucket(i - j) + S, 0, 2S - 1)

where ``S`` is the attention span (``position_buckets``, or
``max_relative_positions`` when bucketing is off) and ``bucket`` is
:func:`relpos.distance.deberta_log_bucket`, the logits are::

    logits[i, j] = (q_i . k_j  +  q_i . Kr[delta(i, j)]  +  k_j . Qr[delta(i, j)]) / sqrt(3 D)
                    content       content-to-position      position-to-content

with ``Kr = P Wk_r^T + bk_r`` and ``Qr = P Wq_r^T + bq_r`` the per-head
projections of a shared ``(2S, C)`` position table ``P`` (LayerNorm'd first when
``layer_norm=True``, as in DeBERTa-v3). The paper writes ``delta(j, i)`` in the
position-to-content term; the released code (and Hugging Face transformers'
``DisentangledSelfAttention``) gathers so that both terms use the same row
``delta(i, j)``. relpos follows the code, which the conformance test checks.

Scaling: every term is *inside* the scaling, which is ``1/sqrt(D * (1 + T))``
for ``T`` enabled position terms (``1/sqrt(3D)`` with both), so
:meth:`DeBERTa.attention_scale` overrides the default and :meth:`DeBERTa.score`
multiplies its terms by the ``scale`` it is given.

Sharing:

* ``share_projections=True`` (relpos option): one projection serves both the
  content-to-position keys and the position-to-content queries (``Kr = Qr``).
* ``share_att_key=True`` (DeBERTa-v2/v3 and Hugging Face's ``share_att_key``):
  the position table is projected with the attention layer's own *content*
  query and key projections. A scheme cannot see those from inside attention,
  so the layer must hand them over once with
  :meth:`DeBERTa.bind_content_projections`; calling attention before that is an
  error. They are held by reference, not registered as parameters of the scheme.

The position table and projections belong to the scheme: one set per layer,
or one for the whole model when the model shares its scheme across layers
(Hugging Face shares the table across layers but keeps per-layer projections).
DeBERTa is bidirectional in the paper; causal attention simply masks the future.
Position vectors are computed in float32 (float64 for float64 inputs).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from relpos.distance import deberta_log_bucket
from relpos.encodings.base import Encoding, ScoreState
from relpos.kernels import rows as krows
from relpos.validation import MAX_TABLE, check_bool, check_float, check_int

#: Pairs above which :meth:`DeBERTa.position_index` looks rows up per distinct distance.
_TABLE_FROM = 4096

__all__ = ["DeBERTa"]

_TERMS = ("c2p", "p2c")


def _parse_terms(terms) -> tuple[str, ...]:
    if isinstance(terms, str):
        parts = [t.strip().lower() for t in terms.replace(",", "|").split("|") if t.strip()]
    elif isinstance(terms, (list, tuple)) and all(isinstance(t, str) for t in terms):
        parts = [t.strip().lower() for t in terms]
    else:
        raise TypeError(f"terms must be a str like 'c2p|p2c' or a list of str, got {type(terms).__name__}")
    if not parts or any(p not in _TERMS for p in parts) or len(set(parts)) != len(parts):
        raise ValueError(f"terms must be a non-empty selection of {list(_TERMS)} without repeats, got {terms!r}")
    return tuple(t for t in _TERMS if t in parts)


class DeBERTa(Encoding):
    """Disentangled attention over (log-bucketed) relative positions.

    Args:
        n_heads: heads H.
        head_dim: per-head dimension D.
        d_model: width C of the position table (the model width).
        terms: which position terms to add: ``"c2p|p2c"`` (default), ``"c2p"``
            or ``"p2c"`` (or a list of those).
        position_buckets: DeBERTa-v2's ``position_buckets`` (>= 2, default 256);
            ``0`` turns log bucketing off (raw offsets clipped at
            ``max_relative_positions``, as DeBERTa-v1).
        max_relative_positions: distance where log buckets end (> position_buckets // 2
            when bucketing is on; >= 1 otherwise). Default 512.
        layer_norm: LayerNorm the position table before projecting (DeBERTa-v3's
            ``norm_rel_ebd="layer_norm"``). Default True.
        layer_norm_eps: its epsilon (DeBERTa-v2's default 1e-7).
        share_projections: one projection for both position terms.
        share_att_key: project positions with the layer's content projections
            (see :meth:`bind_content_projections`); the scheme then owns no
            projection of its own.
        init_std: std of the normal initialisation of the table and projections.

    Parameters: ``rel_embeddings (2S, C)``; ``norm`` (LayerNorm(C)) if
    ``layer_norm``; ``pos_key_proj`` (for ``c2p``) and ``pos_query_proj`` (for
    ``p2c``), each ``Linear(C, H*D)``, the same module when ``share_projections``,
    absent when their term is off or with ``share_att_key``.

    Example:
        >>> enc = DeBERTa(n_heads=2, head_dim=4, position_buckets=8, max_relative_positions=16)
        >>> enc.attention_scale(4) == 1 / (3 * 4) ** 0.5
        True
        >>> enc.position_index(torch.tensor([[0, 1, 2]]), torch.tensor([[0, 1, 2]]))
        tensor([[[ 8,  7,  6],
                 [ 9,  8,  7],
                 [10,  9,  8]]])
    """

    name = "deberta"
    pairwise_score = True  # a pair's score reads that pair only: any key range may be evaluated alone
    acts_on = frozenset({"score"})
    paper = "https://arxiv.org/abs/2006.03654"

    def __init__(
        self,
        n_heads: int = 8,
        head_dim: int = 64,
        d_model: int | None = None,
        *,
        terms: str | tuple[str, ...] = "c2p|p2c",
        position_buckets: int = 256,
        max_relative_positions: int = 512,
        layer_norm: bool = True,
        layer_norm_eps: float = 1e-7,
        share_projections: bool = False,
        share_att_key: bool = False,
        init_std: float = 0.02,
    ) -> None:
        super().__init__(n_heads)
        check_int("head_dim", head_dim, 1, MAX_TABLE)
        if d_model is None:
            d_model = n_heads * head_dim
        check_int("d_model", d_model, 1, MAX_TABLE)
        self.head_dim = head_dim
        self.d_model = d_model
        self.terms = _parse_terms(terms)
        check_int("position_buckets", position_buckets, 0, MAX_TABLE)
        if position_buckets == 1:
            raise ValueError("position_buckets must be 0 (no bucketing) or >= 2, got 1")
        check_int("max_relative_positions", max_relative_positions, 1, MAX_TABLE)
        if position_buckets > 0:
            # validates max_relative_positions > position_buckets // 2
            deberta_log_bucket(torch.zeros(1, dtype=torch.long), bucket_size=position_buckets,
                               max_position=max_relative_positions)
        self.position_buckets = position_buckets
        self.max_relative_positions = max_relative_positions
        self.span = position_buckets if position_buckets > 0 else max_relative_positions
        for name, v in (("layer_norm", layer_norm), ("share_projections", share_projections),
                        ("share_att_key", share_att_key)):
            check_bool(name, v)
        if share_projections and share_att_key:
            raise ValueError("share_projections and share_att_key are exclusive; pick one")
        check_float("layer_norm_eps", layer_norm_eps, 0, lo_open=True)
        check_float("init_std", init_std, 0)
        self.share_projections = share_projections
        self.share_att_key = share_att_key

        C, HD = d_model, n_heads * head_dim
        self.rel_embeddings = nn.Parameter(torch.randn(2 * self.span, C) * init_std)  # (2S, C)
        self.norm = nn.LayerNorm(C, eps=float(layer_norm_eps)) if layer_norm else None
        self.pos_key_proj: nn.Linear | None = None
        self.pos_query_proj: nn.Linear | None = None
        if not share_att_key:

            def linear() -> nn.Linear:
                lin = nn.Linear(C, HD)
                nn.init.normal_(lin.weight, std=init_std)
                nn.init.zeros_(lin.bias)
                return lin

            # like DeBERTa, only the projections of enabled terms exist
            if "c2p" in self.terms:
                self.pos_key_proj = linear()
            if "p2c" in self.terms:
                self.pos_query_proj = (
                    self.pos_key_proj if (share_projections and self.pos_key_proj is not None) else linear()
                )
        self._content_projections: tuple | None = None  # held by reference, not registered

    # --------------------------------------------------------------- options

    def attention_scale(self, head_dim: int) -> float:
        """``1/sqrt(D * (1 + number of position terms))``: ``1/sqrt(3D)`` by default."""
        return 1.0 / math.sqrt(head_dim * (1 + len(self.terms)))

    def bind_content_projections(self, query_proj, key_proj) -> None:
        """Hand over the layer's content projections (``share_att_key=True``).

        Args:
            query_proj: the layer's query projection ``C -> H*D`` (an ``nn.Linear``
                or any callable on a ``(2S, C)`` float32 tensor); it projects the
                position table for the position-to-content term.
            key_proj: the layer's key projection, for the content-to-position term.

        Raises:
            ValueError: the scheme was not built with ``share_att_key=True``, or a
                projection does not map ``C`` to ``H*D``.
        """
        if not self.share_att_key:
            raise ValueError("bind_content_projections needs a scheme built with share_att_key=True")
        probe = torch.zeros(1, self.d_model)
        for name, proj in (("query_proj", query_proj), ("key_proj", key_proj)):
            if not callable(proj):
                raise TypeError(f"{name} must be callable (e.g. nn.Linear), got {type(proj).__name__}")
            out = self._apply_proj(proj, probe.to(self.rel_embeddings.device))
            if tuple(out.shape) != (1, self.n_heads * self.head_dim):
                raise ValueError(
                    f"{name} must map d_model={self.d_model} to n_heads*head_dim="
                    f"{self.n_heads * self.head_dim}, got output shape {tuple(out.shape[1:])}"
                )
        self._content_projections = (query_proj, key_proj)

    @staticmethod
    def _apply_proj(proj, x: Tensor) -> Tensor:
        if isinstance(proj, nn.Linear):
            w = proj.weight.to(x.dtype)
            b = None if proj.bias is None else proj.bias.to(x.dtype)
            return F.linear(x, w, b)
        return proj(x).to(x.dtype)

    # -------------------------------------------------------------- positions

    def position_index(self, qpos: Tensor, kpos: Tensor) -> Tensor:
        """Table rows ``delta(i, j) = clamp(bucket(i - j) + S, 0, 2S - 1)``.

        Args:
            qpos: ``(B or 1, Nq)`` int64.
            kpos: ``(B or 1, Nk)`` int64.
        Returns:
            ``(B or 1, Nq, Nk)`` int64 in ``[0, 2S)``.
        """
        if qpos.shape[-1] * kpos.shape[-1] > _TABLE_FROM:
            # The row depends on i - j only: evaluate it once per distinct distance (O(Nq + Nk) values),
            # then look every pair up, instead of the log-bucket's passes over all Nq x Nk pairs.
            tab = self._distance_rows(qpos, kpos)
            if tab is not None:
                table, lo = tab  # (hi - lo + 1,)
                return table[qpos[:, :, None] - (kpos + lo)[:, None, :]]  # (B|1, Nq, Nk)
        return self._rows_of(qpos[:, :, None] - kpos[:, None, :])  # (B|1, Nq, Nk), query minus key

    def _distance_rows(self, qpos: Tensor, kpos: Tensor) -> tuple[Tensor, int] | None:
        """Table row of each distance ``lo .. hi`` these positions reach, and ``lo``; None without
        positions or when that range is much wider than the positions (scattered positions)."""
        if qpos.numel() == 0 or kpos.numel() == 0:
            return None
        lo, hi = int(qpos.min()) - int(kpos.max()), int(qpos.max()) - int(kpos.min())
        if hi - lo >= 2 * (qpos.shape[-1] + kpos.shape[-1]):
            return None
        return self._rows_of(torch.arange(lo, hi + 1, device=qpos.device)), lo

    def _rows_of(self, r: Tensor) -> Tensor:
        """Table row of each distance ``r = i - j``: ``clamp(bucket(r) + S, 0, 2S - 1)``."""
        if self.position_buckets > 0:
            r = deberta_log_bucket(r, bucket_size=self.position_buckets, max_position=self.max_relative_positions)
        return (r + self.span).clamp(0, 2 * self.span - 1)

    @staticmethod
    def _slice_rows(rows: Tensor, meta: dict) -> Tensor:
        """Table rows as indices into the state's slice ``lo .. lo + rows - 1``; rows outside it (only the
        masked future pairs of a ``past_only`` state) read its nearest row."""
        r = rows - meta["lo"]
        n = meta.get("rows")
        return r if n is None else r.clamp_(0, n - 1)

    def _kernel_terms(self, state: ScoreState, qpos: Tensor, kpos: Tensor):
        """``(c2p, p2c, table, rlo)`` when the compiled kernel (:mod:`relpos.kernels.rows`) can serve
        this state, else None."""
        c2p, p2c = self._terms(state)
        if not krows.usable(c2p, p2c) or qpos.device.type != "cpu":
            return None
        tab = self._distance_rows(qpos, kpos)
        return None if tab is None else (c2p, p2c, self._slice_rows(tab[0], state.meta), tab[1])

    def _terms(self, state: ScoreState) -> tuple[Tensor | None, Tensor | None]:
        """The state's (or its gradient's) ``c2p (B, H, Nq, rows)`` and ``p2c (B, H, rows, Nk)``, None if off."""
        it = iter(state.tensors)
        return (next(it) if "c2p" in self.terms else None), (next(it) if "p2c" in self.terms else None)

    def row_range(self, qpos: Tensor, kpos: Tensor) -> tuple[int, int]:
        """First and last table row that :meth:`position_index` can give for these positions.

        The row is monotone in ``i - j``, so the extreme offsets decide: ``O(N)``, no
        ``N x N`` index. Position-dependent work then covers only rows ``lo..hi``
        (at most ``Nq + Nk - 1`` of the ``2S``; all of them once offsets reach the span).
        """
        if qpos.numel() == 0 or kpos.numel() == 0:
            return 0, 2 * self.span - 1
        r = torch.stack([qpos.min() - kpos.max(), qpos.max() - kpos.min()]).view(1, 2)
        if self.position_buckets > 0:
            r = deberta_log_bucket(r, bucket_size=self.position_buckets, max_position=self.max_relative_positions)
        lo, hi = (r + self.span).clamp(0, 2 * self.span - 1).view(2).tolist()
        return int(lo), int(hi)

    def _table(self, dtype: torch.dtype, rows: slice | None = None) -> Tensor:
        p = self.rel_embeddings.to(dtype)  # (2S, C)
        if rows is not None:
            p = p[rows]  # LayerNorm is per row: slicing first gives the same rows
        if self.norm is not None:
            p = F.layer_norm(p, (self.d_model,), self.norm.weight.to(dtype), self.norm.bias.to(dtype), self.norm.eps)
        return p

    def position_vectors(self, dtype: torch.dtype = torch.float32,
                         rows: slice | None = None) -> tuple[Tensor | None, Tensor | None]:
        """Projected position vectors ``(Kr, Qr)``, each ``(H, 2S, D)`` (``(H, len(rows), D)``
        for a slice of the table's rows) or None if unused.

        Raises:
            RuntimeError: ``share_att_key=True`` and no content projections were bound.
        """
        p = self._table(dtype, rows)  # (2S, C)
        if self.share_att_key:
            if self._content_projections is None:
                raise RuntimeError(
                    "DeBERTa built with share_att_key=True needs the layer's content projections: "
                    "call enc.bind_content_projections(query_proj, key_proj) first"
                )
            qp, kp = self._content_projections
        else:
            qp, kp = self.pos_query_proj, self.pos_key_proj
        H, D = self.n_heads, self.head_dim
        kr = self._apply_proj(kp, p).view(-1, H, D).transpose(0, 1) if "c2p" in self.terms else None
        qr = self._apply_proj(qp, p).view(-1, H, D).transpose(0, 1) if "p2c" in self.terms else None
        return kr, qr

    # ------------------------------------------------------------ fast path

    def score_state(self, q: Tensor, k: Tensor, qpos: Tensor, kpos: Tensor, scale: float,
                    past_only: bool = False) -> ScoreState:
        """``scale q Kr^T`` ``(B, H, Nq, rows)`` and ``scale Qr k^T`` ``(B, H, rows, Nk)`` over the
        table rows ``lo..hi`` the call can reach (:meth:`row_range`): ``O(N rows)`` memory,
        projected and multiplied once per call; :meth:`score_with` gathers them per block.
        ``past_only``: only the rows of ``i - j >= 0`` (about half of them for long causal calls);
        masked pairs then read the nearest row (finite, masked afterwards)."""
        cdt = torch.promote_types(q.dtype, torch.float32)
        lo, hi = self.row_range(qpos, kpos)
        if past_only and qpos.numel() and kpos.numel():
            r0 = int(self._rows_of(torch.zeros(1, dtype=torch.long, device=qpos.device)))  # row of i - j = 0
            lo = max(lo, min(hi, r0))  # rows grow with i - j
        kr, qr = self.position_vectors(cdt, slice(lo, hi + 1))  # (H, rows, D) each
        tensors, axes = [], []
        if kr is not None:
            # the scale goes on the (H, rows, D) table, not on the (B, H, Nq, rows) product
            tensors.append(torch.matmul(q.to(cdt), (kr * scale).transpose(-1, -2)))  # (B, H, Nq, rows)
            axes.append("q")
        if qr is not None:
            # keys last, (B, H, rows, Nk): the gather reads along a row wherever the row index holds over
            # many keys (the log buckets); the transposed layout read one table row per key
            tensors.append(torch.matmul(qr * scale, k.to(cdt).transpose(-1, -2)))  # (B, H, rows, Nk)
            axes.append("k-last")
        return ScoreState(tuple(tensors), tuple(axes), {"lo": lo, "rows": hi - lo + 1})

    def score_with(self, state: ScoreState, qpos: Tensor, kpos: Tensor) -> Tensor:
        kt = self._kernel_terms(state, qpos, kpos)
        if kt is not None:  # the compiled kernel: runs of keys per table row, no N x N index
            return krows.gather(*kt[:2], qpos, kpos, *kt[2:])
        c2p, p2c = self._terms(state)  # (B, H, Nq, rows), (B, H, rows, Nk)
        ref = c2p if c2p is not None else p2c
        B, H = ref.shape[:2]
        Nq, Nk = qpos.shape[-1], kpos.shape[-1]
        rows = self._slice_rows(self.position_index(qpos, kpos), state.meta)  # (B|1, Nq, Nk), rows of the slice
        idx = rows[:, None].expand(B, H, Nq, Nk)
        out = None
        if c2p is not None:
            out = c2p.gather(-1, idx)  # (B, H, Nq, Nk): q_i . Kr[delta(i, j)]
        if p2c is not None:
            flat = _rows_flat(p2c)
            if flat is None:
                t = p2c.gather(-2, idx)  # (B, H, Nq, Nk): k_j . Qr[delta(i, j)]
            else:  # the same entries read through a flat index along the last dim (the fast gather)
                t = flat[0].gather(-1, _flat_index(rows, flat[1], B, H)).view(B, H, Nq, Nk)
            out = t if out is None else out + t
        return out

    def score_with_backward(self, grads: ScoreState, qpos: Tensor, kpos: Tensor, ds: Tensor,
                            ctx: object = None) -> bool:
        """The gathers' gradient, scattered straight into the state's gradient (no zero-filled temporaries)."""
        kt = self._kernel_terms(grads, qpos, kpos)
        if kt is not None:
            krows.scatter_(*kt[:2], ds, qpos, kpos, *kt[2:])
            return True
        gc2p, gp2c = self._terms(grads)
        B, H, Nq, Nk = ds.shape
        rows = self._slice_rows(self.position_index(qpos, kpos), grads.meta)  # (B|1, Nq, Nk)
        idx = rows[:, None].expand(B, H, Nq, Nk)
        if gc2p is not None:
            gc2p.scatter_add_(-1, idx, ds)
        if gp2c is not None:
            flat = _rows_flat(gp2c)
            if flat is None:
                gp2c.scatter_add_(-2, idx, ds)
            else:
                flat[0].scatter_add_(-1, _flat_index(rows, flat[1], B, H), ds.reshape(B, H, Nq * Nk))
        return True

    def score_into(self, state: ScoreState, qpos: Tensor, kpos: Tensor, out: Tensor) -> None:
        """``out += score_with(state, ...)``, in place through the kernel where it serves (no temporary)."""
        kt = self._kernel_terms(state, qpos, kpos)
        if kt is not None and out.is_contiguous() and out.dtype == (kt[0] if kt[0] is not None else kt[1]).dtype:
            krows.gather(*kt[:2], qpos, kpos, *kt[2:], out=out)
        else:
            out += self.score_with(state, qpos, kpos).to(out.dtype)
        return None

    def score(self, q: Tensor, k: Tensor, qpos: Tensor, kpos: Tensor, scale: float) -> Tensor:
        return self.score_with(self.score_state(q, k, qpos, kpos, scale), qpos, kpos)

    # ------------------------------------------------------------ reference

    def _ref_bucket(self, r: int) -> int:
        """DeBERTa-v2's ``make_log_bucket_position`` for one offset ``r = i - j``,
        with its float32 arithmetic."""
        if self.position_buckets <= 0:
            return r
        mid = self.position_buckets // 2
        if abs(r) <= mid:
            return r
        f32 = np.float32
        ratio = np.log(f32(abs(r)) / f32(mid)) / np.log(f32((self.max_relative_positions - 1) / mid))
        log_pos = int(np.ceil(f32(ratio) * f32(mid - 1))) + mid
        return log_pos if r > 0 else -log_pos

    def reference_score(self, q: Tensor, k: Tensor, qpos: Tensor, kpos: Tensor, scale: float) -> Tensor:
        q, k = q.double(), k.double()
        B, H, Nq, D = q.shape
        Nk = k.shape[2]
        # position table, LayerNorm written out
        p = self.rel_embeddings.double()
        if self.norm is not None:
            mu = p.mean(-1, keepdim=True)
            var = ((p - mu) ** 2).mean(-1, keepdim=True)
            p = (p - mu) / torch.sqrt(var + self.norm.eps) * self.norm.weight.double() + self.norm.bias.double()
        if self.share_att_key:
            if self._content_projections is None:
                raise RuntimeError("call bind_content_projections(query_proj, key_proj) first")
            qp, kp = self._content_projections
        else:
            qp, kp = self.pos_query_proj, self.pos_key_proj
        kr = self._apply_proj(kp, p).view(-1, H, D) if "c2p" in self.terms else None  # (2S, H, D)
        qr = self._apply_proj(qp, p).view(-1, H, D) if "p2c" in self.terms else None
        Bp = max(B, qpos.shape[0], kpos.shape[0])
        qp_l, kp_l = qpos.expand(Bp, -1).tolist(), kpos.expand(Bp, -1).tolist()
        S = self.span
        rows = [[[min(max(self._ref_bucket(i - j) + S, 0), 2 * S - 1) for j in kp_l[b]] for i in qp_l[b]]
                for b in range(Bp)]
        idx = torch.tensor(rows, dtype=torch.long, device=q.device).expand(B, Nq, Nk)  # (B, Nq, Nk)
        out = torch.zeros(B, H, Nq, Nk, dtype=torch.float64, device=q.device)
        for b in range(B):
            if kr is not None:  # q_i . Kr[delta(i, j)]
                out[b] += torch.einsum("hid,ijhd->hij", q[b], kr[idx[b]])
            if qr is not None:  # k_j . Qr[delta(i, j)]
                out[b] += torch.einsum("hjd,ijhd->hij", k[b], qr[idx[b]])
        return scale * out


def _rows_flat(t: Tensor) -> tuple[Tensor, int] | None:
    """``t (B, H, rows, C)`` (a keys-last state or a block of it, unit stride along keys) as ``(B, H, rows * S)``
    with its row stride ``S``, to gather along the last dim; None where autograd must see the 4-D gather
    (a non-contiguous block that requires a gradient) or the layout does not allow it."""
    if t.is_contiguous():
        return t.reshape(t.shape[0], t.shape[1], -1), t.shape[-1]
    if t.stride(-1) != 1 or (t.requires_grad and torch.is_grad_enabled()):
        return None
    S = t.stride(-2)
    return t.as_strided((t.shape[0], t.shape[1], t.shape[2] * S), (t.stride(0), t.stride(1), 1)), S


def _flat_index(rows: Tensor, S: int, B: int, H: int) -> Tensor:
    """Flat position ``row * S + j`` of each pair (``rows (B|1, Nq, Nk)``), expanded to ``(B, H, Nq * Nk)``."""
    Nq, Nk = rows.shape[-2:]
    lin = rows * S + torch.arange(Nk, device=rows.device)  # (B|1, Nq, Nk)
    return lin.reshape(rows.shape[0], 1, Nq * Nk).expand(B, H, Nq * Nk)
