"""dense's ``_TermAttention`` (an additive term with a gradient): exact against SDPA's math path,
gradients included, for every broadcast shape of the term, grouped heads, and when it is used."""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import relpos
from tests.helpers import build

dense = importlib.import_module("relpos.attention.dense")


@settings(max_examples=30, deadline=None)
@given(B=st.integers(1, 3), H=st.integers(1, 3), Nq=st.integers(1, 9), Nk=st.integers(1, 9), D=st.integers(1, 6),
       tb=st.booleans(), th=st.booleans(), causal=st.booleans(), use_p=st.booleans(), seed=st.integers(0, 2**16))
def test_matches_sdpa_math_with_gradients(B, H, Nq, Nk, D, tb, th, causal, use_p, seed):
    # use_p: the loss also reads the returned probabilities (a value term's path)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, Nq, D, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(B, H, Nk, D, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    term = torch.randn(B if tb else 1, H if th else 1, Nq, Nk, generator=g, dtype=torch.float64, requires_grad=True)
    mask = None
    if causal:  # queries at the end of the keys, as cached decoding: every row keeps key 0
        mask = torch.arange(Nk)[None, :] <= torch.arange(Nq)[:, None] + max(Nk - Nq, 0)
    def full(t):
        return t if mask is None else t.masked_fill(~mask, float("-inf"))
    out, p = dense._TermAttention.apply(q, k, v, full(term), 0.7)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=full(term), scale=0.7)
    ref_p = torch.softmax(0.7 * q @ k.transpose(-1, -2) + full(term), dim=-1)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(p, ref_p)
    w = torch.randn(out.shape, generator=g, dtype=torch.float64)
    wp = torch.randn(p.shape, generator=g, dtype=torch.float64) if use_p else 0
    got = torch.autograd.grad((out * w).sum() + (p * wp).sum(), (q, k, v, term))
    want = torch.autograd.grad((ref * w).sum() + (ref_p * wp).sum(), (q, k, v, term))
    for a, b in zip(got, want):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", ["t5", "fire", "shaw", "shaw-kv", "deberta"])
@pytest.mark.parametrize("groups", [1, 2])
def test_dense_training_calls_take_it_and_match_the_reference(monkeypatch, name, groups):
    calls = []
    orig = dense._TermAttention.apply
    monkeypatch.setattr(dense._TermAttention, "apply", lambda *a: calls.append(1) or orig(*a))
    enc = build(name, n_heads=4, causal=True)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, 7, 8, generator=g, requires_grad=True)
    k, v = (torch.randn(2, 4 // groups, 7, 8, generator=g, requires_grad=True) for _ in range(2))
    params = [p for p in enc.parameters() if p.requires_grad]
    out = relpos.attention(q, k, v, enc, causal=True, impl="dense")
    assert calls, "a term with a gradient should take _TermAttention"
    ref = relpos.attention(q, k, v, enc, causal=True, impl="reference")
    torch.testing.assert_close(out, ref.to(out.dtype), atol=2e-5, rtol=1e-4)
    for a, b in zip(torch.autograd.grad(out.sum(), [q, k, v, *params]),
                    torch.autograd.grad(ref.sum(), [q, k, v, *params])):
        torch.testing.assert_close(a, b.to(a.dtype), atol=5e-5, rtol=1e-4)
    calls.clear()
    with torch.no_grad():
        relpos.attention(q, k, v, enc, causal=True, impl="dense")
    assert not calls, "inference keeps the fused kernel"


@pytest.mark.parametrize("impl, name", [("dense", "t5"), ("dense", "fire"), ("dense", "deberta"),
                                        ("chunked", "shaw"), ("chunked", "transformer-xl"), ("chunked", "cope")])
def test_second_derivative_is_refused_by_name(impl, name):
    enc = build(name, n_heads=2, causal=True)
    q, k, v = (torch.randn(1, 2, 5, 8, requires_grad=True) for _ in range(3))
    out = relpos.attention(q, k, v, enc, causal=True, impl=impl)
    with pytest.raises(RuntimeError, match=r"second derivatives \(create_graph=True\) are not supported"):
        torch.autograd.grad(out.sum(), q, create_graph=True)
    ref = relpos.attention(q, k, v, enc, causal=True, impl="reference")  # the reference serves them
    (g,) = torch.autograd.grad(ref.sum(), q, create_graph=True)
    assert g.requires_grad


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 2), H=st.integers(1, 3), Nq=st.integers(1, 11), extra=st.integers(0, 5),
       n=st.integers(1, 5), tb=st.booleans(), th=st.booleans(), seed=st.integers(0, 2**16))
