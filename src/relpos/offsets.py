"""Per-offset terms placed on ``(query, key)`` pairs and back: Toeplitz expansion, skew and unskew.

A relative term that depends only on the offset ``d = j - i`` is computed once per offset
(``Nq + Nk - 1`` values, :func:`offsets_range`) and laid out on the ``Nq x Nk`` grid by a strided
view instead of an index matrix: :func:`toeplitz` for terms shared by every query, :func:`skew_rows`
for per-query terms (Transformer-XL's "relative shift", Dai et al. 2019,
https://arxiv.org/abs/1901.02860), and :func:`unskew_rows`, its adjoint (attention weights summed
per offset). Inputs are validated with one-line errors naming the parameter.
"""

from __future__ import annotations

import torch
from torch import Tensor

from relpos.first_order import first_order
from relpos.validation import MAX_POSITIONS, check_int, check_tensor

__all__ = ["offsets_range", "toeplitz", "skew_rows", "skew_rows_past", "unskew_rows", "contiguous_offsets",
           "future_table", "unskew_past_into", "skewed_product"]


def offsets_range(q_len: int, k_len: int, q_offset: int = 0) -> Tensor:
    """All distinct offsets ``d = j - i`` between ``Nq`` queries and ``Nk`` keys.

    Returns the ``Nq + Nk - 1`` values ``-(q_offset + Nq - 1) .. Nk - 1 - q_offset``
    in increasing order, as int64. Evaluate a Toeplitz term on these once, then
    expand with :func:`toeplitz`.
    """
    check_int("q_len", q_len, 1, MAX_POSITIONS)
    check_int("k_len", k_len, 1, MAX_POSITIONS)
    check_int("q_offset", q_offset, 0, MAX_POSITIONS)
    lo = -(q_offset + q_len - 1)
    return torch.arange(lo, k_len - q_offset)


def toeplitz(values: Tensor, q_len: int, k_len: int) -> Tensor:
    """Expand per-offset values into a ``(..., Nq, Nk)`` Toeplitz matrix.

    ``values[..., r]`` is the term for offset ``offsets_range(q_len, k_len, q_offset)[r]``;
    the result satisfies ``out[..., t, j] = values[..., j - t + Nq - 1]``. It is
    built with one ``Nq x Nk`` copy from a strided view; no index matrix is formed.

    Args:
        values: ``(..., Nq + Nk - 1)`` tensor.
        q_len: ``Nq``.
        k_len: ``Nk``.
    """
    check_tensor("values", values)
    check_int("q_len", q_len, 1, MAX_POSITIONS)
    check_int("k_len", k_len, 1, MAX_POSITIONS)
    if values.dim() < 1:
        raise ValueError("values must have at least 1 dimension (..., Nq + Nk - 1), got a 0-dim tensor")
    if values.shape[-1] != q_len + k_len - 1:
        raise ValueError(
            f"values must have q_len + k_len - 1 = {q_len + k_len - 1} entries in the last dim, "
            f"got {values.shape[-1]}"
        )
    return _Toeplitz.apply(values, q_len, k_len)


class _Toeplitz(torch.autograd.Function):
    """:func:`toeplitz`: forward one flipped copy of an overlapping view; backward the sum along diagonals.

    The backward sums the gradient along its diagonals (:func:`relpos.kernels.toeplitz.diag_sums`: one compiled
    pass, or the gradient written into zeros of the offsets' width through a skewed view and its rows summed),
    where autograd through the overlapping ``as_strided`` view scatters with ``index_add_`` after copies (about
    4x slower at ``(4, 256, 256)``)."""

    @staticmethod
    def forward(ctx, values: Tensor, q_len: int, k_len: int) -> Tensor:
        # X[t', j] = values[t' + j] is a positive-strided view; row t of the result is
        # row t' = Nq - 1 - t of X, so one flip (a single Nq x Nk copy) finishes it.
        *lead, length = values.shape
        st = values.stride()
        x = values.as_strided((*lead, q_len, k_len), (*st[:-1], st[-1], st[-1]), values.storage_offset())
        return x.flip(-2)

    @staticmethod
    def backward(ctx, g: Tensor):
        from relpos.kernels.toeplitz import diag_sums  # one compiled pass where built, else the skewed write

        return diag_sums(g), None, None  # (..., Nq + Nk - 1): dv[..., j - t + Nq - 1] += g[..., t, j]


