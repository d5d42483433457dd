"""Shaw et al. 2018: clipping, table sizes, shared vs per-head, formula, fast vs reference."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import relpos
from relpos.encodings.shaw import Shaw
from tests.helpers import randomize_parameters


def _qkv(B=2, H=3, Nq=6, Nk=6, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, n, D, generator=g) for n in (Nq, Nk, Nk))


def _enc(**kw):
    enc = Shaw(**{"n_heads": 3, "head_dim": 8, "k": 3, **kw})
    randomize_parameters(enc)
    return enc


# ------------------------------------------------------------------ sizes


def test_param_counts_shared_and_per_head():
    assert relpos.make_encoding("shaw", n_heads=8, head_dim=64, k=8).num_params() == 1_088
    assert relpos.make_encoding("shaw-kv", n_heads=8, head_dim=64, k=8).num_params() == 2 * 1_088
    per = relpos.make_encoding("shaw", n_heads=8, head_dim=64, k=8, per_head=True)
    assert per.key_table.shape == (8, 17, 64) and per.num_params() == 8 * 1_088
    kv = relpos.make_encoding("shaw-kv", n_heads=2, head_dim=4, k=1, per_head=True)
    assert kv.num_params() == 2 * 2 * 3 * 4
    assert Shaw(n_heads=4, head_dim=16).key_table.shape == (33, 16)  # default k = 16


def test_sites():
    assert relpos.make_encoding("shaw").acts_on == frozenset({"score"})
    kv = relpos.make_encoding("shaw-kv")
    assert kv.acts_on == frozenset({"score", "value"}) and kv.use_value
    enc = Shaw(n_heads=1, head_dim=4, k=1)
    assert enc.reference_value(torch.ones(1, 1, 2, 2), torch.arange(2)[None], torch.arange(2)[None]) is None
    with pytest.raises(NotImplementedError, match="value=True"):
        enc.value(torch.ones(1, 1, 2, 2), torch.arange(2)[None], torch.arange(2)[None])


# ------------------------------------------------------------------ formula


@pytest.mark.parametrize("per_head", [False, True])
def test_score_is_scaled_q_dot_clipped_row(per_head):
    enc = _enc(per_head=per_head, k=2)
    q, k, _ = _qkv(B=1, Nq=3, Nk=7)
    qpos = torch.tensor([[2, 4, 5]])
    kpos = torch.tensor([[0, 1, 2, 3, 5, 8, 9]])
    s = enc.score(q, k, qpos, kpos, scale=0.3)
    for h in range(3):
        for t, i in enumerate(qpos[0].tolist()):
            for j_idx, j in enumerate(kpos[0].tolist()):
                r = max(-2, min(2, j - i)) + 2  # row of d = j - i, clipped
                row = enc.key_table[h, r] if per_head else enc.key_table[r]
                want = 0.3 * (q[0, h, t] @ row)
                assert s[0, h, t, j_idx].item() == pytest.approx(want.item(), abs=1e-5)


def test_value_is_probability_weighted_clipped_rows():
    enc = _enc(value=True, k=1)
    p = torch.softmax(torch.randn(1, 3, 2, 5), -1)
    qpos, kpos = torch.tensor([[1, 3]]), torch.arange(5)[None]
    out = enc.value(p, qpos, kpos)
    for h in range(3):
        for t, i in enumerate(qpos[0].tolist()):
            want = sum(p[0, h, t, j] * enc.value_table[max(-1, min(1, j - i)) + 1] for j in range(5))
            torch.testing.assert_close(out[0, h, t], want, atol=1e-6, rtol=0)


def test_clipping_saturates_beyond_k():
    enc = _enc(k=3)
    q, _, _ = _qkv(B=1, Nq=1, Nk=1)
    kpos = torch.arange(-10, 11)[None]  # offsets j - i = -10..10 from i = 0
    k = torch.zeros(1, 3, kpos.shape[1], 8)
    s = enc.score(q, k, torch.zeros(1, 1, dtype=torch.long), kpos, scale=1.0)[0, :, 0]  # (H, 21)
    d = kpos[0]
    left, right = s[:, d <= -3], s[:, d >= 3]
    assert torch.allclose(left, left[:, :1].expand_as(left))
    assert torch.allclose(right, right[:, :1].expand_as(right))
    inside = s[:, (d >= -3) & (d <= 3)]  # 7 distinct rows of a random table
    assert torch.unique(inside[0]).numel() == 7


def test_k_zero_collapses_to_one_row():
    enc = _enc(k=0)
    assert enc.key_table.shape == (1, 8) and enc.num_params() == 8
    q, k, _ = _qkv(B=1, Nq=4, Nk=9)
    s = enc.score(q, k, torch.arange(5, 9)[None], torch.arange(9)[None], scale=0.5)
    assert torch.allclose(s, s[..., :1].expand_as(s))  # constant over keys: no position information
    torch.testing.assert_close(s[..., 0], 0.5 * q @ enc.key_table[0])


# ------------------------------------------------------------------ fast vs reference


@pytest.mark.parametrize("per_head", [False, True])
@pytest.mark.parametrize("k", [0, 2, 30])
@pytest.mark.parametrize("causal", [True, False])
def test_dense_matches_reference_with_grads(per_head, k, causal):
    enc = _enc(per_head=per_head, value=True, k=k)
    q, kk, v = (t.requires_grad_(True) for t in _qkv(Nq=4, Nk=9))
    params = [enc.key_table, enc.value_table]
    kw = dict(causal=causal, q_offset=5, positions=torch.tensor([[0, 2, 3, 7, 8, 9, 15, 16, 40]]))

    def run(impl):
        out = relpos.attention(q, kk, v, enc, impl=impl, **kw)
        w = torch.linspace(-1, 1, out.numel()).view_as(out)
        return out, torch.autograd.grad((out * w).sum(), [q, kk, v, *params])

    out, grads = run("dense")
    ref, ref_grads = run("reference")
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)
    for g, rg in zip(grads, ref_grads):
        torch.testing.assert_close(g, rg, atol=2e-5, rtol=1e-4)
    assert grads[-1].abs().sum() > 0 and grads[-2].abs().sum() > 0


def test_bf16_inputs_run_and_stay_close():
    enc = _enc(value=True, k=2)
    q, k, v = _qkv()
    out = relpos.attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), enc, causal=True)
    assert out.dtype == torch.bfloat16
    ref = relpos.attention(q, k, v, enc, causal=True, impl="reference")
    torch.testing.assert_close(out.float(), ref, atol=5e-2, rtol=5e-2)


# ------------------------------------------------------------------ properties


@given(c=st.integers(-50, 50), k=st.integers(0, 6), value=st.booleans())
def test_output_unchanged_when_all_positions_shift(c, k, value):
    enc = _enc(k=k, value=value)
    q, kk, v = _qkv(B=1, Nq=3, Nk=5)
    pos = torch.tensor([[10, 11, 14, 15, 20]])
    a = relpos.attention(q, kk, v, enc, causal=True, q_offset=2, positions=pos)
    b = relpos.attention(q, kk, v, enc, causal=True, q_offset=2, positions=pos + c)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


@given(k=st.integers(0, 5), gap=st.integers(0, 12))
def test_score_depends_on_clipped_offset_only(k, gap):
    enc = _enc(k=k)
    q, _, _ = _qkv(B=1, Nq=1, Nk=1)
    s1 = enc.score(q, torch.zeros(1, 3, 1, 8), torch.tensor([[0]]), torch.tensor([[gap]]), 1.0)
    s2 = enc.score(q, torch.zeros(1, 3, 1, 8), torch.tensor([[0]]), torch.tensor([[min(gap, k)]]), 1.0)
    torch.testing.assert_close(s1, s2)


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("kwargs", "exc", "pattern"),
    [
        ({"k": -1}, ValueError, r"k .*\[0, .*-1"),
        ({"k": 10**12}, ValueError, r"k .*\[0, "),
        ({"init_std": float("nan")}, ValueError, "init_std"),
        ({"k": 1.5}, TypeError, r"k .*int"),
        ({"k": True}, TypeError, r"k "),
        ({"value": "yes"}, TypeError, "value"),
        ({"per_head": 1}, TypeError, "per_head"),
        ({"head_dim": 0}, ValueError, "head_dim"),
        ({"n_heads": 0}, ValueError, "n_heads"),
        ({"init_std": -0.1}, ValueError, "init_std"),
    ],
)
def test_bad_arguments(kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        Shaw(**{"n_heads": 2, "head_dim": 4, **kwargs})


def test_unknown_option_and_wrong_heads():
    with pytest.raises(TypeError, match="clip"):
        relpos.make_encoding("shaw", clip=3)
    enc = Shaw(n_heads=2, head_dim=8, k=1, per_head=True)
    q, k, v = _qkv(H=3)
    with pytest.raises(ValueError, match="n_heads"):
        relpos.attention(q, k, v, enc, causal=False)


@settings(max_examples=40, deadline=None)
@given(k=st.integers(0, 6), nq=st.integers(1, 8), extra=st.integers(0, 6), per_head=st.booleans(),
       gapped=st.booleans(), seed=st.integers(0, 2**16))
def test_offset_form_matches_the_reference_with_gradients(k, nq, extra, per_head, gapped, seed):
    # shared consecutive positions take the skewed offset form (clipped or not); gaps take the gather form
    enc = Shaw(n_heads=2, head_dim=4, k=k, value=True, per_head=per_head)
    g = torch.Generator().manual_seed(seed)
    for t in (enc.key_table, enc.value_table):
        with torch.no_grad():
            t.normal_(generator=g)
    nk = nq + extra
    kpos = torch.arange(nk)[None]
    qpos = torch.arange(extra, nk)[None]  # cached decoding: the last nq keys are the queries
    if gapped:
        kpos = kpos * 2
        qpos = qpos * 2
    q = torch.randn(1, 2, nq, 4, generator=g, dtype=torch.float64, requires_grad=True)
    kk = torch.randn(1, 2, nk, 4, generator=g, dtype=torch.float64)
    p = torch.softmax(torch.randn(1, 2, nq, nk, generator=g, dtype=torch.float64), -1).requires_grad_()
    enc = enc.double()
    s, r = enc.score(q, kk, qpos, kpos, 0.5), enc.reference_score(q, kk, qpos, kpos, 0.5)
    val, rv = enc.value(p, qpos, kpos), enc.reference_value(p, qpos, kpos)
    torch.testing.assert_close(s, r)
    torch.testing.assert_close(val, rv)
    w1, w2 = torch.randn(s.shape, generator=g, dtype=torch.float64), torch.randn(val.shape, generator=g,
                                                                                  dtype=torch.float64)
    leaves = [q, p, enc.key_table, enc.value_table]
    got = torch.autograd.grad((s * w1).sum() + (val * w2).sum(), leaves)
    want = torch.autograd.grad((r * w1).sum() + (rv * w2).sum(), leaves)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


@settings(max_examples=40, deadline=None)
@given(k=st.integers(0, 6), nq=st.integers(1, 8), extra=st.integers(0, 6), per_head=st.booleans(),
       seed=st.integers(0, 2**16))
def test_score_past_is_the_score_with_the_future_masked(k, nq, extra, per_head, seed):
    """The causal form (offsets j - i <= 0 only): the score's value on every pair a causal query sees,
    -inf on the others, the same gradients; a prefill (extra = 0) and cached decoding (extra > 0)."""
    enc = Shaw(n_heads=2, head_dim=4, k=k, per_head=per_head).double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        enc.key_table.normal_(generator=g)
    nk = nq + extra
    kpos, qpos = torch.arange(nk)[None], torch.arange(extra, nk)[None]
    q = torch.randn(1, 2, nq, 4, generator=g, dtype=torch.float64, requires_grad=True)
    kk = torch.randn(1, 2, nk, 4, generator=g, dtype=torch.float64)
    future = kpos[:, None, :] > qpos[:, :, None]  # (1, nq, nk)
    got = enc.score_past(q, kk, qpos, kpos, 0.5)
    want = enc.reference_score(q, kk, qpos, kpos, 0.5).masked_fill(future[:, None], float("-inf"))
    torch.testing.assert_close(got, want)
    w = torch.randn(got.shape, generator=g, dtype=torch.float64)
    a = torch.autograd.grad((got.masked_fill(future[:, None], 0) * w).sum(), [q, enc.key_table])
    b = torch.autograd.grad((want.masked_fill(future[:, None], 0) * w).sum(), [q, enc.key_table])
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y)


def test_score_past_declines_gapped_positions():
    enc = Shaw(n_heads=1, head_dim=2, k=2)
    pos = torch.arange(0, 8, 2)[None]
    assert enc.score_past(torch.randn(1, 1, 4, 2), torch.randn(1, 1, 4, 2), pos, pos, 1.0) is None


def test_dense_causal_self_attention_takes_the_past_form(monkeypatch):
    """The dense engine asks for score_past on a causal call with default positions (half the offsets),
    and its output and gradients still equal the float64 reference."""
    enc = Shaw(n_heads=2, head_dim=4, k=3).double()
    randomize_parameters(enc)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 9, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    ref = relpos.attention(q, k, v, enc, causal=True, impl="reference")
    want = torch.autograd.grad(ref.sum(), [q, k, v, enc.key_table])

    def refuse(*a, **kw):
        raise AssertionError("the full-offset score ran")

    monkeypatch.setattr(Shaw, "score", refuse)
    out = relpos.attention(q, k, v, enc, causal=True, impl="dense")
    torch.testing.assert_close(out, ref)
    for a, b in zip(torch.autograd.grad(out.sum(), [q, k, v, enc.key_table]), want):
        torch.testing.assert_close(a, b)
