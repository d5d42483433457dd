"""The compiled passes of the relative-key (Transformer-XL) backward against their plain-PyTorch form, and the
``"relkey"`` engine with them against the float64 reference, gradients included.

Skipped, with the reason, where the kernels are not built (``make test`` builds them).
"""

from __future__ import annotations

import importlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import relpos
from relpos import kernels
from relpos.kernels import relkey as krel
from tests.helpers import build

chunked = importlib.import_module("relpos.attention.chunked")
BUILT = kernels.load() is not None
needs_kernel = pytest.mark.skipif(not BUILT, reason=f"relpos kernels: {kernels.status()}")


def _case(seed, M, R, C, extra, dtype, masked):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(M, R, C, generator=g, dtype=dtype) * 3
    pd = torch.randn(M, R, R + C - 1 + extra, generator=g, dtype=dtype) * 3
    if masked:  # the causal engine's never-visible offsets, and one logit far below the floor
        pd[..., pd.shape[-1] // 2:] = float("-inf")
        s[0, 0, 0] = -1e4
    lse = torch.randn(M, R, generator=g, dtype=dtype)
    return s, pd, lse


@needs_kernel
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), M=st.integers(1, 3), R=st.integers(1, 9), C=st.integers(1, 13),
       extra=st.integers(0, 3), dtype=st.sampled_from([torch.float32, torch.float64]), masked=st.booleans())
def test_logits_pass_equals_pytorch_form(seed, M, R, C, extra, dtype, masked):
    s, pd, lse = _case(seed, M, R, C, extra, dtype, masked)
    floor = -708.0 if dtype == torch.float64 else -87.0
    want = krel.logits_reference(s.clone(), pd, lse, floor)
    got = krel.logits_(s.clone(), pd, lse, floor)
    torch.testing.assert_close(got, want, rtol=1e-12 if dtype == torch.float64 else 1e-6, atol=0)


@needs_kernel
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), M=st.integers(1, 3), R=st.integers(1, 9), C=st.integers(1, 13),
       width=st.integers(-4, 3), dtype=st.sampled_from([torch.float32, torch.float64]))
def test_ds_pass_equals_pytorch_form(seed, M, R, C, width, dtype):
    """dS in place and laid out by offset into z, over any width of z (the causal engine passes fewer
    columns than R + C - 1), into a strided slice of a buffer holding stale values."""
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(M, R, C, generator=g, dtype=dtype)
    dp = torch.randn(M, R, C, generator=g, dtype=dtype)
    delta = torch.randn(M, R, generator=g, dtype=dtype)
    W = max(1, R + C - 1 + width)
    want_z = torch.full((M, R, W), 7.0, dtype=dtype)
    want = krel.ds_reference(dp.clone(), p, delta, want_z)
    buf = torch.full((M + 1, R + 2, W + 5), 7.0, dtype=dtype)  # stale entries must be overwritten
    z = buf[:M, :R, :W]
    got = krel.ds_(dp.clone(), p, delta, z)
    tol = dict(rtol=1e-12 if dtype == torch.float64 else 1e-6, atol=0)
    torch.testing.assert_close(got, want, **tol)
    torch.testing.assert_close(z, want_z, **tol)
    assert (buf[M:] == 7).all() and (buf[:, R:] == 7).all() and (buf[..., W:] == 7).all()  # nothing outside z


@needs_kernel
def test_nan_logits_stay_nan():
    s, pd, lse = _case(1, 1, 3, 4, 0, torch.float32, False)
    s[0, 1, 2] = float("nan")
    assert krel.logits_(s, pd, lse, -87.0)[0, 1, 2].isnan()


def _grads(enc, q, k, v, impl, **kw):
    out = relpos.attention(q, k, v, enc, impl=impl, **kw)
    w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    return [out.detach(), *torch.autograd.grad((out * w).sum(), [q, k, v, *enc.parameters()])]


@pytest.mark.parametrize("causal, nq, nk, q_offset", [(True, 13, 13, 0), (False, 13, 11, 0), (True, 5, 17, 9),
                                                      (False, 1, 1, 0)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch", [1, 2])  # B = 1 adds the position gradients in place (a separate branch)
def test_transformer_xl_with_and_without_the_kernel(monkeypatch, causal, nq, nk, q_offset, dtype, batch):
    """Transformer-XL through the relkey engine (blocks of 4 rows, odd sizes): output and every gradient
    equal the float64 reference, with the kernel (which then runs once per block) and without it."""
    monkeypatch.setattr(chunked, "FORCE_ROWS", 4)
    enc = build("transformer-xl", n_heads=2, causal=causal)
    g = torch.Generator().manual_seed(3)
    # (B, N, H, D) buffers seen as (B, H, N, D), as a model's projections give them: not contiguous
    q, k, v = (torch.randn(batch, n, 2, 8, generator=g, dtype=dtype).transpose(1, 2).requires_grad_()
               for n in (nq, nk, nk))
    want = _grads(enc, q, k, v, "reference", causal=causal, q_offset=q_offset)
    calls = []
    real = krel.ds_
    monkeypatch.setattr(krel, "ds_", lambda *a: calls.append(1) or real(*a))
    # the relative keys are float32 (the scheme's W_R R): ~1e-7 relative, in float64 too
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-5, atol=2e-6)
    for on in (True, False):
        if on and not BUILT:
            continue
        monkeypatch.setattr(kernels, "ENABLED", on)
        calls.clear()
        got = _grads(enc, q, k, v, "chunked", causal=causal, q_offset=q_offset)
        assert chunked.last_engine == "relkey"
        assert len(calls) == (-(-nq // 4) if on else 0)
        for i, (a, b) in enumerate(zip(got, want)):
            torch.testing.assert_close(a, b, **tol, msg=lambda m, i=i: f"tensor {i} (0 = output), kernel {on}: {m}")