class _SkewRows(torch.autograd.Function):
    """Forward: a strided copy; backward: a strided write into zeros (no index tensor either way)."""

    @staticmethod
    def forward(ctx, values: Tensor, q_len: int, k_len: int) -> Tensor:
        ctx.shape = values.shape
        return _skew_view(values.contiguous(), q_len, k_len).clone()

    @staticmethod
    def backward(ctx, g: Tensor):
        out = g.new_zeros(ctx.shape)
        _skew_view(out, g.shape[-2], g.shape[-1]).copy_(g)
        return out, None, None


def _skew_view(x: Tensor, q_len: int, k_len: int) -> Tensor:
    *lead, _, w = x.shape
    st = x.stride()
    return x.as_strided((*lead, q_len, k_len), (*st[:-2], st[-2] - st[-1], st[-1]), x.storage_offset() + q_len - 1)


def skew_rows(values: Tensor, q_len: int, k_len: int) -> Tensor:
    """Per-query values on offsets -> ``(..., Nq, Nk)``: ``out[..., t, j] = values[..., t, j - t + Nq - 1]``.

    ``values[..., t, r]`` is query ``t``'s term for offset ``offsets_range(Nq, Nk, q_offset)[r]``
    (a content-dependent Toeplitz term such as Transformer-XL's ``(q_t + v) . W_R R``): Transformer-XL's
    "relative shift", done as one strided copy (and one strided write in the backward).

    Args:
        values: ``(..., Nq, Nq + Nk - 1)``.
        q_len: ``Nq``.
        k_len: ``Nk``.

    Example:
        >>> skew_rows(torch.arange(6.).view(2, 3), 2, 2)
        tensor([[1., 2.],
                [3., 4.]])
    """
    check_tensor("values", values)
    check_int("q_len", q_len, 1, MAX_POSITIONS)
    check_int("k_len", k_len, 1, MAX_POSITIONS)
    if values.dim() < 2 or values.shape[-2] != q_len or values.shape[-1] != q_len + k_len - 1:
        raise ValueError(f"values must have shape (..., q_len, q_len + k_len - 1) = (..., {q_len}, "
                         f"{q_len + k_len - 1}), got {tuple(values.shape)}")
    return _SkewRows.apply(values, q_len, k_len)


def skew_rows_past(values: Tensor, q_len: int, k_len: int, fill: float = float("-inf")) -> Tensor:
    """:func:`skew_rows` for causal calls: ``values (..., Nq, W)`` holds only the first ``W`` offset
    columns (the offsets ``j - i <= 0`` a causal query sees, ``W = Nq + q_offset``), and every pair past
    them (a future key) gets ``fill`` (-inf: the causal mask, folded in). Half the per-offset work of
    a self-attention call.

    Example:
        >>> skew_rows_past(torch.arange(4.).view(2, 2), 2, 2)
        tensor([[1., -inf],
                [2., 3.]])
    """
    check_tensor("values", values)
    check_int("q_len", q_len, 1, MAX_POSITIONS)
    check_int("k_len", k_len, 1, MAX_POSITIONS)
    W = q_len + k_len - 1
    if values.dim() < 2 or values.shape[-2] != q_len or not 1 <= values.shape[-1] <= W:
        raise ValueError(f"values must have shape (..., q_len, W) with q_len = {q_len} and 1 <= W <= "
                         f"q_len + k_len - 1 = {W}, got {tuple(values.shape)}")
    if k_len <= values.shape[-1] < W:  # every row's strided read stays inside values: no padded copy
        return _SkewRowsPast.apply(values, q_len, k_len, fill)
    if values.shape[-1] < W:
        values = torch.cat([values, values.new_full((*values.shape[:-1], W - values.shape[-1]), fill)], -1)
    return _SkewRows.apply(values, q_len, k_len)


def future_table(q_len: int, k_len: int, first: int, dtype: torch.dtype, device) -> Tensor:
    """``(Nq, Nk)`` additive table: 0 where ``j - t < first``, -inf from there on (a causal mask when ``first`` is
    1 plus the query offset; the pairs a skewed read takes past its last column otherwise).

    >>> future_table(2, 3, 1, torch.float32, "cpu")
    tensor([[0., -inf, -inf],
            [0., 0., -inf]])
    """
    past = torch.ones(q_len, k_len, dtype=torch.bool, device=device).triu_(first)
    return torch.zeros(q_len, k_len, dtype=dtype, device=device).masked_fill_(past, float("-inf"))


