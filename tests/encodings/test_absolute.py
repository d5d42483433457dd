"""Absolute sinusoidal and learned embeddings: values, fast path vs reference, errors."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import relpos
from relpos.encodings.absolute import LearnedAbsolute, Sinusoidal, sinusoidal_table
from tests.helpers import build, randomize_parameters


def _x(B=2, N=5, C=12, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, N, C, generator=g, dtype=dtype)


# ------------------------------------------------------------------ sinusoidal


def test_sinusoidal_values_follow_the_paper():
    C = 6
    pos = torch.tensor([0, 1, 7, 100])
    pe = sinusoidal_table(pos, C)
    assert pe.dtype == torch.float32 and pe.shape == (4, C)
    for a, p in enumerate(pos.tolist()):
        for c in range(C // 2):
            w = 10000.0 ** (-2 * c / C)
            assert pe[a, 2 * c].item() == pytest.approx(math.sin(p * w), abs=1e-5)
            assert pe[a, 2 * c + 1].item() == pytest.approx(math.cos(p * w), abs=1e-5)


def test_sinusoidal_odd_width_keeps_last_sin():
    pe = sinusoidal_table(torch.tensor([3]), 5)
    w = 10000.0 ** (-4 / 5)
    assert pe.shape == (1, 5)
    assert pe[0, 4].item() == pytest.approx(math.sin(3 * w), abs=1e-6)


@pytest.mark.parametrize("C", [1, 7, 12])
@pytest.mark.parametrize("batched_pos", [False, True])
def test_sinusoidal_embed_matches_reference(C, batched_pos):
    enc = relpos.make_encoding("sinusoidal", n_heads=1, head_dim=C)
    x = _x(C=C)
    pos = torch.tensor([[0, 3, 4, 9, 50], [1, 2, 5, 6, 700]]) if batched_pos else torch.arange(5)[None]
    out = enc.embed(x, pos)
    ref = enc.reference_embed(x, pos)
    assert ref.dtype == torch.float64
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=0)


def test_sinusoidal_table_is_float32_for_bf16_models():
    enc = Sinusoidal(d_model=16)
    x = torch.zeros(1, 2, 16, dtype=torch.bfloat16)
    pos = torch.tensor([[1000, 1001]])
    out = enc.embed(x, pos)
    assert out.dtype == torch.bfloat16
    ref = enc.reference_embed(x, pos)
    # angles formed in bf16 would be off by whole radians at p = 1000; float32 is exact to bf16 rounding
    torch.testing.assert_close(out.double(), ref, atol=1e-2, rtol=0)


def test_sinusoidal_has_no_params_and_is_absolute():
    enc = relpos.make_encoding("sinusoidal")
    assert enc.num_params() == 0
    assert enc.acts_on == frozenset({"embedding"})
    assert enc.relative is False and enc.integer_positions is True


# ------------------------------------------------------------------ learned


def test_learned_default_param_count():
    enc = relpos.make_encoding("learned")  # d_model 8 * 64 = 512, max_len 512
    assert enc.table.shape == (512, 512)
    assert enc.num_params() == 262_144
    enc = relpos.make_encoding("learned", n_heads=2, head_dim=4, d_model=10, max_len=7)
    assert enc.num_params() == 70


@pytest.mark.parametrize("batched_pos", [False, True])
def test_learned_embed_matches_reference_with_grads(batched_pos):
    enc = build("learned", n_heads=3, head_dim=4, max_len=32)
    x = _x(C=12).requires_grad_(True)
    pos = torch.tensor([[0, 3, 4, 9, 31], [1, 2, 5, 6, 7]]) if batched_pos else torch.arange(2, 7)[None]
    w = torch.linspace(-1, 1, 2 * 5 * 12).view(2, 5, 12)
    out = enc.embed(x, pos)
    g_fast = torch.autograd.grad((out * w).sum(), [x, enc.table])
    ref = enc.reference_embed(x, pos)
    g_ref = torch.autograd.grad((ref * w.double()).sum(), [x, enc.table])
    torch.testing.assert_close(out.double(), ref, atol=1e-6, rtol=0)
    for a, b in zip(g_fast, g_ref):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    # only the rows that were used receive a gradient
    used = torch.zeros(32, dtype=torch.bool)
    used[pos.flatten()] = True
    assert g_fast[1][~used].abs().max() == 0
    assert g_fast[1][used].abs().sum(-1).min() > 0


def test_learned_table_too_short_names_max_len_and_position():
    enc = LearnedAbsolute(d_model=4, max_len=16)
    x = torch.zeros(1, 3, 4)
    with pytest.raises(ValueError, match=r"position 16.*max_len=16"):
        enc.embed(x, torch.tensor([[0, 1, 16]]))
    with pytest.raises(ValueError, match="max_len=16"):
        enc.reference_embed(x, torch.tensor([[0, 1, 40]]))
    with pytest.raises(ValueError, match="negative"):
        enc.embed(x, torch.tensor([[-1, 0, 1]]))
    enc.embed(x, torch.tensor([[13, 14, 15]]))  # the last row is fine


# ------------------------------------------------------------------ both


@pytest.mark.parametrize("name", ["sinusoidal", "learned"])
def test_absolute_schemes_are_refused_inside_attention(name):
    """They used to return exactly the output of no encoding (a silent NoPE)."""
    enc = build(name, n_heads=2, head_dim=4)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g) for _ in range(3))
    with pytest.raises(ValueError, match="token embeddings"):
        relpos.attention(q, k, v, enc, causal=True)


@pytest.mark.parametrize("name", ["sinusoidal", "learned"])
@given(c=st.integers(1, 40), start=st.integers(0, 20))
def test_shifting_positions_changes_absolute_embeddings(name, c, start):
    enc = relpos.make_encoding(name, n_heads=2, head_dim=4, max_len=128)
    randomize_parameters(enc)
    x = _x(1, 4, 8)
    pos = torch.arange(start, start + 4)[None]
    a, b = enc.embed(x, pos), enc.embed(x, pos + c)
    assert not torch.allclose(a, b, atol=1e-4)


@pytest.mark.parametrize(
    ("factory", "exc", "word"),
    [
        (lambda: Sinusoidal(d_model=0), ValueError, "d_model"),
        (lambda: Sinusoidal(d_model=2.5), TypeError, "d_model"),
        (lambda: Sinusoidal(d_model=4, base=1.0), ValueError, "base"),
        (lambda: LearnedAbsolute(d_model=4, max_len=0), ValueError, "max_len"),
        (lambda: LearnedAbsolute(d_model=True), TypeError, "d_model"),
        (lambda: LearnedAbsolute(d_model=4, init_std=-1.0), ValueError, "init_std"),
        (lambda: relpos.make_encoding("learned", table_size=3), TypeError, "table_size"),
    ],
)
def test_bad_arguments(factory, exc, word):
    with pytest.raises(exc, match=word):
        factory()


@pytest.mark.parametrize("name", ["sinusoidal", "learned"])
def test_bad_embed_inputs(name):
    enc = relpos.make_encoding(name, n_heads=1, head_dim=4, max_len=8)
    with pytest.raises(ValueError, match="x must have shape"):
        enc.embed(torch.zeros(1, 3, 5), torch.arange(3)[None])
    with pytest.raises(TypeError, match="pos"):
        enc.embed(torch.zeros(1, 3, 4), torch.arange(3.0)[None])
    with pytest.raises(ValueError, match="pos must have shape"):
        enc.embed(torch.zeros(2, 3, 4), torch.zeros(3, 3, dtype=torch.long))
