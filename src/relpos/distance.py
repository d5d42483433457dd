"""Pure functions on relative positions: offsets, clipping, bucketing, ALiBi slopes.

Nothing here holds parameters or state. Every function validates its inputs and
raises ``ValueError``/``TypeError`` naming the parameter and the accepted range.

Sign convention
---------------
relpos writes the relative position of key ``j`` seen from query ``i`` as

    d = j - i            (``convention="j-i"``, the default; Shaw et al. and T5 code)

so keys to the *left* of the query (the past, in causal attention) have ``d < 0``.
``convention="i-j"`` flips the sign (Transformer-XL and ALiBi write distances that
way). Every function that takes a relative position documents which sign it expects.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from relpos.validation import (
    MAX_POSITIONS,
    MAX_TABLE,
    check_bool,
    check_choice,
    check_int,
    check_int_tensor,
)

Convention = Literal["j-i", "i-j"]

__all__ = [
    "Convention",
    "skew_rows",
    "skew_rows_past",
    "unskew_rows",
    "contiguous_offsets",
    "relative_positions",
    "clip_relative",
    "t5_bucket",
    "log2_bucket",
    "deberta_log_bucket",
    "alibi_slopes",
    "offsets_range",
    "toeplitz",
]


# ----------------------------------------------------------------------------- checks


def _check_convention(convention: str) -> None:
    check_choice("convention", convention, ("j-i", "i-j"))


#: The most entries :func:`relative_positions` forms (an ``(Nq, Nk)`` int64 matrix of 16 GiB).
MAX_PAIRS = 1 << 31


# -------------------------------------------------------------------- relative matrix


def relative_positions(
    q_len: int,
    k_len: int | None = None,
    *,
    q_offset: int = 0,
    convention: Convention = "j-i",
    clip: int | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """The matrix of relative positions between queries and keys.

    Query ``t`` sits at absolute position ``i = q_offset + t``; key ``j`` at ``j``.

    Args:
        q_len: number of queries ``Nq`` (>= 1).
        k_len: number of keys ``Nk`` (>= 1); defaults to ``q_len + q_offset``.
        q_offset: absolute position of the first query (>= 0), e.g. the cache
            length during incremental decoding.
        convention: ``"j-i"`` (default) or ``"i-j"``.
        clip: if given, clip to ``[-clip, clip]`` (Shaw et al.); in ``[0, MAX_POSITIONS]``.

    Returns:
        ``(Nq, Nk)`` int64 tensor.

    Example:
        >>> relative_positions(3)
        tensor([[ 0,  1,  2],
                [-1,  0,  1],
                [-2, -1,  0]])
        >>> relative_positions(1, 4, q_offset=3, convention="i-j")
        tensor([[3, 2, 1, 0]])
    """
    check_int("q_len", q_len, 1, MAX_POSITIONS)
    check_int("q_offset", q_offset, 0, MAX_POSITIONS)
    if k_len is None:
        k_len = q_len + q_offset
    check_int("k_len", k_len, 1, MAX_POSITIONS)
    if q_len * k_len > MAX_PAIRS:
        raise ValueError(f"q_len * k_len must be <= {MAX_PAIRS} (an (Nq, Nk) int64 matrix), got {q_len} * {k_len}")
    _check_convention(convention)
    if clip is not None:
        check_int("clip", clip, 0, MAX_POSITIONS)
    i = torch.arange(q_offset, q_offset + q_len, device=device)[:, None]
    j = torch.arange(k_len, device=device)[None, :]
    d = j - i if convention == "j-i" else i - j
    if clip is not None:
        d = clip_relative(d, clip)
    return d


def clip_relative(d: Tensor, k: int) -> Tensor:
    """Clip relative positions to ``[-k, k]`` (Shaw et al. 2018, eq. 7).

    Args:
        d: integer tensor of relative positions (any shape, any sign convention).
        k: maximum distance kept, in ``[0, MAX_POSITIONS]``. ``k = 0`` maps every offset to 0.

    Returns:
        Tensor like ``d`` with values in ``[-k, k]``. Add ``k`` to index a
        ``(2k+1)``-row table.

    Example:
        >>> clip_relative(torch.tensor([-5, -1, 0, 2, 9]), 2)
        tensor([-2, -1,  0,  2,  2])
    """
    check_int_tensor("d", d)
    check_int("k", k, 0, MAX_POSITIONS)
    return d.clamp(-k, k)


# ------------------------------------------------------------------------- bucketing


def t5_bucket(
    relative_position: Tensor,
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> Tensor:
    """T5's relative-position bucket, exactly as T5 (Raffel et al. 2020) defines it.

    ``relative_position`` is ``j - i`` (key minus query, T5's
    ``memory_position - query_position``).

    * bidirectional: half of the buckets for ``d > 0`` (keys to the right), half
      for ``d <= 0``; within each half, ``n = num_buckets // 2`` buckets.
    * causal (``bidirectional=False``): only ``d <= 0`` is distinguished
      (``d > 0`` maps to bucket 0), ``n = num_buckets`` buckets.
    * Within ``n`` buckets, distances ``|d| < n // 2`` (the exact range) get their
      own bucket; larger distances are log-spaced up to ``max_distance`` and
      saturate in bucket ``n - 1``. The log arithmetic is done in float32, as in
      T5 and Hugging Face transformers, so boundaries match them bit for bit.

    Args:
        relative_position: integer tensor ``j - i``, any shape.
        bidirectional: see above.
        num_buckets: total buckets; >= 2 causal, >= 4 bidirectional (so that the
            exact range ``n // 2`` is at least 1).
        max_distance: distance at which buckets saturate; must be > the exact
            range ``n // 2``.

    Returns:
        int64 tensor of bucket ids in ``[0, num_buckets)``, same shape.

    Example:
        >>> t5_bucket(torch.tensor([-200, -9, -1, 0, 1, 9, 200]))
        tensor([15,  8,  1,  0, 17, 24, 31])
    """
    check_int_tensor("relative_position", relative_position)
    check_bool("bidirectional", bidirectional)
    check_int("num_buckets", num_buckets, 4 if bidirectional else 2, MAX_TABLE)
    n = num_buckets // 2 if bidirectional else num_buckets
    max_exact = n // 2
    check_int("max_distance", max_distance, None, MAX_POSITIONS)
    if max_distance <= max_exact:
        raise ValueError(
            f"max_distance must be > the exact range num_buckets{'//2' if bidirectional else ''}//2"
            f" = {max_exact}, got {max_distance}"
        )
    rp = relative_position.long()
    buckets = torch.zeros_like(rp)
    if bidirectional:
        buckets = buckets + (rp > 0).long() * n
        dist = rp.abs()
    else:
        dist = -torch.clamp(rp, max=0)
    is_small = dist < max_exact
    # float32 on purpose: matches T5 / HF boundaries exactly.
    large = max_exact + (
        torch.log(dist.float().clamp(min=1) / max_exact)
        / math.log(max_distance / max_exact)
        * (n - max_exact)
    ).to(torch.long)
    large = torch.clamp(large, max=n - 1)
    return buckets + torch.where(is_small, dist, large)


def log2_bucket(d: Tensor, *, m: int = 8, bidirectional: bool = True, max_bucket: int | None = None) -> Tensor:
    """Simplified log2 bucketing used in teaching material.

    For a distance ``a = |d|``::

        b(a) = a                              if a <= m
        b(a) = m + floor(log2(a / m)) + 1     if a > m

    Bidirectional use keeps the sign: ``sign(d) * b(|d|)``. With
    ``bidirectional=False`` only ``d <= 0`` (the past, ``j - i`` convention) is
    measured and ``d > 0`` maps to 0. Note: this is *not* T5's formula (see
    :func:`t5_bucket`).

    Args:
        d: integer tensor of relative positions ``j - i``.
        m: size of the exact range (>= 1).
        bidirectional: keep the sign (see above).
        max_bucket: optionally saturate ``b`` at this value (>= m).

    Returns:
        int64 tensor ``sign(d) * b(|d|)``; with ``bidirectional=False`` the
        values are ``<= 0`` (``-b(|d|)`` for the past, 0 for the future).

    Example:
        >>> log2_bucket(torch.tensor([-64, -9, -8, 0, 3, 16, 17]))
        tensor([-12,  -9,  -8,   0,   3,  10,  10])
    """
    check_int_tensor("d", d)
    check_int("m", m, 1, MAX_POSITIONS)
    check_bool("bidirectional", bidirectional)
    if max_bucket is not None:
        check_int("max_bucket", max_bucket, m)
    d = d.long()
    if not bidirectional:
        d = torch.clamp(d, max=0)
    a = d.abs()
    # floor(log2(a/m)) exactly in integer arithmetic: bit length of (a // m) minus 1.
    q = torch.div(a, m, rounding_mode="floor").clamp(min=1)
    flog = _floor_log2(q)
    b = torch.where(a <= m, a, m + flog + 1)
    if max_bucket is not None:
        b = b.clamp(max=max_bucket)
    return torch.sign(d) * b


def _floor_log2(q: Tensor) -> Tensor:
    """floor(log2(q)) for positive int64 q, exactly."""
    out = torch.zeros_like(q)
    x = q.clone()
    for shift in (32, 16, 8, 4, 2, 1):
        big = x >= (1 << shift)
        out = out + big.long() * shift
        x = torch.where(big, x >> shift, x)
    return out


def deberta_log_bucket(d: Tensor, *, bucket_size: int = 256, max_position: int = 512) -> Tensor:
    """DeBERTa's sign-preserving log buckets (He et al. 2021, ``make_log_bucket_position``).

    With ``mid = bucket_size // 2``, distances ``|d| <= mid`` are kept as they
    are; larger ones are compressed log-linearly,
    ``mid + ceil(log(|d| / mid) / log((max_position - 1) / mid) * (mid - 1))``,
    so that ``|d| = max_position - 1`` lands on ``2 * mid - 1``; the sign of ``d``
    is preserved. Results are not clipped: ``|d| >= max_position`` goes beyond
    ``2 * mid - 1`` (DeBERTa clamps later). Arithmetic follows DeBERTa-v2's
    reference code (float32 log, ceil).

    Args:
        d: integer tensor of relative positions (DeBERTa uses ``i - j``; the
            function is odd in ``d`` so either convention works).
        bucket_size: number of position buckets (>= 2).
        max_position: maximum relative distance (> bucket_size // 2).

    Returns:
        int64 tensor with the sign of ``d``.
    """
    check_int_tensor("d", d)
    check_int("bucket_size", bucket_size, 2, MAX_TABLE)
    mid = bucket_size // 2
    check_int("max_position", max_position, None, MAX_POSITIONS)
    if max_position <= mid:
        raise ValueError(f"max_position must be > bucket_size // 2 = {mid}, got {max_position}")
    d = d.long()
    sign = torch.sign(d)
    abs_pos = torch.where((d < mid) & (d > -mid), torch.full_like(d, mid - 1), d.abs())
    log_pos = (
        torch.ceil(torch.log(abs_pos.float() / mid) / math.log((max_position - 1) / mid) * (mid - 1)) + mid
    )
    return torch.where(abs_pos <= mid, d, (log_pos * sign).long())


# ----------------------------------------------------------------------- ALiBi slopes


def alibi_slopes(n_heads: int, *, dtype: torch.dtype = torch.float32) -> Tensor:
    """ALiBi head slopes exactly as Press et al. (2022) define them.

    For ``n`` a power of two the slopes are the geometric sequence starting at
    ``2^(-8/n)`` with ratio ``2^(-8/n)``. For other ``n``, take the ``2^a`` slopes
    of the largest power of two ``2^a < n``, then every other slope of the
    ``2^(a+1)`` sequence for the remaining ``n - 2^a`` heads.

    Args:
        n_heads: number of heads, in ``[1, MAX_TABLE]``.
        dtype: floating dtype of the result (computed in float64, then cast).

    Returns:
        ``(n_heads,)`` tensor.

    Example:
        >>> alibi_slopes(4)
        tensor([0.2500, 0.0625, 0.0156, 0.0039])
    """
    check_int("n_heads", n_heads, 1, MAX_TABLE)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype (slopes are fractions), got {dtype!r}")

    def pow2(n: int) -> list[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n_heads).is_integer():
        slopes = pow2(n_heads)
    else:
        closest = 2 ** math.floor(math.log2(n_heads))
        slopes = pow2(closest) + pow2(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(slopes, dtype=dtype)


# Per-offset layout helpers live in relpos.offsets; re-exported here for code written against
# relpos.distance.
from relpos.offsets import (  # noqa: E402
    contiguous_offsets,
    offsets_range,
    skew_rows,
    skew_rows_past,
    toeplitz,
    unskew_rows,
)
