"""RoPE: fast path vs the float64 reference, the scalings' formulas, options and errors."""

from __future__ import annotations

import math

import pytest
import torch

import relpos
from relpos.encodings.rope import RoPE, rotary_dims

ALL_SCALINGS = [None, "linear", "ntk", "dynamic", "yarn", "llama3"]


def _x(B=2, H=2, N=7, D=12, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, H, N, D, generator=g, dtype=dtype)


@pytest.mark.parametrize("scaling", ALL_SCALINGS)
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("frac", [1.0, 0.5])
def test_rotate_matches_reference_with_grad(scaling, pairing, frac):
    enc = RoPE(n_heads=2, head_dim=12, rotary_fraction=frac, pairing=pairing, scaling=scaling,
               factor=3.0, original_max_len=8)
    x = _x().requires_grad_(True)
    pos = torch.tensor([[0, 2, 5, 9, 14, 20, 31], [1, 3, 4, 8, 10, 11, 12]])
    seq_len = 32  # beyond original_max_len: dynamic changes its base
    out = enc.rotate(x, pos, is_query=True, seq_len=seq_len)
    ref = enc.reference_rotate(x, pos, is_query=True, seq_len=seq_len)
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    w = torch.randn_like(out)
    g1, = torch.autograd.grad((out * w).sum(), x)
    g2, = torch.autograd.grad((ref * w).sum(), x)
    torch.testing.assert_close(g1, g2, rtol=1e-6, atol=1e-6)


def test_reference_differs_when_scaling_changes():
    """Guard against a reference that ignores the options."""
    x, pos = _x(), torch.arange(7)[None] + 20
    outs = [RoPE(n_heads=2, head_dim=12, scaling=s, factor=3.0, original_max_len=8)
            .reference_rotate(x, pos, is_query=True, seq_len=27) for s in ALL_SCALINGS]
    for a in range(len(outs)):
        for b in range(a + 1, len(outs)):
            assert not torch.allclose(outs[a], outs[b]), (ALL_SCALINGS[a], ALL_SCALINGS[b])


def test_rotation_by_hand():
    enc = RoPE(n_heads=1, head_dim=4)  # theta = [1, 0.01], half pairing: pairs (0, 2), (1, 3)
    x = torch.tensor([[[[1.0, 2.0, 3.0, 4.0]]]])
    p = 3
    got = enc.rotate(x, torch.tensor([[p]]), is_query=True, seq_len=p + 1)[0, 0, 0]
    c0, s0, c1, s1 = math.cos(3), math.sin(3), math.cos(0.03), math.sin(0.03)
    want = torch.tensor([1 * c0 - 3 * s0, 2 * c1 - 4 * s1, 1 * s0 + 3 * c0, 2 * s1 + 4 * c1])
    torch.testing.assert_close(got, want)
    inter = RoPE(n_heads=1, head_dim=4, pairing="interleaved")  # pairs (0, 1), (2, 3)
    got = inter.rotate(x, torch.tensor([[p]]), is_query=True, seq_len=p + 1)[0, 0, 0]
    want = torch.tensor([1 * c0 - 2 * s0, 1 * s0 + 2 * c0, 3 * c1 - 4 * s1, 3 * s1 + 4 * c1])
    torch.testing.assert_close(got, want)


def test_half_and_interleaved_are_a_channel_permutation():
    D = 8
    perm = [0, 4, 1, 5, 2, 6, 3, 7]  # interleaved slot -> half slot
    x = _x(D=D)
    pos = torch.arange(7)[None] * 3
    half = RoPE(n_heads=2, head_dim=D).rotate(x, pos, is_query=True, seq_len=19)
    inter = RoPE(n_heads=2, head_dim=D, pairing="interleaved").rotate(x[..., perm], pos, is_query=True, seq_len=19)
    torch.testing.assert_close(inter, half[..., perm])


