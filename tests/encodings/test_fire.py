"""FIRE: bias vs the float64 reference (with gradients), max(L, i), positivity, errors."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import relpos
from relpos.encodings.fire import FIRE
from tests.helpers import randomize_parameters


def _fire(H=3, seed=0, **kw):
    enc = FIRE(n_heads=H, **kw)
    randomize_parameters(enc, std=0.5, seed=seed)
    return enc


@pytest.mark.parametrize("init_L", [512.0, 4.0])
def test_bias_matches_reference_with_grad(init_L):
    enc = _fire(init_L=init_L)
    qpos = torch.tensor([[3, 4, 5, 6, 7], [0, 2, 9, 11, 15]])
    kpos = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 2, 4, 8, 9, 11, 15]])
    fast = enc.bias(qpos, kpos)
    ref = enc.reference_bias(qpos, kpos)
    assert fast.dtype == torch.float32 and fast.shape == (2, 3, 5, 8)
    torch.testing.assert_close(fast.double(), ref, rtol=1e-5, atol=1e-5)
    w = torch.randn(ref.shape, dtype=torch.float64)
    params = list(enc.parameters())
    g1 = torch.autograd.grad((fast.double() * w).sum(), params)
    g2 = torch.autograd.grad((ref * w).sum(), params)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-4, atol=1e-5)


def _manual(enc: FIRE, i: int, j: int) -> torch.Tensor:
    c, L = float(enc.c.detach()), float(enc.threshold.detach())
    z = math.log(c * abs(i - j) + 1) / (math.log(c * max(L, i) + 1) + enc.eps)
    with torch.no_grad():
        return enc.mlp(torch.tensor([[z]])).flatten()


@given(i=st.integers(0, 60), j=st.integers(0, 60), L=st.floats(1.0, 40.0))
def test_uses_max_of_threshold_and_query_position(i, j, L):
    enc = _fire(init_L=L)
    got = enc.bias(torch.tensor([[i]]), torch.tensor([[j]]))[0, :, 0, 0]
    torch.testing.assert_close(got, _manual(enc, i, j), rtol=1e-5, atol=1e-5)


def test_threshold_gradient_only_below_L():
    enc = _fire(init_L=8.0)
    L = enc.threshold.item()
    above = torch.arange(int(L) + 2, int(L) + 8)[None]  # every query beyond L: normaliser psi(i)
    g, = torch.autograd.grad(enc.bias(above, above).sum(), enc.l_raw)
    assert g == 0
    below = torch.arange(0, int(L))[None]
    g, = torch.autograd.grad(enc.bias(below, below).sum(), enc.l_raw)
    assert g != 0


def test_rows_below_threshold_are_toeplitz_and_beyond_are_not():
    enc = _fire(init_L=10.0)
    pos = torch.arange(0, 30)[None]
    b = enc.bias(pos, pos)[0]  # (H, N, N)
    L = int(enc.threshold.item())
    # for i, i+1 <= L the same offset gives the same value
    torch.testing.assert_close(b[:, 5, 2], b[:, 6, 3])
    # beyond L the normaliser grows with i: same offset, different value
    assert not torch.allclose(b[:, L + 10, L + 7], b[:, L + 15, L + 12])


@given(q0=st.integers(0, 40), k0=st.integers(0, 40), nq=st.integers(1, 12), nk=st.integers(1, 12),
       L=st.floats(1.0, 50.0))
def test_rows_below_threshold_as_offsets_equal_per_pair_form(q0, k0, nq, nk, L):
    # shared contiguous positions take the offset form for rows i < L; it must equal the per-pair form
    enc = _fire(init_L=L)
    qpos, kpos = torch.arange(q0, q0 + nq)[None], torch.arange(k0, k0 + nk)[None]
    fast = enc.bias(qpos, kpos)
    alpha, beta, z = enc._segments()
    pairs = enc._piecewise(alpha, beta, z, enc.normalized_distance(qpos, kpos))
    assert fast.shape == pairs.shape == (1, 3, nq, nk)
    torch.testing.assert_close(fast, pairs, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(fast.double(), enc.reference_bias(qpos, kpos), rtol=1e-5, atol=1e-5)
    w = torch.randn(fast.shape)
    params = list(enc.parameters())
    for a, b in zip(torch.autograd.grad((fast * w).sum(), params), torch.autograd.grad((pairs * w).sum(), params)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_offset_form_needs_shared_consecutive_positions():
    from relpos.distance import contiguous_offsets

    pos = torch.arange(0, 30)[None]
    assert contiguous_offsets(pos, pos) is not None
    assert contiguous_offsets(torch.arange(0, 30).expand(2, 30), pos) is None  # per-example positions
    assert contiguous_offsets(torch.tensor([[0, 2, 3]]), torch.arange(0, 4)[None]) is None  # a gap
    assert contiguous_offsets(torch.arange(0, 3)[None], torch.tensor([[0, 1, 5]])) is None
    enc = _fire(init_L=10.0)
    gapped = torch.tensor([[0, 2, 3, 9, 12, 20]])  # per-pair form: still the reference's numbers
    torch.testing.assert_close(enc.bias(gapped, gapped).double(), enc.reference_bias(gapped, gapped),
                               rtol=1e-5, atol=1e-5)


def test_not_shift_invariant():
    enc = relpos.make_encoding("fire", n_heads=2, head_dim=8, init_L=4.0)
    randomize_parameters(enc)
    assert enc.relative is False and enc.toeplitz is False
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8, 8, generator=g) for _ in range(3))
    a = relpos.attention(q, k, v, enc, causal=True, positions=torch.arange(8))
    b = relpos.attention(q, k, v, enc, causal=True, positions=torch.arange(8) + 50)
    assert not torch.allclose(a, b, atol=1e-4)


@given(st.lists(st.integers(0, 5000), min_size=1, max_size=12, unique=True), st.floats(0.5, 600.0))
def test_normalized_distance_in_unit_interval_for_causal_pairs(pos, L):
    enc = _fire(init_L=L)
    p = torch.tensor(sorted(pos))[None]
    z = enc.normalized_distance(p, p)[0]  # (N, N)
    causal = torch.ones_like(z, dtype=torch.bool).tril()
    assert bool((z[causal] >= 0).all()) and bool((z[causal] <= 1 + 1e-6).all())
    assert bool((z.diagonal() == 0).all())


def test_parameters_stay_positive_and_count():
    enc = FIRE(n_heads=4)
    assert enc.c.item() == pytest.approx(0.1, rel=1e-6)
    assert enc.threshold.item() == pytest.approx(512.0, rel=1e-6)
    with torch.no_grad():
        enc.c_raw.fill_(-50.0)
        enc.l_raw.fill_(-50.0)
    assert enc.c.item() > 0 and enc.threshold.item() > 0
    b = enc.bias(torch.arange(5)[None], torch.arange(5)[None])
    assert torch.isfinite(b).all()
    assert enc.num_params() == 2 + (32 + 32) + (32 * 4 + 4)


def test_bidirectional_is_symmetric_and_bf16_gives_float32():
    enc = _fire(init_L=100.0).to(torch.bfloat16)
    pos = torch.arange(6)[None]
    b = enc.bias(pos, pos)
    assert b.dtype == torch.float32
    torch.testing.assert_close(b, b.transpose(-1, -2))  # all i < L: normaliser constant


@pytest.mark.parametrize(
    "kwargs,match",
    [({"mlp_width": 0}, "mlp_width"), ({"init_c": 0.0}, "init_c"), ({"init_L": -1.0}, "init_L"),
     ({"init_L": float("inf")}, "init_L"), ({"eps": -1.0}, "eps"), ({"n_heads": 0}, "n_heads")],
)
def test_bad_options_raise(kwargs, match):
    kw = {"n_heads": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        FIRE(**kw)
