"""The compiled CoPE kernel against its plain-PyTorch oracle, and CoPE's engines with it on and off.

Skipped, with the reason, where the kernel is not built; ``make test`` builds it and sets
``RELPOS_REQUIRE_KERNELS=1`` (``tests/kernels/test_rows.py`` then fails on a missing build).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import relpos
from relpos import kernels
from relpos.encodings.cope import CoPE
from relpos.kernels import cope as kcope
from tests.helpers import randomize_parameters

needs_kernel = pytest.mark.skipif(kernels.load() is None, reason=f"relpos kernels: {kernels.status()}")


def _case(seed, B, H, nq, nk, P, dtype, spread, last_batch):
    g = torch.Generator().manual_seed(seed)
    z = (torch.randn(B, H, nq, nk, generator=g, dtype=dtype) * spread).requires_grad_()
    L = torch.randn(B, H, nq, P, generator=g, dtype=dtype).requires_grad_()
    last = torch.randint(-1, nk + 2, (last_batch or B, nq), generator=g)  # -1: no key; > nk - 1: every key
    return z, L, last


@needs_kernel
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), B=st.integers(1, 3), H=st.integers(1, 3), nq=st.integers(1, 12),
       nk=st.integers(1, 30), P=st.integers(2, 40), dtype=st.sampled_from([torch.float32, torch.float64]),
       spread=st.sampled_from([0.5, 3.0, 30.0]), last_batch=st.sampled_from([None, 1]))
def test_kernel_equals_pytorch_form_with_grads(seed, B, H, nq, nk, P, dtype, spread, last_batch):
    """Values and both gradients, over short and long count tables (clipping at P - 1 reached or not),
    gates near 0, 1/2 and 1 (spread: float32 gates of exactly 1 put counts on integers, where the
    kernel must floor as PyTorch's double-accumulated cumsum does), queries that see no key, some keys
    or all."""
    z, L, last = _case(seed, B, H, nq, nk, P, dtype, spread, last_batch)
    got, want = kcope.term(z, L, last), kcope.reference(z, L, last)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got, want, **tol)
    up = torch.randn(got.shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    for a, b in zip(torch.autograd.grad(got, [z, L], up), torch.autograd.grad(want, [z, L], up)):
        torch.testing.assert_close(a, b, **tol)


@needs_kernel
def test_kernel_gradcheck_float64():
    z, L, last = _case(3, 2, 2, 5, 9, 4, torch.float64, 2.0, None)
    assert torch.autograd.gradcheck(lambda z, L: kcope.term(z, L, last), (z, L))


@needs_kernel
def test_saturated_gates_clip_and_stop_the_gradient():
    """Gates of 1 count 1, 2, ... past the table's end: the clipped pairs read row P - 1 and pass no
    gradient to the logits (as PyTorch's clamp), in the kernel as in the oracle."""
    z = torch.full((1, 1, 1, 8), 40.0, dtype=torch.float64, requires_grad=True)
    L = torch.arange(4.0, dtype=torch.float64).view(1, 1, 1, 4).requires_grad_()
    last = torch.tensor([[7]])
    out = kcope.term(z, L, last)
    assert out[0, 0, 0].tolist() == [3, 3, 3, 3, 3, 3, 2, 1]  # counts 8 .. 1, clipped at 3
    gz, gL = torch.autograd.grad(out.sum(), [z, L])
    rz, rL = torch.autograd.grad(kcope.reference(z, L, last).sum(), [z, L])
    torch.testing.assert_close(gz, rz)
    torch.testing.assert_close(gL, rL)
    assert gL[0, 0, 0].tolist() == [0, 1, 1, 6]


@needs_kernel
def test_nan_logits_give_nan_terms_as_the_oracle():
    z, L, last = _case(5, 1, 1, 3, 6, 5, torch.float32, 1.0, None)
    last = torch.full((1, 3), 5)
    with torch.no_grad():
        z[0, 0, 1, 3] = math.nan
    got, want = kcope.term(z, L, last), kcope.reference(z, L, last)
    assert torch.equal(got.isnan(), want.isnan()) and bool(got.isnan().any())
    torch.testing.assert_close(got.nan_to_num(), want.nan_to_num())


@pytest.mark.parametrize("on", [True, False])
def test_add_into_and_backward_equal_autograd_of_the_oracle(monkeypatch, on):
    """The in-place pair the blocks engine uses, kernel and PyTorch fallback alike."""
    if on and kernels.load() is None:
        pytest.skip(f"relpos kernels: {kernels.status()}")
    monkeypatch.setattr(kernels, "ENABLED", on)
    z, L, last = _case(9, 2, 3, 6, 11, 7, torch.float64, 2.0, 1)
    want = z + kcope.reference(z, L, last)
    up = torch.randn(want.shape, generator=torch.Generator().manual_seed(0), dtype=want.dtype)
    wz, wL = torch.autograd.grad(want, [z, L], up)
    s = z.detach().clone()
    ctx = kcope.add_into(s, L.detach(), last)
    assert ctx[0] == on  # the kernel ran exactly when switched on
    torch.testing.assert_close(s, want.detach())
    ds, dL = up.clone(), torch.zeros_like(L)
    kcope.add_backward(ctx, ds, dL)
    torch.testing.assert_close(ds, wz)
    torch.testing.assert_close(dL, wL)


@pytest.mark.parametrize("impl", ["chunked", "dense"])
@pytest.mark.parametrize("per_head", [False, True])
def test_cope_attention_with_and_without_the_kernel(monkeypatch, impl, per_head):
    """CoPE through both engines (several query blocks; the blocked engine shares its content logits with
    the term): outputs and every gradient equal the float64 reference, kernel on and off."""
    from relpos.attention import chunked

    monkeypatch.setattr(chunked, "FORCE_ROWS", 16)
    enc = CoPE(n_heads=2, head_dim=8, npos_max=12, per_head=per_head)
    randomize_parameters(enc)
    enc.double()
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 2, 50, 8, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    w = torch.linspace(-1, 1, 8, dtype=torch.float64)
    ref = relpos.attention(q, k, v, enc, causal=True, impl="reference")
    want = torch.autograd.grad((ref * w).sum(), [q, k, v, *enc.parameters()])
    for on in (True, False):
        if on and kernels.load() is None:
            continue
        monkeypatch.setattr(kernels, "ENABLED", on)
        out = relpos.attention(q, k, v, enc, causal=True, impl=impl)
        got = torch.autograd.grad((out * w).sum(), [q, k, v, *enc.parameters()])
        torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-10)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-9)