def unskew_past_into(out: Tensor, g: Tensor, W: int) -> Tensor:
    """The gradient of :func:`skew_rows_past`'s read: ``g (..., Nq, Nk)`` back on the first ``W`` offset columns.

    ``out`` (``(..., Nq, Nq - 1 + Nk)``, any contents, same leading shape as ``g``) receives row ``t`` of ``g`` on
    its columns ``[Nq - 1 - t, Nq - 1 - t + Nk)``; what lies left of that, and right of it below ``W`` (columns
    ``>= Nk``, only when ``W > Nk``), is zeroed. Returns the view ``out[..., :W]``: the pairs past ``W`` (those
    the read took from the next row) are cut off.
    """
    q_len, k_len = g.shape[-2], g.shape[-1]
    out[..., : q_len - 1].zero_()
    if W > k_len:
        out[..., k_len:W].zero_()
    _skew_view(out, q_len, k_len).copy_(g)
    return out[..., :W]


class _SkewRowsPast(torch.autograd.Function):
    """:func:`skew_rows_past` when ``values`` has at least ``k_len`` columns: the strided copy reads ``values``
    itself (row ``t`` from its column ``Nq - 1 - t``), and the pairs past its last column, which that read takes
    from the next row, are set to ``fill``. The backward writes into zeros of the full offset width, where those
    pairs land past column ``W`` and are cut off."""

    @staticmethod
    def forward(ctx, values: Tensor, q_len: int, k_len: int, fill: float) -> Tensor:
        W = values.shape[-1]
        ctx.shape = values.shape
        view = _skew_view(values.contiguous(), q_len, k_len)  # (..., Nq, Nk), reading past W beyond the diagonal
        if fill == float("-inf"):  # the causal mask: one add of a (Nq, Nk) 0 / -inf table, no copy first
            # (4x faster than a strided copy and a broadcast masked_fill_ at (4, 4, 256, 256))
            return torch.add(view, future_table(q_len, k_len, W - q_len + 1, values.dtype, values.device))
        past = torch.ones(q_len, k_len, dtype=torch.bool, device=values.device).triu_(W - q_len + 1)
        return view.clone().masked_fill_(past, fill)

    @staticmethod
    def backward(ctx, g: Tensor):
        *lead, q_len, W = ctx.shape
        k_len = g.shape[-1]
        return unskew_past_into(g.new_empty(*lead, q_len, q_len + k_len - 1), g, W), None, None, None


def skewed_product(q: Tensor, keys: Tensor, k_len: int) -> Tensor:
    """``skew_rows_past(q @ keys^T, Nq, Nk)`` in one step: a content-dependent relative term on every pair
    (``q_t . keys[j - t + Nq - 1]``: Transformer-XL's ``(q + v) . W_R R``, Shaw's ``q . a^K``), -inf past the
    ``W`` offset columns given (a causal call's past offsets); with all ``Nq + Nk - 1`` columns, no -inf:
    :func:`skew_rows` of the product.

    Equal to that expression (tested, gradients included), but the product is one matmul per key group over
    every query row of the batch (``(G, B H/G Nq, D) x (G, D, W)``: per-head keys run head-major, shared keys as
    a single matmul), not ``B H`` small ones against keys copied ``B`` times, and the gradient is unskewed
    straight into that layout. First-order: second derivatives are refused by name.

    Args:
        q: ``(B, H, Nq, D)``.
        keys: ``(H, W, D)`` per head or ``(1, W, D)`` shared: the first ``W`` offset columns in
            :func:`offsets_range` order, ``Nk <= W <= Nq + Nk - 1``.
        k_len: ``Nk``.

    Returns:
        ``(B, H, Nq, Nk)`` (a view; head-major in memory for per-head keys).
    """
    check_tensor("q", q, 4, floating=True)
    check_tensor("keys", keys, 3, floating=True)
    check_int("k_len", k_len, 1, MAX_POSITIONS)
    if keys.shape[0] not in (1, q.shape[1]) or keys.shape[2] != q.shape[3]:
        raise ValueError(f"skewed_product needs q (B, H, Nq, D) and keys (H or 1, W, D), got q {tuple(q.shape)} "
                         f"and keys {tuple(keys.shape)}")
    Nq, W = q.shape[2], keys.shape[1]
    if not k_len <= W <= Nq + k_len - 1:
        raise ValueError(f"skewed_product needs Nk <= W <= Nq + Nk - 1, got W = {W} for Nq = {Nq} and Nk = {k_len}")
    return _SkewedProduct.apply(q, keys, k_len)


