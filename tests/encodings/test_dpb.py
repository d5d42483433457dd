"""Dynamic Position Bias: reference, Toeplitz structure, unseen lengths, x-transformers conformance."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import relpos
from relpos.encodings.dpb import DynamicPositionBias
from tests.helpers import randomize_parameters

H = 3


def _enc(**kw):
    enc = DynamicPositionBias(**{"n_heads": H, "hidden": 8, **kw})
    randomize_parameters(enc)
    return enc


def test_structure():
    enc = relpos.make_encoding("dpb", n_heads=4, head_dim=16)
    assert enc.acts_on == frozenset({"bias"}) and enc.toeplitz and not enc.causal_only
    assert enc.num_params() == (32 + 32) + (32 * 32 + 32) + (32 * 4 + 4)
    deep = DynamicPositionBias(n_heads=2, hidden=4, depth=3, norm=True)
    assert len(deep.layers) == 3 and len(deep.norms) == 3
    assert deep.num_params() == 8 + 2 * 20 + 3 * 8 + 10


VARIANTS = [{}, {"log_distance": True}, {"norm": True}, {"depth": 1}, {"depth": 3, "log_distance": True, "norm": True}]


@pytest.mark.parametrize("opts", VARIANTS)
def test_bias_matches_reference_with_grads(opts):
    enc = _enc(**opts)
    qpos = torch.tensor([[3, 7, 9], [0, 2, 30]])
    kpos = torch.tensor([[0, 1, 3, 5, 7, 9, 12]])
    fast = enc.bias(qpos, kpos)  # (2, H, 3, 7), through relative_bias on the offset matrix
    ref = enc.reference_bias(qpos, kpos)
    torch.testing.assert_close(fast.double(), ref, atol=1e-5, rtol=1e-5)
    w = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1))
    g1 = torch.autograd.grad((fast * w).sum(), list(enc.parameters()))
    g2 = torch.autograd.grad((ref * w.double()).sum(), list(enc.parameters()))
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a.double(), b.double(), atol=1e-4, rtol=1e-4)


def test_bias_is_mlp_of_key_minus_query():
    enc = _enc(log_distance=True)
    d = torch.tensor([-9, -1, 0, 4])
    got = enc.relative_bias(d)  # (H, 4)
    for c, dv in enumerate(d.tolist()):
        u = torch.tensor([float(torch.sign(torch.tensor(dv))) * torch.log1p(torch.tensor(abs(dv), dtype=torch.float32))])
        x = u
        for lin in enc.layers:
            x = torch.nn.functional.silu(lin(x))
        torch.testing.assert_close(got[:, c], enc.out(x), atol=1e-6, rtol=1e-6)
    pos = torch.arange(5)[None]
    assert enc.bias(pos, pos)[0, :, 1, 4].tolist() == pytest.approx(enc.relative_bias(torch.tensor(3)).tolist())


# ------------------------------------------------------------------ properties


@given(st.lists(st.integers(-500, 500), min_size=1, max_size=8), st.lists(st.integers(-500, 500), min_size=1,
       max_size=8), st.integers(-10_000, 10_000))
def test_bias_depends_only_on_offsets(qs, ks, shift):
    enc = _enc(log_distance=True)
    qpos, kpos = torch.tensor([qs]), torch.tensor([ks])
    a = enc.bias(qpos, kpos)
    b = enc.bias(qpos + shift, kpos + shift)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    one_d = enc.relative_bias((kpos - qpos.t()).flatten()).view(H, len(qs), len(ks))
    torch.testing.assert_close(a[0], one_d, atol=1e-5, rtol=1e-5)  # batching may differ in the last bit


@pytest.mark.parametrize("log_distance", [False, True])
def test_unseen_lengths_get_finite_bias(log_distance):
    enc = _enc(log_distance=log_distance)
    far = torch.tensor([-(10**6), -(10**5), -4096, 4096, 10**6])
    assert torch.isfinite(enc.relative_bias(far)).all()
    q = torch.randn(1, H, 3, 4)
    k = v = torch.randn(1, H, 2000, 4)
    out = relpos.attention(q, k, v, enc, causal=True, q_offset=1997)
    assert torch.isfinite(out).all()


def test_bfloat16_module_keeps_float32_bias():
    enc = _enc().to(torch.bfloat16)
    b = enc.relative_bias(torch.arange(-5, 6))
    assert b.dtype == torch.float32 and torch.isfinite(b).all()


def test_matches_x_transformers():
    """x-transformers feeds i - j; negating our first layer's weight makes the two equal."""
    xt = pytest.importorskip("x_transformers.x_transformers")
    for log_distance in (False, True):
        ref = xt.DynamicPositionBias(8, heads=H, depth=2, log_distance=log_distance)
        randomize_parameters(ref, seed=3)
        enc = DynamicPositionBias(n_heads=H, hidden=8, depth=2, log_distance=log_distance)
        with torch.no_grad():
            lins = [ref.mlp[0][0], ref.mlp[1][0]]
            for mine, theirs, sign in zip(enc.layers, lins, (-1.0, 1.0)):
                mine.weight.copy_(sign * theirs.weight)
                mine.bias.copy_(theirs.bias)
            enc.out.weight.copy_(ref.mlp[2].weight)
            enc.out.bias.copy_(ref.mlp[2].bias)
        want = ref(4, 9)  # (H, 4, 9): the last 4 of 9 positions as queries
        got = enc.bias(torch.arange(5, 9)[None], torch.arange(9)[None])[0]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "opts, err, match",
    [
        ({"hidden": 0}, ValueError, "hidden"),
        ({"depth": 0}, ValueError, "depth"),
        ({"depth": 2.0}, TypeError, "depth"),
        ({"log_distance": "yes"}, TypeError, "log_distance"),
        ({"norm": None}, TypeError, "norm"),
    ],
)
def test_bad_options(opts, err, match):
    with pytest.raises(err, match=match):
        DynamicPositionBias(n_heads=2, **opts)
    with pytest.raises(TypeError, match="accepted options"):
        relpos.make_encoding("dpb", n_heads=2, head_dim=4, width=3)
