"""``relpos.attention.dense_relkey``: causal attention with a relative-key term by row blocks, each forming its
own slice of the term. Exact against the whole skewed term run through ``_CausalTermAttention`` and against
Transformer-XL's float64 reference, gradients included; taken exactly where it applies."""

from __future__ import annotations

import importlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import relpos
from relpos.offsets import skew_rows_past
from tests.helpers import build

dense = importlib.import_module("relpos.attention.dense")
rel = importlib.import_module("relpos.attention.dense_relkey")


@settings(max_examples=30, deadline=None)
@given(B=st.integers(1, 3), H=st.integers(1, 3), N=st.integers(1, 12), D=st.integers(1, 5), n=st.integers(1, 5),
       seed=st.integers(0, 2**16))
def test_blocks_equal_the_whole_skewed_term_with_gradients(B, H, N, D, n, seed):
    g = torch.Generator().manual_seed(seed)
    qu, qv, k, v = (torch.randn(B, H, N, D, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(4))
    keys = torch.randn(H, N, D, generator=g, dtype=torch.float64, requires_grad=True)  # offsets -(N-1) .. 0
    blocks = dense.causal_blocks(N, N, 0, n)
    out = rel.causal_relkey_attention(qu, qv, k, v, keys, 0.7, blocks)
    term = skew_rows_past(qv @ keys.transpose(-1, -2), N, N)  # (B, H, N, N), -inf after the diagonal
    ref = dense._CausalTermAttention.apply(qu, k, v, term, 0.7, blocks)
    torch.testing.assert_close(out, ref)
    w = torch.randn(out.shape, generator=g, dtype=torch.float64)
    for a, b in zip(torch.autograd.grad((out * w).sum(), (qu, qv, k, v, keys)),
                    torch.autograd.grad((ref * w).sum(), (qu, qv, k, v, keys))):
        torch.testing.assert_close(a, b)


def test_it_refuses_an_offset_or_unequal_lengths():
    x = torch.randn(1, 1, 4, 2)
    with pytest.raises(ValueError, match="Nq == Nk"):
        rel.causal_relkey_attention(x, x, torch.randn(1, 1, 5, 2), torch.randn(1, 1, 5, 2), torch.randn(1, 4, 2),
                                    1.0, dense.causal_blocks(4, 5, 1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_transformer_xl_takes_it_in_training_and_matches_its_reference(monkeypatch, dtype):
    calls = []
    orig = rel._CausalRelKeyAttention.apply
    monkeypatch.setattr(rel._CausalRelKeyAttention, "apply", lambda *a: calls.append(1) or orig(*a))
    enc = build("transformer-xl", n_heads=2, causal=True).to(dtype)
    N = dense.CAUSAL_BLOCK_ROWS
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, N, 8, generator=g, dtype=dtype, requires_grad=True) for _ in range(3))
    params = [p for p in enc.parameters() if p.requires_grad]
    out = relpos.attention(q, k, v, enc, impl="dense", causal=True)
    assert calls == [1]
    ref = relpos.attention(q, k, v, enc, impl="reference", causal=True)  # float64 tables (relpos's: float32)
    with monkeypatch.context() as m:  # the whole skewed term through _CausalTermAttention, as before
        m.setattr(dense, "_blocked_relative_keys", lambda *a: None)
        whole = relpos.attention(q, k, v, enc, impl="dense", causal=True)
    w = torch.linspace(-1, 1, out.numel(), dtype=dtype).view_as(out)
    grads = [torch.autograd.grad((x * w).sum(), [q, k, v, *params]) for x in (out, ref, whole)]
    torch.testing.assert_close(out, ref.to(dtype), atol=2e-5, rtol=1e-4)
    for a, b in zip(grads[0], grads[1]):
        torch.testing.assert_close(a, b.to(dtype), atol=5e-5, rtol=1e-4)
    tight = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(out, whole, **tight)
    for a, b in zip(grads[0], grads[2]):
        torch.testing.assert_close(a, b, **tight)
    with torch.no_grad():  # inference keeps its own path
        relpos.attention(q, k, v, enc, impl="dense", causal=True)
    assert calls == [1]


@pytest.mark.parametrize("B, N, D, blocks", [(16, 64, 8, 2), (12, 80, 8, 2), (16, 96, 8, 2), (4, 128, 8, 4), (4, 63, 8, 0),
                                              (16, 64, 32, 0), (8, 64, 8, 0)])
def test_the_picked_blocks_run_and_equal_the_whole_square(monkeypatch, B, N, D, blocks):
    """With ``H = 4``: ``relkey_blocks``'s pick is what runs, and it equals the whole skewed term."""
    seen = []
    orig = dense.causal_blocks
    monkeypatch.setattr(dense, "causal_blocks", lambda *a: seen.append(a) or orig(*a))
    assert rel.relkey_blocks(B, 4, N, D) == blocks
    enc = build("transformer-xl", n_heads=4, head_dim=D, causal=True)
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(B, 4, N, D, generator=g, requires_grad=True) for _ in range(3))
    out = relpos.attention(q, k, v, enc, impl="dense", causal=True)
    assert seen == ([(N, N, 0, blocks)] if blocks else [])
    with monkeypatch.context() as m:
        m.setattr(dense, "_blocked_relative_keys", lambda *a: None)
        whole = relpos.attention(q, k, v, enc, impl="dense", causal=True)
    w = torch.linspace(-1, 1, out.numel()).view_as(out)
    torch.testing.assert_close(out, whole, atol=1e-5, rtol=1e-5)
    for a, b in zip(torch.autograd.grad((out * w).sum(), [q, k, v]), torch.autograd.grad((whole * w).sum(), [q, k, v])):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_compiled_loops_and_the_pytorch_ones_agree_with_the_whole_term(monkeypatch, dtype):
    """Where the kernels are built the block loops run from C++ (``relkey.cpp``), else in PyTorch; both equal the
    whole skewed term, gradients included."""
    from relpos import kernels
    from relpos.kernels import relkey as krel

    B, H, N, D, n = 3, 2, 11, 4, 3
    g = torch.Generator().manual_seed(11)
    qu, qv, k, v = (torch.randn(B, H, N, D, generator=g, dtype=dtype, requires_grad=True) for _ in range(4))
    keys = torch.randn(H, N, D, generator=g, dtype=dtype, requires_grad=True)
    blocks = dense.causal_blocks(N, N, 0, n)
    term = skew_rows_past(qv @ keys.transpose(-1, -2), N, N)
    ref = dense._CausalTermAttention.apply(qu, k, v, term, 0.6, blocks)
    w = torch.randn(ref.shape, generator=g, dtype=dtype)
    want = torch.autograd.grad((ref * w).sum(), (qu, qv, k, v, keys))
    calls = []
    for name in ("blocks_forward", "blocks_backward"):
        real = getattr(krel, name)
        monkeypatch.setattr(krel, name, lambda *a, real=real, name=name: calls.append(name) or real(*a))
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-10)
    for on in (True, False):
        if on and kernels.load() is None:
            continue
        monkeypatch.setattr(kernels, "ENABLED", on)
        calls.clear()
        out = rel.causal_relkey_attention(qu, qv, k, v, keys, 0.6, blocks)
        got = torch.autograd.grad((out * w).sum(), (qu, qv, k, v, keys))
        assert calls == (["blocks_forward", "blocks_backward"] if on else [])
        torch.testing.assert_close(out, ref, **tol)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, **tol)


