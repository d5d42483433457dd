"""Transformer-XL: the u/v/W_R R formula, its sign, distinct distances, caching and memory."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import relpos
from relpos.encodings.transformer_xl import TransformerXL, txl_sinusoid
from tests.helpers import randomize_parameters


def _qkv(B=2, H=2, Nq=5, Nk=5, D=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, n, D, generator=g) for n in (Nq, Nk, Nk))


def _enc(**kw):
    enc = TransformerXL(**{"n_heads": 2, "head_dim": 4, **kw})
    randomize_parameters(enc)
    return enc


def test_param_count_and_shapes():
    enc = relpos.make_encoding("transformer-xl", n_heads=8, head_dim=64)
    assert enc.r_proj.shape == (8, 64, 512) and enc.u.shape == (8, 64) and enc.v.shape == (8, 64)
    assert enc.num_params() == 8 * 64 * 512 + 2 * 8 * 64
    assert TransformerXL(n_heads=3, head_dim=4, d_model=10).num_params() == 3 * 4 * 12
    assert enc.acts_on == frozenset({"score"}) and enc.relative


def test_sinusoid_layout():
    r = torch.tensor([0, 3, -2])
    R = txl_sinusoid(r, 6)
    for a, rv in enumerate(r.tolist()):
        for c in range(3):
            w = 10000.0 ** (-2 * c / 6)
            assert R[a, c].item() == pytest.approx(math.sin(rv * w), abs=1e-6)
            assert R[a, 3 + c].item() == pytest.approx(math.cos(rv * w), abs=1e-6)
    assert txl_sinusoid(r, 5).shape == (3, 5)


def test_score_formula_and_sign():
    """score = scale * (u.k_j + (q_i + v).(W_R R_{i-j})) with TXL's sign r = i - j."""
    enc = _enc()
    q, k, _ = _qkv(B=1, Nq=2, Nk=4)
    qpos, kpos = torch.tensor([[3, 5]]), torch.tensor([[0, 1, 3, 5]])
    s = enc.score(q, k, qpos, kpos, scale=0.5)
    flipped_differs = False
    for h in range(2):
        for t, i in enumerate(qpos[0].tolist()):
            for jj, j in enumerate(kpos[0].tolist()):
                def term(r):
                    wr = enc.r_proj[h] @ txl_sinusoid(torch.tensor(r), enc.d_model)  # (D,)
                    return 0.5 * (enc.u[h] @ k[0, h, jj] + (q[0, h, t] + enc.v[h]) @ wr)

                assert s[0, h, t, jj].item() == pytest.approx(term(i - j).item(), abs=1e-5)
                if i != j and abs(term(j - i).item() - s[0, h, t, jj].item()) > 1e-3:
                    flipped_differs = True
    assert flipped_differs  # the test pins the sign


def test_distinct_distances():
    r, idx = TransformerXL.distinct_distances(torch.arange(3, 7)[None], torch.arange(7)[None])
    assert r.tolist() == list(range(-3, 7))  # Nq + Nk - 1 = 10 consecutive distances i - j
    qpos = torch.tensor([[0, 1000]])
    kpos = torch.tensor([[0, 500, 1000]])
    r, idx = TransformerXL.distinct_distances(qpos, kpos)
    assert r.numel() <= 6  # sparse positions: unique values, not the 2001-wide range
    torch.testing.assert_close(r[idx], qpos[:, :, None] - kpos[:, None, :])


@pytest.mark.parametrize("d_model", [None, 7, 10])
@pytest.mark.parametrize(
    "positions", [None, torch.tensor([[0, 3, 4, 9, 12, 20, 21], [1, 2, 5, 6, 7, 30, 900]])]
)
def test_dense_matches_reference_with_grads(d_model, positions):
    enc = _enc(d_model=d_model)
    q, k, v = (t.requires_grad_(True) for t in _qkv(Nq=3, Nk=7))
    params = [enc.r_proj, enc.u, enc.v]

    def run(impl):
        out = relpos.attention(q, k, v, enc, impl=impl, causal=True, q_offset=4, positions=positions)
        w = torch.linspace(-1, 1, out.numel()).view_as(out)
        return out, torch.autograd.grad((out * w).sum(), [q, k, v, *params])

    out, grads = run("dense")
    ref, ref_grads = run("reference")
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)
    for g, rg in zip(grads, ref_grads):
        torch.testing.assert_close(g, rg, atol=2e-5, rtol=1e-4)
    assert all(g.abs().sum() > 0 for g in grads[3:])


def test_cached_decoding_and_segment_memory_match_full_sequence():
    enc = _enc()
    q, k, v = _qkv(B=1, Nq=9, Nk=9)
    full = relpos.attention(q, k, v, enc, causal=True)  # (1, H, 9, D)
    # one token at a time, with the whole cache as keys
    for t in range(9):
        step = relpos.attention(q[:, :, t : t + 1], k[:, :, : t + 1], v[:, :, : t + 1], enc, causal=True, q_offset=t)
        torch.testing.assert_close(step[:, :, 0], full[:, :, t], atol=1e-6, rtol=1e-5)
    # a segment of 4 queries whose keys are a 5-token memory plus the segment itself
    seg = relpos.attention(q[:, :, 5:], k, v, enc, causal=True, q_offset=5)
    torch.testing.assert_close(seg, full[:, :, 5:], atol=1e-6, rtol=1e-5)


@given(c=st.integers(-100, 100))
def test_output_unchanged_when_all_positions_shift(c):
    enc = _enc()
    q, k, v = _qkv(B=1, Nq=3, Nk=5)
    pos = torch.tensor([[2, 3, 7, 8, 12]])
    a = relpos.attention(q, k, v, enc, causal=True, q_offset=2, positions=pos)
    b = relpos.attention(q, k, v, enc, causal=True, q_offset=2, positions=pos + c)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_positions_matter():
    enc = _enc()
    q, k, v = _qkv(B=1, Nq=5, Nk=5)
    a = relpos.attention(q, k, v, enc, positions=torch.tensor([[0, 1, 2, 3, 4]]), causal=False)
    b = relpos.attention(q, k, v, enc, positions=torch.tensor([[0, 2, 3, 9, 10]]), causal=False)
    assert not torch.allclose(a, b, atol=1e-4)


@pytest.mark.parametrize(
    ("kwargs", "exc", "word"),
    [
        ({"head_dim": 0}, ValueError, "head_dim"),
        ({"d_model": 0}, ValueError, "d_model"),
        ({"base": 0.5}, ValueError, "base"),
        ({"init_std": -1}, ValueError, "init_std"),
        ({"n_heads": -2}, ValueError, "n_heads"),
    ],
)
def test_bad_arguments(kwargs, exc, word):
    with pytest.raises(exc, match=word):
        TransformerXL(**{"n_heads": 2, "head_dim": 4, **kwargs})


def test_wrong_head_dim_is_rejected():
    enc = TransformerXL(n_heads=2, head_dim=4)
    q, k, _ = _qkv(D=6)
    with pytest.raises(ValueError, match="head_dim|D="):
        enc.score(q, k, torch.arange(5)[None], torch.arange(5)[None], 0.5)
