"""Sandwich: values by hand, reference agreement, per-head compression, invariances, errors."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import relpos
from relpos.encodings.sandwich import Sandwich


def test_values_by_hand():
    enc = Sandwich(n_heads=1, pos_dim=4)  # w = [1, 1/100]; H = 1: r_1 = 8
    d = torch.tensor([0, 1, -1, 7])
    want = torch.tensor([(math.cos(x) + math.cos(x / 100) - 2) / 8 for x in d.tolist()])
    torch.testing.assert_close(enc.relative_bias(d)[0], want)


def test_head_compression():
    enc = Sandwich(n_heads=8, pos_dim=16)
    torch.testing.assert_close(enc.head_scales(), 1.0 / torch.arange(1, 9, dtype=torch.float64))
    b = enc.relative_bias(torch.tensor([5]))[:, 0]
    torch.testing.assert_close(b / b[0], 1.0 / torch.arange(1, 9, dtype=torch.float32))
    raw = Sandwich(n_heads=8, pos_dim=16, compress=False).relative_bias(torch.tensor([5]))[:, 0]
    assert torch.allclose(raw, raw[0].expand(8)) and raw[0] == pytest.approx(float(b[0]), rel=1e-6)
    assert Sandwich(n_heads=4).head_scales().tolist() == [0.5, 0.25, 1 / 6, 0.125]


@pytest.mark.parametrize("H", [1, 3, 4])
def test_matches_explicit_embedding_dot_products(H):
    enc = Sandwich(n_heads=H, pos_dim=32)
    qpos = torch.tensor([[4, 5, 6, 7], [0, 9, 20, 33]])
    kpos = torch.tensor([[0, 2, 4, 5, 6, 7], [0, 3, 9, 19, 20, 33]])
    ref = enc.reference_bias(qpos, kpos)
    torch.testing.assert_close(enc.bias(qpos, kpos).double(), ref, rtol=1e-6, atol=1e-5)


@given(st.lists(st.integers(-5000, 5000), min_size=1, max_size=20))
def test_symmetric_zero_at_origin_and_nonpositive(ds):
    enc = Sandwich(n_heads=3, pos_dim=64)
    d = torch.tensor(ds)
    b = enc.relative_bias(d)
    torch.testing.assert_close(b, enc.relative_bias(-d))
    assert bool((b <= 1e-6).all())
    assert bool((b[:, d == 0] == 0).all())


def test_decays_on_average_with_distance():
    b = Sandwich(n_heads=1).relative_bias(torch.arange(0, 2048))[0]
    means = [float(b[i : i + 256].mean()) for i in range(0, 2048, 256)]
    assert all(a > c for a, c in zip(means, means[1:]))


def test_subtracted_constant_does_not_change_attention():
    """The -d'/2 offset is constant per row: attention equals the one with the raw p_i . p_j / r_h."""
    H, N, D = 3, 7, 8
    enc = relpos.make_encoding("sandwich", n_heads=H, head_dim=D)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, H, N, D, generator=g) for _ in range(3))
    pos = torch.arange(N)
    raw = (enc.bias(pos[None], pos[None]) + enc.pos_dim / 2 * enc.head_scales().float()[:, None, None])
    logits = q @ k.transpose(-1, -2) / math.sqrt(D) + raw
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    want = torch.softmax(logits.masked_fill(~causal, float("-inf")), -1) @ v
    torch.testing.assert_close(relpos.attention(q, k, v, enc, causal=True), want, rtol=1e-5, atol=1e-5)


def test_flags_and_no_parameters():
    enc = relpos.make_encoding("sandwich", n_heads=4, head_dim=8)
    assert enc.toeplitz and enc.relative and not enc.causal_only
    assert enc.num_params() == 0 and len(list(enc.buffers())) == 0
    assert enc.pos_dim == 128


def test_large_offsets_accurate():
    enc = Sandwich(n_heads=1, pos_dim=8)
    d = 100003
    want = (sum(math.cos(d * 10000 ** (-2 * k / 8)) for k in range(4)) - 4) / 8
    assert float(enc.relative_bias(torch.tensor([d]))[0, 0]) == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [({"pos_dim": 3}, ValueError, "pos_dim"), ({"pos_dim": 0}, ValueError, "pos_dim"),
     ({"base": 1.0}, ValueError, "base"), ({"compress": 1}, TypeError, "compress")],
)
def test_bad_options_raise(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        Sandwich(n_heads=2, **kwargs)


def test_float_offsets_rejected():
    with pytest.raises(TypeError, match="delta"):
        Sandwich(n_heads=2).relative_bias(torch.tensor([0.5]))