class _SkewedProduct(torch.autograd.Function):
    """:func:`skewed_product`: ``(G, M, D) x (G, D, W)`` then the skewed read; the backward unskews into that
    layout. The key groups come first: ``(H, B, ...)`` for per-head keys, ``(1, B H, ...)`` for shared ones."""

    @staticmethod
    def _grouped(x: Tensor, G: int) -> Tensor:
        """``(B, H, N, C)`` -> ``(G, B H / G, N, C)`` (a view when possible)."""
        B, H = x.shape[0], x.shape[1]
        return x.transpose(0, 1) if G > 1 else x.reshape(1, B * H, *x.shape[2:])

    @staticmethod
    def forward(ctx, q: Tensor, keys: Tensor, k_len: int) -> Tensor:
        B, H, Nq, D = q.shape
        G, W = keys.shape[0], keys.shape[1]
        qg = _SkewedProduct._grouped(q, G).reshape(G, -1, D)  # (G, B H / G Nq, D)
        per = torch.bmm(qg, keys.transpose(1, 2)).view(G, B * H // G, Nq, W)  # one matmul per key group
        view = _skew_view(per, Nq, k_len)  # row t reads per from column Nq - 1 - t
        if W < Nq + k_len - 1:  # the read runs past column W into the next row there: those pairs get -inf
            term = torch.add(view, future_table(Nq, k_len, W - Nq + 1, q.dtype, q.device))
        else:
            term = view.contiguous()
        ctx.save_for_backward(qg, keys)
        ctx.k_len, ctx.shape = k_len, (B, H)
        return term.transpose(0, 1) if G > 1 else term.view(B, H, Nq, k_len)

    @staticmethod
    @first_order  # the saved (G, M, D) copy of q carries no graph back to q
    def backward(ctx, g: Tensor):
        qg, keys = ctx.saved_tensors
        (B, H), k_len = ctx.shape, ctx.k_len
        G, W, D = keys.shape
        Nq = g.shape[2]
        un = g.new_empty(G, B * H // G, Nq, Nq - 1 + k_len)
        dper = unskew_past_into(un, _SkewedProduct._grouped(g, G), W).view(G, -1, W)  # rows of stride Nq - 1 + Nk
        dq = torch.bmm(dper, keys).view(G, B * H // G, Nq, D)
        dq = dq.transpose(0, 1) if G > 1 else dq.view(B, H, Nq, D)
        return dq, torch.bmm(dper.transpose(1, 2), qg), None


class _UnskewRows(torch.autograd.Function):
    """Inverse placement of :func:`skew_rows`: a strided write into zeros; backward a strided copy."""

    @staticmethod
    def forward(ctx, rows: Tensor) -> Tensor:
        q_len, k_len = rows.shape[-2], rows.shape[-1]
        out = rows.new_zeros(*rows.shape[:-1], q_len + k_len - 1)
        _skew_view(out, q_len, k_len).copy_(rows)
        return out

    @staticmethod
    def backward(ctx, g: Tensor):
        q_len = g.shape[-2]
        return _skew_view(g.contiguous(), q_len, g.shape[-1] - q_len + 1).clone()


def unskew_rows(rows: Tensor) -> Tensor:
    """``(..., Nq, Nk)`` -> ``(..., Nq, Nq + Nk - 1)``: each pair's value moved to its offset's column.

    ``out[..., t, j - t + Nq - 1] = rows[..., t, j]`` and zeros elsewhere (the adjoint of
    :func:`skew_rows`), e.g. attention weights summed per offset for a value-side term.

    Example:
        >>> unskew_rows(torch.tensor([[1., 2.], [3., 4.]]))
        tensor([[0., 1., 2.],
                [3., 4., 0.]])
    """
    check_tensor("rows", rows)
    if rows.dim() < 2:
        raise ValueError(f"rows must have shape (..., Nq, Nk), got {tuple(rows.shape)}")
    return _UnskewRows.apply(rows)


def contiguous_offsets(qpos: Tensor, kpos: Tensor) -> Tensor | None:
    """The ``Nq + Nk - 1`` offsets ``j - i`` in :func:`skew_rows` order, or None.

    Defined when positions are shared by the batch (``(1, N)``) and consecutive, so every
    pair's offset is ``kpos[0] - qpos[0] + j - t`` and column ``j - t + Nq - 1`` of a
    skewed row holds it; None otherwise (the caller takes its per-pair form).

    Example:
        >>> contiguous_offsets(torch.tensor([[3, 4]]), torch.arange(4)[None]).tolist()
        [-4, -3, -2, -1, 0]
    """
    if qpos.dim() != 2 or kpos.dim() != 2 or qpos.shape[0] != 1 or kpos.shape[0] != 1:
        return None
    for p in (qpos, kpos):
        if p.shape[-1] > 1 and not bool((p[0, 1:] - p[0, :-1] == 1).all()):
            return None
    nq, nk = qpos.shape[-1], kpos.shape[-1]
    return torch.arange(1 - nq, nk, device=qpos.device) + (int(kpos[0, 0]) - int(qpos[0, 0]))
