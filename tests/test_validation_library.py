"""Library validation (issue 10, "Library bad input" and "Crashes and silent wrong answers").

Each test names the fault it guards against. Rule (relpos.validation): a wrong type
is a TypeError, a wrong value a ValueError, and the message names the parameter.
"""

from __future__ import annotations

import math

import pytest
import torch

import relpos
from relpos.distance import alibi_slopes, clip_relative, relative_positions, toeplitz
from relpos.encodings import make_encoding, scheme_names
from tests.helpers import attention_schemes, build

IMPLS = ["reference", "dense", "chunked", "auto"]


def _qkv(B=1, H=2, Nq=5, Nk=5, D=8, Dv=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, Nq, D, generator=g), torch.randn(B, H, Nk, D, generator=g),
            torch.randn(B, H, Nk, D if Dv is None else Dv, generator=g))


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("impl", IMPLS)
def test_nan_in_q_passes_through_cope_like_every_scheme(impl):
    """CoPE used to crash with an int64 index error on NaN queries (dense, chunked, auto)."""
    enc = build("cope", n_heads=2, causal=True)
    q, k, v = _qkv(Nq=6, Nk=6)
    q[0, 1, 3, 2] = float("nan")
    if impl != "flex":  # reference, dense, chunked (and auto, which picks them on CPU) refuse it (issue 29 item 15)
        with pytest.raises(ValueError, match="q holds NaN or inf"):
            relpos.attention(q, k, v, enc, causal=True, impl=impl)
        return
    out = relpos.attention(q, k, v, enc, causal=True, impl=impl)
    assert torch.isnan(out[0, 1, 3]).all()  # the row with the NaN query
    assert torch.isfinite(out[0, 0]).all() and torch.isfinite(out[0, 1, :3]).all()


def test_zero_head_dim_is_a_value_error():
    q = torch.randn(1, 2, 3, 0)
    with pytest.raises(ValueError, match="D >= 1"):
        relpos.attention(q, q, q, causal=False)


def test_huge_q_offset_is_a_value_error():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="q_offset"):
        relpos.attention(q, k, v, q_offset=10**19, causal=False)


def test_huge_clip_and_lengths_are_value_errors():
    with pytest.raises(ValueError, match="clip"):
        relative_positions(4, clip=10**30)
    with pytest.raises(ValueError, match="k "):
        clip_relative(torch.arange(3), 10**30)
    with pytest.raises(ValueError, match="q_len"):
        relative_positions(10**12)
    with pytest.raises(ValueError, match="q_len \\* k_len"):
        relative_positions(2**20, 2**20)


def test_toeplitz_needs_a_tensor_with_a_last_dimension():
    with pytest.raises(TypeError, match="values"):
        toeplitz([1.0, 2.0, 3.0], 2, 2)
    with pytest.raises(ValueError, match="values"):
        toeplitz(torch.tensor(1.0), 1, 1)


def test_tables_have_upper_limits():
    with pytest.raises(ValueError, match="k "):
        make_encoding("shaw", k=10**12)
    with pytest.raises(ValueError, match="max_len"):
        make_encoding("learned", max_len=10**12)
    with pytest.raises(ValueError, match="n_heads"):
        alibi_slopes(10**9)


def test_alibi_slopes_refuse_integer_dtypes():
    with pytest.raises(TypeError, match="dtype"):
        alibi_slopes(8, dtype=torch.int64)


def test_rope_refuses_an_odd_head_dim():
    for name in ("rope", "rope-yarn", "xpos"):
        with pytest.raises(ValueError, match="head_dim must be even"):
            make_encoding(name, n_heads=2, head_dim=7)


@pytest.mark.parametrize("name", ["t5", "shaw", "learned", "transformer-xl", "cope", "fox", "deberta"])
def test_nan_init_std_is_refused(name):
    with pytest.raises(ValueError, match="init_std"):
        make_encoding(name, n_heads=2, head_dim=8, init_std=float("nan"))


def test_causal_and_scale_are_checked():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match="causal"):
        relpos.attention(q, k, v, causal="yes")
    with pytest.raises(ValueError, match="scale"):
        relpos.attention(q, k, v, scale=float("nan"), causal=False)
    with pytest.raises(TypeError, match="causal"):
        make_encoding("t5", causal="yes")


