"""relpos.distance: values by hand, properties (hypothesis), Toeplitz construction, input errors."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from relpos.distance import (
    alibi_slopes,
    clip_relative,
    deberta_log_bucket,
    log2_bucket,
    offsets_range,
    relative_positions,
    skew_rows,
    skew_rows_past,
    unskew_rows,
    contiguous_offsets,
    t5_bucket,
    toeplitz,
)
from relpos.offsets import skewed_product

# --------------------------------------------------------------------- doctest-like values


def test_relative_positions_values():
    assert relative_positions(3).tolist() == [[0, 1, 2], [-1, 0, 1], [-2, -1, 0]]
    assert relative_positions(1, 4, q_offset=3, convention="i-j").tolist() == [[3, 2, 1, 0]]
    assert relative_positions(2, 5, q_offset=1, clip=2).tolist() == [[-1, 0, 1, 2, 2], [-2, -1, 0, 1, 2]]
    assert relative_positions(2).dtype == torch.int64
    assert relative_positions(2, q_offset=3).shape == (2, 5)  # k_len defaults to q_len + q_offset


def test_clip_values():
    assert clip_relative(torch.tensor([-5, -1, 0, 2, 9]), 2).tolist() == [-2, -1, 0, 2, 2]
    assert clip_relative(torch.tensor([-5, 3]), 0).tolist() == [0, 0]


def test_t5_bucket_values():
    d = torch.tensor([-200, -9, -1, 0, 1, 9, 200])
    assert t5_bucket(d).tolist() == [15, 8, 1, 0, 17, 24, 31]
    # causal, 32 buckets, max_distance 128: exact for 0..15, then log-spaced, hand-computed
    d = torch.tensor([5, 0, -1, -15, -16, -20, -64, -127, -128, -5000])
    want = [0, 0, 1, 15, 16, 16 + int(math.log(20 / 16) / math.log(8) * 16), 16 + int(math.log(4) / math.log(8) * 16),
            16 + int(math.log(127 / 16) / math.log(8) * 16), 31, 31]
    assert t5_bucket(d, bidirectional=False).tolist() == want


def test_log2_bucket_values():
    d = torch.tensor([-64, -9, -8, 0, 3, 16, 17])
    assert log2_bucket(d).tolist() == [-12, -9, -8, 0, 3, 10, 10]
    assert log2_bucket(torch.tensor([-64, -3, 0, 5]), bidirectional=False).tolist() == [-12, -3, 0, 0]
    assert log2_bucket(torch.tensor([-1000, 1000]), max_bucket=11).tolist() == [-11, 11]
    assert log2_bucket(torch.tensor([2, 3, 4, 5]), m=2).tolist() == [2, 3, 4, 4]


@given(st.integers(-(10**9), 10**9), st.integers(1, 64))
def test_log2_bucket_formula(d, m):
    a = abs(d)
    if a <= m:
        b = a
    else:  # m + floor(log2(a / m)) + 1, with floor(log2(a / m)) = the largest k such that m * 2^k <= a
        k = 0
        while m * 2 ** (k + 1) <= a:
            k += 1
        b = m + k + 1
    want = int(math.copysign(b, d)) if d else 0
    assert log2_bucket(torch.tensor([d]), m=m).item() == want


def test_deberta_values():
    # mid = 4, max_position = 17: |d| <= 4 kept; beyond, 4 + ceil(log(|d|/4) / log(16/4) * 3)
    d = torch.tensor([-16, -5, -4, -1, 0, 3, 4, 5, 8, 16, 100])
    want = [-7, -5, -4, -1, 0, 3, 4, 5, 6, 7, 4 + math.ceil(math.log(25) / math.log(4) * 3)]
    assert deberta_log_bucket(d, bucket_size=8, max_position=17).tolist() == want


# ----------------------------------------------------------------------------- properties


@st.composite
def t5_settings(draw):
    bidirectional = draw(st.booleans())
    nb = draw(st.integers(4 if bidirectional else 2, 64))
    n = nb // 2 if bidirectional else nb
    md = draw(st.integers(n // 2 + 1, 1000))
    return bidirectional, nb, md


@given(t5_settings(), st.lists(st.integers(-5000, 5000), min_size=1, max_size=50))
def test_t5_bucket_in_range(settings, ds):
    bidirectional, nb, md = settings
    b = t5_bucket(torch.tensor(ds), bidirectional=bidirectional, num_buckets=nb, max_distance=md)
    assert b.dtype == torch.int64
    assert bool(((b >= 0) & (b < nb)).all())


@given(t5_settings())
def test_t5_bucket_monotone_per_direction_and_saturates(settings):
    bidirectional, nb, md = settings
    n = nb // 2 if bidirectional else nb
    dist = torch.arange(0, 2 * md + 3)
    past = t5_bucket(-dist, bidirectional=bidirectional, num_buckets=nb, max_distance=md)
    assert bool((past[1:] >= past[:-1]).all())
    assert bool((past[md:] == n - 1).all())  # saturated from max_distance on
    assert past[0] == 0 and bool((past[: n // 2] == dist[: n // 2]).all())  # exact range
    fut = t5_bucket(dist, bidirectional=bidirectional, num_buckets=nb, max_distance=md)
    if bidirectional:
        assert bool((fut[1:] >= fut[:-1]).all())
        assert bool((fut[md:] == 2 * n - 1).all())  # = num_buckets - 1 for even num_buckets
        assert bool((fut[1:] >= n).all())  # the future has its own half
    else:
        assert bool((fut == 0).all())


@given(st.lists(st.integers(-10000, 10000), min_size=1, max_size=40), st.sampled_from([(256, 512), (8, 17), (2, 5)]))
def test_deberta_sign_preserved_and_monotone(ds, cfg):
    bs, mp = cfg
    d = torch.tensor(ds)
    b = deberta_log_bucket(d, bucket_size=bs, max_position=mp)
    assert torch.equal(torch.sign(b), torch.sign(d))
    torch.testing.assert_close(deberta_log_bucket(-d, bucket_size=bs, max_position=mp), -b)
    mid = bs // 2
    small = d.abs() <= mid
    assert torch.equal(b[small], d[small])
    a = torch.arange(0, 3 * mp)
    ba = deberta_log_bucket(a, bucket_size=bs, max_position=mp)
    assert bool((ba[1:] >= ba[:-1]).all())


def test_deberta_matches_transformers():
    pytest.importorskip("transformers")
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    d = torch.arange(-3000, 3001)
    for bs, mp in [(256, 512), (32, 100), (8, 17)]:
        assert torch.equal(deberta_log_bucket(d, bucket_size=bs, max_position=mp),
                           make_log_bucket_position(d, bs, mp).long())


def test_alibi_slopes_powers_of_two_exact():
    assert alibi_slopes(1).tolist() == [2.0**-8]
    assert alibi_slopes(2).tolist() == [2.0**-4, 2.0**-8]
    assert alibi_slopes(4).tolist() == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]
    assert alibi_slopes(8).tolist() == [2.0**-k for k in range(1, 9)]
    assert alibi_slopes(16, dtype=torch.float64).tolist() == pytest.approx([2.0 ** (-k / 2) for k in range(1, 17)], rel=1e-15)
    assert alibi_slopes(8, dtype=torch.float64).dtype == torch.float64


def test_alibi_slopes_interleaved_otherwise():
    # 6 heads: the 4-head sequence, then every other slope of the 8-head sequence (2^-1, 2^-3)
    assert alibi_slopes(6).tolist() == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
    # 3 heads: (2^-4, 2^-8) then 2^-2
    assert alibi_slopes(3).tolist() == [2.0**-4, 2.0**-8, 2.0**-2]
    # 12 heads: 8-head sequence, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5
    want12 = [2.0**-k for k in range(1, 9)] + [2.0 ** -(k + 0.5) for k in range(4)]
    torch.testing.assert_close(alibi_slopes(12, dtype=torch.float64), torch.tensor(want12, dtype=torch.float64))


@given(st.integers(1, 200))
def test_alibi_slopes_in_unit_interval_and_distinct(n):
    s = alibi_slopes(n, dtype=torch.float64)
    assert s.shape == (n,) and bool(((s > 0) & (s < 1)).all())
    assert len(set(s.tolist())) == n


# ----------------------------------------------------------------------------- Toeplitz


@given(st.integers(1, 12), st.integers(1, 12), st.integers(0, 6), st.integers(0, 2))
def test_toeplitz_equals_index_construction(nq, nk, q_offset, lead):
    if q_offset + nq > nk + 6:
        q_offset = 0
    offs = offsets_range(nq, nk, q_offset)
    assert offs.shape == (nq + nk - 1,)
    delta = relative_positions(nq, nk, q_offset=q_offset)  # (Nq, Nk)
    assert int(offs[0]) == int(delta.min()) and int(offs[-1]) == int(delta.max())
    g = torch.Generator().manual_seed(nq * 100 + nk)
    shape = (2, 3)[:lead]
    vals = torch.randn(*shape, nq + nk - 1, generator=g, requires_grad=True)
    got = toeplitz(vals, nq, nk)
    want = vals[..., delta - offs[0]]  # index construction
    assert torch.equal(got, want)
    w = torch.randn(got.shape, generator=g)
    g1, = torch.autograd.grad((got * w).sum(), vals)
    g2, = torch.autograd.grad((want * w).sum(), vals)
    torch.testing.assert_close(g1, g2)


def test_toeplitz_on_strided_views():
    base = torch.arange(40.0).view(2, 20)
    vals = base[:, ::2]  # stride 2 in the last dim, 10 offsets
    got = toeplitz(vals, 4, 7)
    delta = relative_positions(4, 7)
    torch.testing.assert_close(got, vals.contiguous()[:, delta + 3])
    vt = torch.arange(30.0).view(10, 3).T  # (3, 10), non-contiguous
    torch.testing.assert_close(toeplitz(vt, 4, 7), vt.contiguous()[:, delta + 3])


@settings(max_examples=80, deadline=None)
@given(B=st.integers(1, 3), H=st.integers(1, 3), Nq=st.integers(1, 9), extra=st.integers(0, 6),
       wide=st.integers(0, 9), D=st.integers(1, 4), shared=st.booleans(), seed=st.integers(0, 2**16))
def test_skewed_product_equals_the_skewed_product_with_gradients(B, H, Nq, extra, wide, D, shared, seed):
    """``skewed_product`` equals ``skew_rows_past(q @ keys^T)`` (-inf included; with all Nq + Nk - 1 columns that
    is ``skew_rows``) for per-head and shared keys and every width W it serves (a causal call with q_offset =
    extra has W = Nq + extra = Nk; ``wide`` adds columns up to all of them)."""
    Nk = Nq + extra
    W = min(Nk + wide, Nq + Nk - 1)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, Nq, D, generator=g, dtype=torch.float64, requires_grad=True)
    keys = torch.randn(1 if shared else H, W, D, generator=g, dtype=torch.float64, requires_grad=True)
    out = skewed_product(q, keys, Nk)
    ref = skew_rows_past(q @ keys.transpose(-1, -2), Nq, Nk)
    torch.testing.assert_close(out, ref)
    if W == Nq + Nk - 1:
        torch.testing.assert_close(out, skew_rows(q @ keys.transpose(-1, -2), Nq, Nk))
    w = torch.randn(out.shape, generator=g, dtype=torch.float64)  # nonzero on the -inf pairs too: they add nothing
    for a, b in zip(torch.autograd.grad(out, (q, keys), w), torch.autograd.grad(ref, (q, keys), w)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("q, keys, nk, match", [
    (torch.randn(1, 2, 4, 3), torch.randn(2, 3, 3), 4, "Nk <= W <= Nq \\+ Nk - 1"),  # W = 3 < Nk
    (torch.randn(1, 2, 4, 3), torch.randn(2, 8, 3), 4, "Nk <= W <= Nq \\+ Nk - 1"),  # W = 8 > Nq + Nk - 1
    (torch.randn(1, 2, 4, 3), torch.randn(3, 4, 3), 4, "keys \\(H or 1, W, D\\)"),  # 3 key groups for 2 heads
])
def test_skewed_product_refuses_what_it_cannot_read(q, keys, nk, match):
    with pytest.raises(ValueError, match=match):
        skewed_product(q, keys, nk)


def test_toeplitz_keeps_second_derivatives():
    """Its own backward is built of differentiable ops: gradient penalties through a learned bias stay exact."""
    v = torch.randn(2, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda x: toeplitz(x, 3, 5), (v,))


def test_skewed_product_refuses_second_derivatives_by_name():
    """Its backward reads a copy of q made in the forward: a second derivative would miss its q part, so it is
    refused, never returned wrong."""
    q = torch.randn(2, 3, 4, 2, dtype=torch.float64, requires_grad=True)
    out = skewed_product(q, torch.randn(3, 5, 2, dtype=torch.float64, requires_grad=True), 5)
    with pytest.raises(RuntimeError, match="second derivatives"):
        torch.autograd.grad(out.masked_fill(torch.isinf(out), 0).sum(), q, create_graph=True)


# ------------------------------------------------------------------------------- errors

BAD_INPUTS = [
    (lambda: relative_positions(0), ValueError, "q_len"),
    (lambda: relative_positions(2, 0), ValueError, "k_len"),
    (lambda: relative_positions(2, q_offset=-1), ValueError, "q_offset"),
    (lambda: relative_positions(2, convention="i+j"), ValueError, "convention"),
    (lambda: relative_positions(2, clip=-1), ValueError, "clip"),
    (lambda: relative_positions(2.0), TypeError, "q_len"),
    (lambda: clip_relative(torch.tensor([1]), -1), ValueError, "k"),
    (lambda: clip_relative(torch.tensor([1.0]), 2), TypeError, "d"),
    (lambda: clip_relative([1, 2], 2), TypeError, "d"),
    (lambda: t5_bucket(torch.tensor([1.0])), TypeError, "relative_position"),
    (lambda: t5_bucket(torch.tensor([True])), TypeError, "relative_position"),
    (lambda: t5_bucket(torch.tensor([1]), num_buckets=3), ValueError, "num_buckets"),
    (lambda: t5_bucket(torch.tensor([1]), bidirectional=False, num_buckets=1), ValueError, "num_buckets"),
    (lambda: t5_bucket(torch.tensor([1]), num_buckets=32, max_distance=8), ValueError, "max_distance"),
    (lambda: t5_bucket(torch.tensor([1]), bidirectional=False, num_buckets=32, max_distance=16), ValueError,
     "max_distance"),
    (lambda: t5_bucket(torch.tensor([1]), num_buckets=32.0), TypeError, "num_buckets"),
    (lambda: t5_bucket(torch.tensor([1]), bidirectional=1), TypeError, "bidirectional"),
    (lambda: log2_bucket(torch.tensor([1.5])), TypeError, "d"),
    (lambda: log2_bucket(torch.tensor([1]), m=0), ValueError, "m"),
    (lambda: log2_bucket(torch.tensor([1]), m=8, max_bucket=4), ValueError, "max_bucket"),
    (lambda: log2_bucket(torch.tensor([1]), bidirectional="yes"), TypeError, "bidirectional"),
    (lambda: deberta_log_bucket(torch.tensor([1.0])), TypeError, "d"),
    (lambda: deberta_log_bucket(torch.tensor([1]), bucket_size=1), ValueError, "bucket_size"),
    (lambda: deberta_log_bucket(torch.tensor([1]), bucket_size=256, max_position=128), ValueError, "max_position"),
    (lambda: alibi_slopes(0), ValueError, "n_heads"),
    (lambda: alibi_slopes(True), TypeError, "n_heads"),
    (lambda: offsets_range(0, 3), ValueError, "q_len"),
    (lambda: offsets_range(2, 3, -1), ValueError, "q_offset"),
    (lambda: toeplitz(torch.zeros(5), 3, 4), ValueError, "values"),
    (lambda: toeplitz(torch.zeros(6), 3, 0), ValueError, "k_len"),
]


@pytest.mark.parametrize("call,exc,match", BAD_INPUTS, ids=[str(i) for i in range(len(BAD_INPUTS))])
def test_bad_inputs_raise_naming_the_parameter(call, exc, match):
    with pytest.raises(exc, match=rf"\b{match}\b"):
        call()


@settings(max_examples=40, deadline=None)
@given(nq=st.integers(1, 9), nk=st.integers(1, 9), lead=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_skew_rows_matches_an_index_gather_with_gradient(nq, nk, lead, seed):
    g = torch.Generator().manual_seed(seed)
    vals = torch.randn(lead, nq, nq + nk - 1, generator=g, dtype=torch.float64, requires_grad=True)
    got = skew_rows(vals, nq, nk)
    idx = torch.arange(nk)[None, :] - torch.arange(nq)[:, None] + nq - 1  # offset j - t as a column
    want = torch.gather(vals, -1, idx.expand(lead, nq, nk))
    assert torch.equal(got, want)
    w = torch.randn(got.shape, generator=g, dtype=torch.float64)
    (a,) = torch.autograd.grad((got * w).sum(), vals)
    (b,) = torch.autograd.grad((want * w).sum(), vals)
    assert torch.equal(a, b)


@settings(max_examples=40, deadline=None)
@given(nq=st.integers(1, 9), nk=st.integers(1, 9), seed=st.integers(0, 2**16), data=st.data())
def test_skew_rows_past_is_skew_rows_with_the_future_filled(nq, nk, seed, data):
    """Only the first W offset columns given: the same pairs as skew_rows on all of them, `fill` at every
    pair whose column is past W (for W = Nq + q_offset: the future keys of a causal call), same gradient."""
    W = data.draw(st.integers(1, nq + nk - 1))
    g = torch.Generator().manual_seed(seed)
    full = torch.randn(2, nq, nq + nk - 1, generator=g, dtype=torch.float64, requires_grad=True)
    got = skew_rows_past(full[..., :W], nq, nk)
    col = torch.arange(nk)[None, :] - torch.arange(nq)[:, None] + nq - 1  # (nq, nk)
    want = skew_rows(full, nq, nk).masked_fill(col >= W, float("-inf"))
    assert torch.equal(got, want)
    w = torch.randn(got.shape, generator=g, dtype=torch.float64).masked_fill(col >= W, 0.0)
    (a,) = torch.autograd.grad((got.masked_fill(col >= W, 0.0) * w).sum(), full)
    (b,) = torch.autograd.grad((want.masked_fill(col >= W, 0.0) * w).sum(), full)
    assert torch.equal(a, b) and not a[..., W:].any()


def test_skew_rows_past_refuses_a_wrong_width():
    with pytest.raises(ValueError, match="W <= q_len \\+ k_len - 1"):
        skew_rows_past(torch.zeros(2, 4), 2, 2)


def test_skew_rows_refuses_a_wrong_width():
    with pytest.raises(ValueError, match="q_len \\+ k_len - 1"):
        skew_rows(torch.zeros(2, 4), 2, 2)


@settings(max_examples=30, deadline=None)
@given(nq=st.integers(1, 8), nk=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_unskew_rows_is_the_adjoint_of_skew_rows(nq, nk, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, nq, nq + nk - 1, generator=g, dtype=torch.float64)
    y = torch.randn(2, nq, nk, generator=g, dtype=torch.float64, requires_grad=True)
    # <skew(x), y> == <x, unskew(y)>, and unskew puts each pair at its offset's column, zeros elsewhere
    torch.testing.assert_close((skew_rows(x, nq, nk) * y).sum(), (x * unskew_rows(y)).sum())
    u = unskew_rows(y)
    assert torch.equal(skew_rows(u, nq, nk), y) and int((u != 0).sum()) <= 2 * nq * nk
    w = torch.randn(u.shape, generator=g, dtype=torch.float64)
    (gy,) = torch.autograd.grad((u * w).sum(), y)
    assert torch.equal(gy, skew_rows(w, nq, nk))


def test_contiguous_offsets_only_for_shared_consecutive_positions():
    assert contiguous_offsets(torch.tensor([[3, 4]]), torch.arange(4)[None]).tolist() == [-4, -3, -2, -1, 0]
    assert contiguous_offsets(torch.tensor([[0, 2]]), torch.arange(4)[None]) is None
    assert contiguous_offsets(torch.arange(2).expand(2, 2), torch.arange(4)[None]) is None