@pytest.mark.slow
def test_a_compiled_model_traces_the_pytorch_loops_and_equals_eager(monkeypatch):
    """Under ``torch.compile`` the row blocks take the PyTorch loops (the C++ ones are opaque to it: a graph
    break and a warning), with the eager model's loss and gradients."""
    from relpos.kernels import relkey as krel
    from relpos.model import ModelConfig, TransformerLM

    torch.manual_seed(0)
    m = TransformerLM(ModelConfig(d_model=16, n_layers=1, n_heads=4, max_len=128, scheme="transformer-xl",
                                  vocab_size=32))
    x = torch.randint(0, 32, (2, 96))  # 96 rows: 2 row blocks (relkey_blocks)
    calls = []
    real = krel.blocks_forward
    monkeypatch.setattr(krel, "blocks_forward", lambda *a: calls.append(1) or real(*a))

    def step(model):
        model.zero_grad()
        loss = model(x).logsumexp(-1).mean()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in m.parameters()]

    eager = step(m)
    eager_calls = len(calls)
    from relpos import kernels

    assert eager_calls == (1 if kernels.load() is not None else 0)  # eager: the C++ loop where built
    compiled = step(torch.compile(m))
    assert len(calls) == eager_calls  # no C++ loop inside the compiled graph
    torch.testing.assert_close(compiled[0], eager[0], atol=1e-5, rtol=1e-5)
    for a, b in zip(compiled[1], eager[1]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