def test_causal_blocks_match_the_whole_square_with_gradients(B, H, Nq, extra, n, tb, th, seed):
    # _CausalTermAttention skips, per row block, the keys past the block's last row (+ q_offset): where the
    # term is a causal mask, the result and every gradient equal _TermAttention's on the whole square
    g = torch.Generator().manual_seed(seed)
    Nk, D = Nq + extra, 3  # q_offset = extra: the queries are the last Nq positions, as in cached decoding
    q = torch.randn(B, H, Nq, D, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(B, H, Nk, D, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    term = torch.randn(B if tb else 1, H if th else 1, Nq, Nk, generator=g, dtype=torch.float64)
    causal = torch.arange(Nk)[None, :] <= torch.arange(Nq)[:, None] + extra
    term = term.masked_fill(~causal, float("-inf")).requires_grad_()
    blocks = dense.causal_blocks(Nq, Nk, extra, n)
    assert blocks[0][0] == 0 and blocks[-1][1] == Nq and all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
    assert all(e == min(Nk, r1 + extra) for _, r1, e in blocks)
    out = dense._CausalTermAttention.apply(q, k, v, term, 0.7, blocks)
    ref = dense._TermAttention.apply(q, k, v, term, 0.7)[0]
    torch.testing.assert_close(out, ref)
    w = torch.randn(out.shape, generator=g, dtype=torch.float64)
    for a, b in zip(torch.autograd.grad((out * w).sum(), (q, k, v, term)),
                    torch.autograd.grad((ref * w).sum(), (q, k, v, term))):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", ["t5", "fire", "transformer-xl", "kerple-log", "deberta"])
@pytest.mark.parametrize("q_offset, pad", [(0, False), (5, False), (0, True)])
def test_long_causal_training_calls_take_the_blocks_and_match_the_reference(monkeypatch, name, q_offset, pad):
    calls = []
    orig = dense._CausalTermAttention.apply
    monkeypatch.setattr(dense._CausalTermAttention, "apply", lambda *a: calls.append(1) or orig(*a))
    if name == "transformer-xl" and q_offset == 0 and not pad:  # its own row blocks (tests/attention/test_dense_relkey.py)
        rel = importlib.import_module("relpos.attention.dense_relkey")
        orig_rel = rel._CausalRelKeyAttention.apply
        monkeypatch.setattr(rel._CausalRelKeyAttention, "apply", lambda *a: calls.append(1) or orig_rel(*a))
    enc = build(name, n_heads=2, causal=True)
    N = dense.CAUSAL_BLOCK_ROWS
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, 2, N, 8, generator=g, requires_grad=True)
    k, v = (torch.randn(1, 2, N + q_offset, 8, generator=g, requires_grad=True) for _ in range(2))
    kw = dict(causal=True, q_offset=q_offset)
    if pad:  # every row keeps a real key (key 0): the blocks still serve it
        kpm = torch.ones(1, N, dtype=torch.bool)
        kpm[0, 3:40] = False
        kw["key_mask"] = kpm
    params = [p for p in enc.parameters() if p.requires_grad]
    out = relpos.attention(q, k, v, enc, impl="dense", **kw)
    assert calls, "a long causal call with a trained term should take the row blocks"
    ref = relpos.attention(q, k, v, enc, impl="reference", **kw)
    torch.testing.assert_close(out, ref.to(out.dtype), atol=2e-5, rtol=1e-4)
    w = torch.linspace(-1, 1, out.numel()).view_as(out)
    for a, b in zip(torch.autograd.grad((out * w).sum(), [q, k, v, *params]),
                    torch.autograd.grad((ref * w).sum(), [q, k, v, *params])):
        torch.testing.assert_close(a, b.to(a.dtype), atol=5e-5, rtol=1e-4)
