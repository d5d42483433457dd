"""CoPE: gated counts, interpolation, reference, causal-only, decoding and padding."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import relpos
from relpos.encodings.cope import CoPE, query_key_index
from tests.helpers import randomize_parameters

H, D = 3, 4


def _qkv(B=2, Nq=7, Nk=7, seed=0, dtype=torch.float32, std=1.0):
    g = torch.Generator().manual_seed(seed)
    return tuple((torch.randn(B, H, n, D, generator=g, dtype=dtype) * std).requires_grad_() for n in (Nq, Nk, Nk))


def _enc(**kw):
    enc = CoPE(**{"n_heads": H, "head_dim": D, "npos_max": 16, **kw})
    randomize_parameters(enc)
    return enc


def test_structure_and_flags():
    enc = relpos.make_encoding("cope", n_heads=4, head_dim=8)
    assert enc.pos_emb.shape == (1, 64, 8) and enc.num_params() == 64 * 8
    assert enc.pos_emb.abs().max() == 0  # zero-initialised, as in the paper
    assert enc.causal_only and not enc.integer_positions
    assert enc.acts_on == frozenset({"score"})
    per = relpos.make_encoding("cope", n_heads=4, head_dim=8, npos_max=10, per_head=True)
    assert per.pos_emb.shape == (4, 10, 8)


# ------------------------------------------------------------------ formula


def test_saturated_gates_count_integer_positions():
    """Gates of 1 make p_ij = i - j + 1: the term is then a lookup of e[i - j + 1]."""
    enc = _enc(npos_max=6)
    q = torch.ones(1, H, 8, D) * 10.0  # q.k = 400 -> sigmoid = 1
    k = torch.ones(1, H, 8, D)
    pos = torch.arange(8)[None]
    p = enc.positions(q, k, pos, pos, scale=1.0)
    want = (torch.arange(8)[:, None] - torch.arange(8)[None, :] + 1).clamp(max=5).float() * torch.ones(8, 8).tril()
    torch.testing.assert_close(p[0, 0], want)
    s = enc.score(q, k, pos, pos, scale=1.0)
    for i in range(8):
        for j in range(i + 1):
            e = enc.pos_emb[0, min(i - j + 1, 5)]
            assert s[0, 1, i, j].item() == pytest.approx((q[0, 1, i] @ e).item(), rel=1e-5, abs=1e-5)


def test_half_gates_interpolate_between_neighbours():
    """Zero keys give gates of 1/2, so p_ij = (i - j + 1) / 2 and half-integers interpolate."""
    enc = _enc(npos_max=8, per_head=True)
    g = torch.Generator().manual_seed(4)
    q = torch.randn(1, H, 5, D, generator=g)
    k = torch.zeros(1, H, 5, D)
    pos = torch.arange(5)[None]
    s = enc.score(q, k, pos, pos, scale=1.0)
    for h in range(H):
        for i in range(5):
            for j in range(i + 1):
                p = (i - j + 1) / 2
                lo, hi = math.floor(p), math.ceil(p)
                e = (p - lo) * enc.pos_emb[h, hi] + (1 - (p - lo)) * enc.pos_emb[h, lo]
                assert s[0, h, i, j].item() == pytest.approx((q[0, h, i] @ e).item(), rel=1e-5, abs=1e-5)
    assert (s[0][:, torch.ones(5, 5).triu(1).bool()] == 0).all()  # future keys get nothing


@pytest.mark.parametrize("opts", [{}, {"per_head": True}, {"npos_max": 3}, {"npos_max": 2, "per_head": True}])
def test_score_matches_reference_with_grads(opts):
    enc = _enc(**opts)
    q, k, _ = _qkv(B=2, Nq=4, Nk=9, std=1.5)
    qpos = torch.tensor([[5, 6, 7, 8], [2, 4, 7, 8]])
    kpos = torch.arange(9)[None]
    s = enc.score(q, k, qpos, kpos, 0.5)
    r = enc.reference_score(q, k, qpos, kpos, 0.5)
    torch.testing.assert_close(s.double(), r, atol=1e-5, rtol=1e-5)
    w = torch.randn(s.shape, generator=torch.Generator().manual_seed(2))
    params = [q, k] + list(enc.parameters())
    g1 = torch.autograd.grad((s * w).sum(), params)
    g2 = torch.autograd.grad((r * w.double()).sum(), params)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a.double(), b.double(), atol=1e-4, rtol=1e-4)


def test_explicit_positions_only_locate_queries():
    """Increasing explicit positions give the same result as the default ones."""
    enc = _enc()
    q, k, v = _qkv(B=2, Nq=6, Nk=6, seed=6)
    pos = torch.tensor([[0, 3, 4, 9, 12, 20], [1, 2, 5, 6, 7, 30]])
    a = relpos.attention(q, k, v, enc, causal=True, positions=pos)
    b = relpos.attention(q, k, v, enc, causal=True)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    assert query_key_index(pos[:, 2:4], pos).tolist() == [[2, 3], [2, 3]]


# ------------------------------------------------------------------ properties


@given(st.integers(1, 12), st.integers(0, 10_000), st.floats(0.1, 3.0))
def test_positions_grow_into_the_past(n, seed, std):
    enc = CoPE(n_heads=H, head_dim=D, npos_max=1000)  # no clipping in reach
    q, k, _ = _qkv(B=1, Nq=n, Nk=n, seed=seed, std=std)
    pos = torch.arange(n)[None]
    p = enc.positions(q.detach().double(), k.detach().double(), pos, pos, scale=0.5)[0]  # (H, n, n)
    past = torch.ones(n, n, dtype=torch.bool).tril()
    i = torch.arange(n)[:, None].expand(n, n)
    j = torch.arange(n)[None, :].expand(n, n)
    assert (p[:, ~past] == 0).all()
    assert ((p > 0) | ~past).all() and ((p <= (i - j + 1)) | ~past).all()
    diag = p.diagonal(dim1=-2, dim2=-1)
    assert ((diag > 0) & (diag <= 1)).all()  # a gate is sigmoid(.): 1.0 once saturated in float64
    # along a row, stepping one key back adds one gate in (0, 1]: p never decreases (a gate as small
    # as sigmoid(-40) ~ 4e-18 is lost when added to a running sum of a few units, so the step may
    # round to 0 but never below it)
    step = p[:, :, :-1] - p[:, :, 1:]  # p_ij - p_i(j+1)
    inner = past[:, 1:]  # both j and j+1 visible
    assert ((step >= 0) & (step <= 1 + 1e-12))[:, inner].all()


@given(st.integers(2, 10), st.integers(0, 1000))
def test_positions_are_clipped(npos_max, seed):
    enc = CoPE(n_heads=H, head_dim=D, npos_max=npos_max)
    q, k, _ = _qkv(B=1, Nq=12, Nk=12, seed=seed)
    pos = torch.arange(12)[None]
    p = enc.positions(q.detach(), k.detach(), pos, pos, 1.0)
    assert p.max() <= npos_max - 1 and p.min() >= 0


def test_low_precision_inputs_keep_float32_positions():
    """(Decoding, padding and bfloat16 outputs: tests/encodings/test_content_dependent.py.)"""
    enc = _enc()
    q, k, _ = (t.detach().to(torch.bfloat16) for t in _qkv(seed=3))
    pos = torch.arange(7)[None]
    assert enc.positions(q, k, pos, pos, 0.5).dtype == torch.float32


# ------------------------------------------------------------------ bad input


def test_causal_only():
    enc = relpos.make_encoding("cope", n_heads=H, head_dim=D, causal=False)  # builds; attention refuses
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="causal attention only"):
        relpos.attention(q, k, v, enc, causal=False)


@pytest.mark.parametrize(
    "opts, err, match",
    [
        ({"npos_max": 1}, ValueError, "npos_max"),
        ({"npos_max": 4.0}, TypeError, "npos_max"),
        ({"per_head": "yes"}, TypeError, "per_head"),
        ({"init_std": -0.1}, ValueError, "init_std"),
        ({"head_dim": 0}, ValueError, "head_dim"),
    ],
)
def test_bad_options(opts, err, match):
    with pytest.raises(err, match=match):
        CoPE(**{"n_heads": 2, "head_dim": 4, **opts})
    with pytest.raises(TypeError, match="accepted options"):
        relpos.make_encoding("cope", n_heads=2, head_dim=4, max_pos=3)