# ------------------------------------------------- crashes and silent wrong answers


@pytest.mark.parametrize("name", attention_schemes())
def test_chunked_with_explicit_positions_and_q_offset(name):
    """chunked raised NotImplementedError (bias()) for schemes with no in-attention term."""
    enc = build(name, n_heads=2, causal=True)
    q, k, v = _qkv(Nq=3, Nk=5)
    kw = dict(causal=True, q_offset=2, positions=torch.arange(5))
    torch.testing.assert_close(relpos.attention(q, k, v, enc, impl="chunked", **kw),
                               relpos.attention(q, k, v, enc, impl="reference", **kw), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("impl", ["dense", "chunked", "auto", "flex"])
@pytest.mark.parametrize("name", [n for n in attention_schemes() if n != "shaw-kv"])
def test_value_width_other_than_head_width(name, impl):
    """v: (B, H, Nk, Dv) with Dv != D is served (chunked's fused kernels need Dv == D)."""
    enc = build(name, n_heads=2, causal=True)
    N = 40 if impl != "auto" else 800  # auto picks chunked from N = 800
    q, k, v = _qkv(Nq=N, Nk=N, D=8, Dv=5)
    with torch.no_grad():
        out = relpos.attention(q, k, v, enc, causal=True, impl=impl)
    assert out.shape == (1, 2, N, 5)
    if N <= 40:
        torch.testing.assert_close(out, relpos.attention(q, k, v, enc, causal=True, impl="reference"),
                                   atol=1e-5, rtol=1e-4)
    else:
        torch.testing.assert_close(out, relpos.attention(q, k, v, enc, causal=True, impl="dense"),
                                   atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("impl", IMPLS)
def test_shaw_value_table_needs_dv_equal_to_d(impl):
    enc = build("shaw-kv", n_heads=2, causal=True)
    q, k, v = _qkv(D=8, Dv=5)
    with pytest.raises(ValueError, match="v must have Dv = 8"):
        relpos.attention(q, k, v, enc, causal=True, impl=impl)


def test_dpb_reference_gradients_are_finite_at_long_distances():
    enc = make_encoding("dpb", n_heads=2, head_dim=8)
    with torch.no_grad():  # push the hidden pre-activations far negative at long distances
        enc.layers[0].weight.fill_(1.0)
        enc.layers[0].bias.zero_()
    pos = torch.arange(1000)[None]
    b = enc.reference_bias(pos[:, -4:], pos)
    grads = torch.autograd.grad(b.sum(), [p for p in enc.parameters()])
    assert torch.isfinite(b).all()
    assert all(torch.isfinite(g).all() for g in grads)


def test_xpos_past_its_limit_is_a_clear_error_not_nan():
    enc = make_encoding("xpos", n_heads=1, head_dim=8)
    limit = enc.max_offset()
    assert 30_000 < limit < 40_000
    N = 2 * limit + 20
    x = torch.randn(1, 1, 1, 8)
    with pytest.raises(ValueError, match="xPos.*scale_base"):
        enc.rotate(x, torch.tensor([[N - 1]]), is_query=True, seq_len=N)
    ok = enc.rotate(x, torch.tensor([[2 * limit - 1]]), is_query=True, seq_len=2 * limit)
    assert torch.isfinite(ok).all()


def test_alibi_reference_uses_float64_slopes():
    enc = make_encoding("alibi", n_heads=12, head_dim=8)
    exact = torch.tensor([2.0 ** (-8 * (h + 1) / 8) for h in range(8)]
                         + [2.0 ** (-8 * (2 * h + 1) / 16) for h in range(4)], dtype=torch.float64)
    assert enc.slopes.dtype == torch.float64
    torch.testing.assert_close(enc.slopes, exact, atol=0, rtol=1e-15)  # not float32's 6e-8
    pos = torch.arange(3)[None]
    torch.testing.assert_close(enc.reference_bias(pos, pos)[0, :, 2, 0], -2 * exact, atol=0, rtol=1e-15)


def test_every_registered_scheme_builds_with_defaults():
    """The limits above must not refuse the defaults."""
    for name in scheme_names():
        make_encoding(name)
    assert math.isfinite(alibi_slopes(64).sum().item())
