"""FoX forgetting gates: reference, decay properties, ALiBi as a special case, decoding."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import relpos
from relpos.distance import alibi_slopes
from relpos.encodings.fox import ForgettingGate
from tests.helpers import randomize_parameters

H, D = 3, 4


def _qkv(B=2, Nq=7, Nk=7, seed=0, dtype=torch.float32, std=1.0):
    g = torch.Generator().manual_seed(seed)
    return tuple((torch.randn(B, H, n, D, generator=g, dtype=dtype) * std).requires_grad_() for n in (Nq, Nk, Nk))


def _enc(**kw):
    enc = ForgettingGate(**{"n_heads": H, "head_dim": D, **kw})
    randomize_parameters(enc)
    return enc


def test_structure_and_flags():
    enc = relpos.make_encoding("fox", n_heads=4, head_dim=8)
    assert enc.gate_weight.shape == (4, 8) and enc.gate_bias.shape == (4,)
    assert enc.num_params() == 4 * 8 + 4
    assert enc.causal_only and not enc.integer_positions
    assert enc.acts_on == frozenset({"score"})
    assert (ForgettingGate(n_heads=2, head_dim=2, bias_init=3.0).gate_bias == 3.0).all()


# ------------------------------------------------------------------ formula


def test_bias_is_sum_of_log_gates_between_key_and_query():
    enc = _enc()
    _, k, _ = _qkv(B=1, Nk=6)
    pos = torch.arange(6)[None]
    s = enc.score(k, k, pos, pos, 1.0)
    for h in range(H):
        log_f = [math.log(1 / (1 + math.exp(-(enc.gate_weight[h] @ k[0, h, t] + enc.gate_bias[h]).item())))
                 for t in range(6)]
        for i in range(6):
            for j in range(6):
                want = sum(log_f[j + 1 : i + 1]) if j <= i else 0.0
                assert s[0, h, i, j].item() == pytest.approx(want, abs=1e-5)


def test_score_matches_reference_with_grads():
    enc = _enc()
    q, k, _ = _qkv(B=2, Nq=4, Nk=9, std=1.5)
    qpos = torch.tensor([[5, 6, 7, 8], [2, 4, 7, 8]])
    kpos = torch.arange(9)[None]
    s = enc.score(q, k, qpos, kpos, 0.5)
    r = enc.reference_score(q, k, qpos, kpos, 0.5)
    torch.testing.assert_close(s.double(), r, atol=1e-5, rtol=1e-5)
    w = torch.randn(s.shape, generator=torch.Generator().manual_seed(2))
    params = [k] + list(enc.parameters())
    g1 = torch.autograd.grad((s * w).sum(), params)
    g2 = torch.autograd.grad((r * w.double()).sum(), params)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a.double(), b.double(), atol=1e-4, rtol=1e-4)


def test_constant_gates_are_alibi():
    """w = 0 and sigmoid(b_h) = exp(-m_h) give ALiBi's causal bias -m_h (i - j)."""
    slopes = alibi_slopes(H).double()
    enc = ForgettingGate(n_heads=H, head_dim=D, init_std=0.0)
    with torch.no_grad():
        enc.gate_bias.copy_(-torch.log(torch.expm1(slopes)))  # logsigmoid(b) = -m
    alibi = relpos.make_encoding("alibi", n_heads=H, head_dim=D)
    q, k, v = _qkv(B=2, Nq=10, Nk=10, seed=4)
    a = relpos.attention(q, k, v, enc, causal=True)
    b = relpos.attention(q, k, v, alibi, causal=True)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------ properties


@given(st.integers(1, 16), st.integers(0, 10_000), st.floats(0.1, 4.0))
def test_bias_is_a_monotone_decay(n, seed, std):
    enc = ForgettingGate(n_heads=H, head_dim=D, init_std=1.0)
    randomize_parameters(enc, std=std, seed=seed)
    _, k, _ = _qkv(B=1, Nk=n, seed=seed, std=std)
    pos = torch.arange(n)[None]
    s = enc.score(k.detach(), k.detach(), pos, pos, 1.0)[0]  # (H, n, n)
    past = torch.ones(n, n, dtype=torch.bool).tril()
    assert (s <= 0).all() and (s[:, ~past] == 0).all()
    assert (s.diagonal(dim1=-2, dim2=-1) == 0).all()
    # stepping one key further back never raises the bias
    assert (s[:, :, :-1] <= s[:, :, 1:])[:, past[:, 1:]].all()
    # additivity: from i back to j is from i back to m, then from m back to j
    for i in range(n):
        for m in range(i + 1):
            torch.testing.assert_close(s[:, i, : m + 1], s[:, i, m : m + 1] + s[:, m, : m + 1], atol=1e-4, rtol=1e-4)


def test_long_sequences_stay_finite_and_float32():
    enc = ForgettingGate(n_heads=1, head_dim=2, init_std=0.0, bias_init=-8.0)  # log f ~ -8 per token
    k = torch.randn(1, 1, 600, 2)
    pos = torch.arange(600)[None]
    s = enc.score(k, k, pos, pos, 1.0)
    assert s.dtype == torch.float32 and torch.isfinite(s).all()
    assert s[0, 0, -1, 0].item() == pytest.approx(599 * torch.nn.functional.logsigmoid(torch.tensor(-8.0)).item(),
                                                  rel=1e-4)
    out = relpos.attention(k, k, k, enc, causal=True)
    assert torch.isfinite(out).all()


def test_low_precision_inputs_keep_float32_gates():
    """(Decoding, padding and bfloat16 outputs: tests/encodings/test_content_dependent.py.)"""
    enc = _enc()
    _, k, _ = (t.detach().to(torch.bfloat16) for t in _qkv(seed=3))
    assert enc.log_forget_gates(k).dtype == torch.float32


# ------------------------------------------------------------------ bad input


def test_causal_only():
    enc = relpos.make_encoding("fox", n_heads=H, head_dim=D, causal=False)
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="causal attention only"):
        relpos.attention(q, k, v, enc, causal=False)


@pytest.mark.parametrize(
    "opts, match",
    [
        ({"init_std": -1.0}, "init_std"),
        ({"init_std": float("nan")}, "init_std"),
        ({"bias_init": float("inf")}, "bias_init"),
        ({"head_dim": 0}, "head_dim"),
    ],
)
def test_bad_options(opts, match):
    with pytest.raises(TypeError, match="bias_init"):  # a wrong type is a TypeError (relpos.validation)
        ForgettingGate(n_heads=2, head_dim=4, bias_init=True)
    with pytest.raises(ValueError, match=match):
        ForgettingGate(**{"n_heads": 2, "head_dim": 4, **opts})
    with pytest.raises(TypeError, match="accepted options"):
        relpos.make_encoding("fox", n_heads=2, head_dim=4, gate="x")
