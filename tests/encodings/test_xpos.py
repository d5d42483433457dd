"""xPos: reference agreement, the decay formula, relative q.k, causal-only, errors."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import relpos
from relpos.encodings.rope import RoPE
from relpos.encodings.xpos import XPos


def _x(B=2, H=2, N=6, D=8, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, H, N, D, generator=g, dtype=dtype)


@pytest.mark.parametrize("is_query", [True, False])
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("frac", [1.0, 0.5])
def test_rotate_matches_reference_with_grad(is_query, pairing, frac):
    enc = XPos(n_heads=2, head_dim=8, pairing=pairing, rotary_fraction=frac, scale_base=16.0)
    x = _x().requires_grad_(True)
    pos = torch.tensor([[0, 3, 7, 20, 41, 60], [2, 3, 4, 5, 6, 7]])
    out = enc.rotate(x, pos, is_query=is_query, seq_len=61)
    ref = enc.reference_rotate(x, pos, is_query=is_query, seq_len=61)
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    w = torch.randn_like(out)
    g1, = torch.autograd.grad((out * w).sum(), x)
    g2, = torch.autograd.grad((ref * w).sum(), x)
    torch.testing.assert_close(g1, g2, rtol=1e-6, atol=1e-6)


def test_zeta_by_hand():
    enc = XPos(n_heads=1, head_dim=8)  # r = 8: zeta_k = (2k/8 + 0.4) / 1.4
    torch.testing.assert_close(enc.zeta(), torch.tensor([0.4 / 1.4, 0.65 / 1.4, 0.9 / 1.4, 1.15 / 1.4],
                                                         dtype=torch.float64))
    assert enc.gamma == 0.4 and enc.scale_base == 512.0


@given(n=st.integers(0, 300), m=st.integers(0, 300), k=st.integers(0, 3), c=st.integers(0, 2000))
def test_qk_is_rope_times_decay_and_relative(n, m, k, c):
    """With only pair k non-zero, <q'_n, k'_m> = zeta_k^((n - m)/scale_base) * RoPE's <q_n, k_m>."""
    D, sb = 8, 64.0
    enc = XPos(n_heads=1, head_dim=D, scale_base=sb)
    rope = RoPE(n_heads=1, head_dim=D)
    g = torch.Generator().manual_seed(k)
    q, kk = torch.zeros(1, 1, 1, D, dtype=torch.float64), torch.zeros(1, 1, 1, D, dtype=torch.float64)
    q[..., [k, k + 4]] = torch.randn(2, generator=g, dtype=torch.float64)
    kk[..., [k, k + 4]] = torch.randn(2, generator=g, dtype=torch.float64)
    seq_len = max(n, m) + 1 + c  # any common seq_len: the centering cancels

    def dot(e, sl):
        qn = e.reference_rotate(q, torch.tensor([[n]]), is_query=True, seq_len=sl)
        km = e.reference_rotate(kk, torch.tensor([[m]]), is_query=False, seq_len=sl)
        return float((qn * km).sum())

    zeta = (2 * k / D + 0.4) / 1.4
    want = zeta ** ((n - m) / sb) * dot(rope, seq_len)
    assert dot(enc, seq_len) == pytest.approx(want, rel=1e-9, abs=1e-12)
    # shifting both positions leaves the score unchanged (fast path, float32)
    qn = enc.rotate(q.float(), torch.tensor([[n + c]]), is_query=True, seq_len=seq_len + c)
    km = enc.rotate(kk.float(), torch.tensor([[m + c]]), is_query=False, seq_len=seq_len + c)
    assert float((qn * km).sum()) == pytest.approx(want, rel=2e-3, abs=2e-4)


def test_scores_decay_with_distance():
    enc = XPos(n_heads=1, head_dim=8, base=1e12)  # near-zero rotation except pair 0 -> isolate the decay
    D = 8
    v = torch.zeros(1, 1, 1, D)
    v[..., 3] = 1.0  # pair k=3 (channels 3, 7), rotation ~ 0 at this base
    scores = []
    for d in range(0, 2000, 250):
        qn = enc.rotate(v, torch.tensor([[d]]), is_query=True, seq_len=d + 1)
        k0 = enc.rotate(v, torch.tensor([[0]]), is_query=False, seq_len=d + 1)
        scores.append(float((qn * k0).sum()))
    assert all(a > b for a, b in zip(scores, scores[1:]))
    zeta3 = (6 / 8 + 0.4) / 1.4
    assert scores[-1] == pytest.approx(zeta3 ** (1750 / 512), rel=1e-4)


def test_long_sequences_stay_finite_in_float32():
    enc = XPos(n_heads=1, head_dim=8)
    x = torch.randn(1, 1, 4, 8)
    pos = torch.tensor([[0, 1, 30000, 59999]])
    for is_query in (True, False):
        assert torch.isfinite(enc.rotate(x, pos, is_query=is_query, seq_len=60000)).all()


def test_causal_only_and_flags():
    enc = relpos.make_encoding("xpos", n_heads=2, head_dim=8)
    assert isinstance(enc, XPos) and enc.causal_only and enc.relative and enc.num_params() == 0
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match="causal"):
        relpos.attention(q, q, q, enc, causal=False)
    assert relpos.attention(q, q, q, enc, causal=True).shape == (1, 2, 4, 8)
    assert "scaling" not in enc.describe()


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        ({"gamma": 0.0}, ValueError, "gamma"),
        ({"gamma": "x"}, TypeError, "gamma"),
        ({"scale_base": -1.0}, ValueError, "scale_base"),
        ({"pairing": "odd"}, ValueError, "pairing"),
        ({"rotary_fraction": 2.0}, ValueError, "rotary_fraction"),
    ],
)
def test_bad_options_raise(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        XPos(n_heads=2, head_dim=8, **kwargs)


def test_no_rope_scalings():
    with pytest.raises(TypeError, match="unknown option"):
        relpos.make_encoding("xpos", n_heads=2, head_dim=8, scaling="yarn")
    with pytest.raises(ValueError, match="scaling"):
        XPos(n_heads=2, head_dim=8).set_scaling("yarn")
    assert math.isclose(XPos(n_heads=2, head_dim=8).mscale, 1.0)