def test_inv_freq_formulas():
    r, base, f = 16, 10000.0, 4.0
    plain = RoPE(n_heads=1, head_dim=r).inv_freq()
    torch.testing.assert_close(plain, torch.tensor([base ** (-2 * k / r) for k in range(r // 2)], dtype=torch.float64))
    lin = RoPE(n_heads=1, head_dim=r, scaling="linear", factor=f).inv_freq()
    torch.testing.assert_close(lin, plain / f)
    ntk = RoPE(n_heads=1, head_dim=r, scaling="ntk", factor=f).inv_freq()
    nb = base * f ** (r / (r - 2))
    torch.testing.assert_close(ntk, torch.tensor([nb ** (-2 * k / r) for k in range(r // 2)], dtype=torch.float64))
    # NTK keeps the highest frequency and divides the lowest by exactly `factor`
    assert ntk[0] == 1.0
    assert ntk[-1].item() == pytest.approx(plain[-1].item() / f ** ((r - 2) / r * r / (r - 2)), rel=1e-12)


def test_dynamic_base_depends_on_length():
    r, f, L = 8, 2.0, 16
    enc = RoPE(n_heads=1, head_dim=r, scaling="dynamic", factor=f, original_max_len=L)
    plain = RoPE(n_heads=1, head_dim=r).inv_freq()
    torch.testing.assert_close(enc.inv_freq(L), plain)  # up to L: plain RoPE
    s = 40
    nb = 10000.0 * (f * s / L - (f - 1)) ** (r / (r - 2))
    torch.testing.assert_close(enc.inv_freq(s), torch.tensor([nb ** (-2 * k / r) for k in range(r // 2)],
                                                              dtype=torch.float64))
    assert enc.relative is False and RoPE(n_heads=1, head_dim=r).relative is True


def test_dynamic_cached_decoding_matches_full_pass_when_keys_are_rerotated():
    """relpos rotates cached (unrotated) keys on every call, so a decode step equals the full pass."""
    enc = relpos.make_encoding("rope-dynamic", n_heads=2, head_dim=8, factor=2.0, original_max_len=6)
    g = torch.Generator().manual_seed(0)
    N = 14
    q, k, v = (torch.randn(1, 2, N, 8, generator=g) for _ in range(3))
    full = relpos.attention(q, k, v, enc, causal=True)
    step = relpos.attention(q[:, :, -1:], k, v, enc, causal=True, q_offset=N - 1)
    torch.testing.assert_close(step, full[:, :, -1:], rtol=1e-5, atol=1e-6)
    # A cache that rotated each key once, when written (seq_len = its own position + 1), differs:
    k_once = torch.cat([enc.rotate(k[:, :, t : t + 1], torch.tensor([[t]]), is_query=False, seq_len=t + 1)
                        for t in range(N)], dim=2)
    q_last = enc.rotate(q[:, :, -1:], torch.tensor([[N - 1]]), is_query=True, seq_len=N)
    stale = torch.softmax(q_last @ k_once.transpose(-1, -2) / math.sqrt(8), -1) @ v
    assert not torch.allclose(stale, full[:, :, -1:], atol=1e-4)


def test_yarn_ramp_and_temperature():
    r, f, L = 64, 8.0, 2048
    enc = RoPE(n_heads=1, head_dim=r, scaling="yarn", factor=f, original_max_len=L)
    plain = RoPE(n_heads=1, head_dim=r).inv_freq()
    got = enc.inv_freq()
    ratio = plain / got  # 1 where extrapolating, f where interpolating
    assert ratio[0] == pytest.approx(1.0) and ratio[-1] == pytest.approx(f)
    assert bool((ratio[1:] >= ratio[:-1] - 1e-12).all())  # monotone ramp
    # the highest-frequency pairs complete > beta_fast turns over L: left alone
    turns = L * plain / (2 * math.pi)
    assert bool((ratio[turns > 32 * 2] == 1.0).all())
    assert bool((ratio[turns < 1 / 2] == f).all())
    assert enc.mscale == pytest.approx(0.1 * math.log(f) + 1)
    x = _x(D=r)
    out = enc.rotate(x, torch.arange(7)[None], is_query=False, seq_len=7)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1) * enc.mscale)
    assert RoPE(n_heads=1, head_dim=r, scaling="yarn", factor=f, attention_factor=1.0).mscale == 1.0
    assert RoPE(n_heads=1, head_dim=r, scaling="yarn", factor=1.0).mscale == 1.0


def test_llama3_bands():
    r, f, L = 64, 8.0, 1024
    enc = RoPE(n_heads=1, head_dim=r, scaling="llama3", factor=f, original_max_len=L)
    plain = RoPE(n_heads=1, head_dim=r).inv_freq()
    wl = 2 * math.pi / plain
    got = enc.inv_freq()
    assert torch.equal(got[wl < L / 4], plain[wl < L / 4])
    torch.testing.assert_close(got[wl > L], plain[wl > L] / f)
    mid = (wl >= L / 4) & (wl <= L)
    assert bool(mid.any()) and bool(((got[mid] < plain[mid]) & (got[mid] > plain[mid] / f)).all())


def test_linear_scaling_is_position_interpolation():
    f = 4
    pi = RoPE(n_heads=2, head_dim=12, scaling="linear", factor=float(f))
    plain = RoPE(n_heads=2, head_dim=12)
    x, pos = _x(), torch.arange(7)[None]
    torch.testing.assert_close(pi.rotate(x, pos * f, is_query=True, seq_len=28),
                               plain.rotate(x, pos, is_query=True, seq_len=7))


def test_tables_stay_float32_in_bf16_models():
    enc = RoPE(n_heads=2, head_dim=12).to(torch.bfloat16)
    pos = torch.arange(0, 4000, 500)[None]
    cos, sin = enc.cos_sin(pos, 4000)
    assert cos.dtype == sin.dtype == torch.float32
    want = torch.cos(pos[..., None].double() * enc.inv_freq())
    torch.testing.assert_close(cos.double(), want, rtol=0, atol=1e-6)
    out = enc.rotate(_x(N=8, dtype=torch.bfloat16), pos, is_query=True, seq_len=4000)
    assert out.dtype == torch.bfloat16
    assert enc.num_params() == 0 and len(list(enc.buffers())) == 0


def test_set_scaling_switches_in_place():
    enc = RoPE(n_heads=1, head_dim=8, max_len=32)
    before = enc.inv_freq()
    enc.cos_sin(torch.arange(4)[None], 4)  # fill the cache
    enc.set_scaling("linear", factor=2.0)
    assert enc.scaling == "linear" and enc.original_max_len == 32
    torch.testing.assert_close(enc.cos_sin(torch.arange(4)[None] * 2, 8)[0], RoPE(n_heads=1, head_dim=8).cos_sin(
        torch.arange(4)[None], 4)[0])
    assert enc.describe()["scaling"] == "linear"
    enc.set_scaling(None)
    torch.testing.assert_close(enc.inv_freq(), before)


def test_registry_presets():
    for name, scaling in [("rope", None), ("rope-pi", "linear"), ("rope-ntk", "ntk"), ("rope-dynamic", "dynamic"),
                          ("rope-yarn", "yarn"), ("rope_yarn", "yarn")]:
        enc = relpos.make_encoding(name, n_heads=2, head_dim=8, max_len=128)
        assert isinstance(enc, RoPE) and enc.scaling == scaling
        assert enc.original_max_len == 128 and enc.acts_on == frozenset({"qk"})
    assert relpos.make_encoding("rope-yarn", n_heads=2, head_dim=8, factor=2.0, original_max_len=4).factor == 2.0


def test_rotary_dims():
    assert rotary_dims(64, 1.0) == 64
    assert rotary_dims(64, 0.25) == 16
    assert rotary_dims(10, 0.5) == 4  # rounded down to even
    assert rotary_dims(9, 1.0) == 8


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        ({"rotary_fraction": 0.0}, ValueError, "rotary_fraction"),
        ({"rotary_fraction": 1.5}, ValueError, "rotary_fraction"),
        ({"rotary_fraction": "all"}, TypeError, "rotary_fraction"),
        ({"rotary_fraction": 0.05}, ValueError, "rotary_fraction"),
        ({"base": 1.0}, ValueError, "base"),
        ({"base": "big"}, TypeError, "base"),
        ({"pairing": "pairs"}, ValueError, "pairing"),
        ({"scaling": "ntk-by-parts"}, ValueError, "scaling"),
        ({"scaling": "linear", "factor": 0.5}, ValueError, "factor"),
        ({"factor": float("nan")}, ValueError, "factor"),
        ({"original_max_len": 0}, ValueError, "original_max_len"),
        ({"beta_fast": 1.0, "beta_slow": 2.0}, ValueError, "beta_slow"),
        ({"attention_factor": -1.0}, ValueError, "attention_factor"),
        ({"low_freq_factor": 4.0, "high_freq_factor": 1.0}, ValueError, "high_freq_factor"),
        ({"head_dim": 1}, ValueError, "head_dim"),
    ],
)
def test_bad_options_raise(kwargs, exc, match):
    kw = {"n_heads": 2, "head_dim": 16, **kwargs}
    with pytest.raises(exc, match=match):
        RoPE(**kw)


def test_bad_calls_raise():
    with pytest.raises(ValueError, match="r - 2"):
        RoPE(n_heads=1, head_dim=2, scaling="ntk")
    with pytest.raises(TypeError, match="unknown option"):
        relpos.make_encoding("rope", n_heads=2, head_dim=8, gamma=0.4)
    enc = RoPE(n_heads=2, head_dim=8)
    with pytest.raises(ValueError, match="D=8"):
        enc.rotate(torch.randn(1, 2, 3, 6), torch.arange(3)[None], is_query=True, seq_len=3)
    with pytest.raises(ValueError, match="pos"):
        enc.rotate(torch.randn(1, 2, 3, 8), torch.arange(4)[None], is_query=True, seq_len=4)
    with pytest.raises(ValueError, match="scaling"):
        enc.set_scaling("yarnish")


# ------------------------------------------- issue 34: the rotation as one autograd node


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("r", [8, 6])
def test_rotate_pairs_gradients_are_the_transposed_rotation(pairing, r):
    from relpos.encodings.rope import rotate_pairs

    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64, generator=g, requires_grad=True)
    cos, sin = (torch.randn(1, 5, r // 2, dtype=torch.float64, generator=g) for _ in range(2))
    assert torch.autograd.gradcheck(lambda t: rotate_pairs(t, cos, sin, r, pairing), (x,))
    assert torch.autograd.gradgradcheck(lambda t: rotate_pairs(t, cos, sin, r, pairing), (x,))
    # tables that carry a gradient take the plain-ops path, with the same values
    cl, sl = cos.clone().requires_grad_(True), sin.clone().requires_grad_(True)
    torch.testing.assert_close(rotate_pairs(x, cl, sl, r, pairing), rotate_pairs(x, cos, sin, r, pairing))
    assert torch.autograd.gradcheck(lambda c, s: rotate_pairs(x.detach(), c, s, r, pairing), (cl, sl))
