"""Randomized positions (Ruoss et al. 2023): the sampler, and its use with every kind of scheme."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import relpos
from relpos.encodings.randomized import random_positions
from tests.helpers import build

RELATIVE = ["shaw", "shaw-kv", "transformer-xl", "kerple-log", "kerple-power", "t5", "alibi"]


@given(B=st.integers(1, 4), N=st.integers(1, 20), extra=st.integers(0, 40), seed=st.integers(0, 2**31))
def test_sorted_distinct_in_range(B, N, extra, seed):
    L = N + extra
    p = random_positions(B, N, L, generator=torch.Generator().manual_seed(seed))
    assert p.shape == (B, N) and p.dtype == torch.int64
    assert (p[:, 1:] > p[:, :-1]).all()  # strictly increasing: sorted and distinct
    assert p.min() >= 0 and p.max() < L


def test_full_range_is_arange_and_reproducible():
    assert random_positions(3, 7, 7).tolist() == [list(range(7))] * 3
    a = random_positions(2, 5, 100, generator=torch.Generator().manual_seed(1))
    b = random_positions(2, 5, 100, generator=torch.Generator().manual_seed(1))
    c = random_positions(2, 5, 100, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert random_positions(1, 3, 9, device="cpu").device.type == "cpu"


def test_distribution_covers_the_range_uniformly():
    B, N, L = 4000, 4, 16
    p = random_positions(B, N, L, generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(p.flatten(), minlength=L).double()
    expected = B * N / L  # each position is included with probability N / L
    assert counts.min() > 0.85 * expected and counts.max() < 1.15 * expected
    # the first position is not stuck near 0, the last not stuck near L - 1
    assert p[:, 0].float().mean() == pytest.approx((L - N) / (N + 1), rel=0.15)
    assert p[:, 0].max() >= L // 2 and p[:, -1].min() <= L // 2
    # rows differ from each other
    assert torch.unique(p, dim=0).shape[0] > 1000


@pytest.mark.parametrize(
    ("args", "exc", "pattern"),
    [
        ((2, 9, 8), ValueError, r"seq_len \(9\).*max_position \(8\)"),
        ((0, 2, 8), ValueError, "batch_size"),
        ((1, 0, 8), ValueError, "seq_len"),
        ((1, 2, 0), ValueError, "max_position"),
        ((1, 2.0, 8), TypeError, "seq_len"),
        ((True, 2, 8), TypeError, "batch_size"),
    ],
)
def test_bad_arguments(args, exc, pattern):
    with pytest.raises(exc, match=pattern):
        random_positions(*args)
    with pytest.raises(TypeError, match="generator"):
        random_positions(1, 2, 3, generator=0)


@pytest.mark.parametrize("name", RELATIVE)
def test_relative_scheme_output_depends_only_on_gaps(name):
    enc = build(name, n_heads=2, head_dim=8, causal=True)
    assert enc.integer_positions and enc.relative
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 2, 6, 8, generator=g) for _ in range(3))
    pos = random_positions(2, 6, 64, generator=g)
    shifted = pos + torch.tensor([[17], [3]])  # a different shift per row keeps every gap
    a = relpos.attention(q, k, v, enc, causal=True, positions=pos)
    b = relpos.attention(q, k, v, enc, causal=True, positions=shifted)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # different gaps give a different output (the positions are really used)
    c = relpos.attention(q, k, v, enc, causal=True, positions=torch.arange(6)[None] * 3)
    d = relpos.attention(q, k, v, enc, causal=True, positions=torch.arange(6)[None])
    assert not torch.allclose(c, d, atol=1e-4)


@pytest.mark.parametrize("name", ["sinusoidal", "learned"])
def test_absolute_schemes_take_random_positions(name):
    L = 32
    enc = build(name, n_heads=2, head_dim=4, max_len=L)
    g = torch.Generator().manual_seed(0)
    pos = random_positions(3, 5, L, generator=g)
    x = torch.randn(3, 5, 8, generator=g)
    out = enc.embed(x, pos)
    torch.testing.assert_close(out.double(), enc.reference_embed(x, pos), atol=1e-5, rtol=0)
    assert not torch.allclose(out, enc.embed(x, torch.arange(5)[None]))


def test_learned_table_must_cover_max_position():
    enc = build("learned", n_heads=1, head_dim=4, max_len=16)
    pos = random_positions(1, 20, 20)  # all of 0..19
    with pytest.raises(ValueError, match="max_len=16"):
        enc.embed(torch.zeros(1, 20, 4), pos)
