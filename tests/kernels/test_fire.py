"""The compiled FIRE kernel (``fire.cpp``) against its plain-PyTorch oracle, and the ``"piecewise"`` engine
with it against the float64 reference, gradients to q, k, v and every FIRE parameter included.

Skipped, with the reason, where the kernels are not built (``make test`` builds them and sets
``RELPOS_REQUIRE_KERNELS=1``: ``tests/kernels/test_rows.py`` then fails on a missing build).
"""

from __future__ import annotations

import importlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import relpos
from relpos import kernels
from relpos.encodings.fire import FIRE
from relpos.kernels import fire as kf
from tests.helpers import randomize_parameters

chunked = importlib.import_module("relpos.attention.chunked")
BUILT = kernels.load() is not None
needs_kernel = pytest.mark.skipif(not BUILT, reason=f"relpos kernels: {kernels.status()}")


def _tables(seed, H, K, T, R, dtype, tie):
    """A nondecreasing distance table, per-row factors, unsorted-looking slopes and intercepts (a segment
    picked wrongly changes the value) and sorted breakpoints, one of them equal to a pair's x when ``tie``."""
    g = torch.Generator().manual_seed(seed)
    num = torch.log1p(0.3 * torch.arange(T, dtype=torch.float64)).to(dtype)
    inv = (1.0 / (1.0 + torch.rand(R, generator=g, dtype=torch.float64))).to(dtype)
    alpha = torch.randn(H, K + 1, generator=g, dtype=dtype)
    beta = torch.randn(H, K + 1, generator=g, dtype=dtype)
    z = torch.sort(torch.rand(K, generator=g, dtype=dtype) * 2.5).values
    if tie and K:  # x == z[k] exactly: bucketize (right=False) puts the pair in the lower segment
        d = int(torch.randint(0, T, (1,), generator=g))
        z[K // 2] = num[d] * inv[0]
        z = torch.sort(z).values
    return num, inv, alpha, beta, z


CASE = dict(seed=st.integers(0, 10**6), H=st.integers(1, 3), K=st.integers(0, 6), i0=st.integers(0, 30),
            R=st.integers(1, 9), C=st.integers(1, 40), causal=st.booleans(),
            dtype=st.sampled_from([torch.float32, torch.float64]), tie=st.booleans())


def _T(i0, R, C):
    return max(i0 + R - 1, C - 1) + 1


@needs_kernel
@settings(max_examples=60, deadline=None)
@given(**CASE)
def test_bias_and_logits_passes_equal_the_oracle(seed, H, K, i0, R, C, causal, dtype, tie):
    num, inv, alpha, beta, z = _tables(seed, H, K, _T(i0, R, C), R, dtype, tie)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5)
    want = kf.bias_reference(num, inv, alpha, beta, z, i0, R, C, causal=causal)
    buf = torch.full((H, R, C + 3), 7.0, dtype=dtype)  # a strided slice: the columns past C stay
    got = kf.bias_(buf[..., :C], num, inv, alpha, beta, z, i0, causal=causal)
    torch.testing.assert_close(got, want, **tol)
    assert (buf[..., C:] == 7).all()
    B = 2
    g = torch.Generator().manual_seed(seed + 1)
    s = torch.randn(B * H, R, C, generator=g, dtype=dtype) * 3
    lse = torch.randn(B * H, R, generator=g, dtype=dtype)
    floor = -708.0 if dtype == torch.float64 else -87.0
    ref = (s + want.repeat(B, 1, 1) - lse[..., None]).nan_to_num(neginf=floor).clamp_min(floor)
    torch.testing.assert_close(kf.logits_(s.clone(), lse, num, inv, alpha, beta, z, i0, causal=causal, floor=floor),
                               ref, **tol)


@needs_kernel
@settings(max_examples=60, deadline=None)
@given(**CASE)
def test_ds_pass_and_its_gradients_equal_autograd(seed, H, K, i0, R, C, causal, dtype, tie):
    """dS in place, p zeroed on masked keys, and the gradients of sum(dS * bias) to alpha, beta, the
    distance table and the row factors equal autograd through the oracle."""
    num, inv, alpha, beta, z = _tables(seed, H, K, _T(i0, R, C), R, dtype, tie)
    B = 2
    g = torch.Generator().manual_seed(seed + 2)
    p = torch.rand(B * H, R, C, generator=g, dtype=dtype)
    dp = torch.randn(B * H, R, C, generator=g, dtype=dtype)
    delta = torch.randn(B * H, R, generator=g, dtype=dtype)
    visible = (torch.arange(C)[None, :] <= torch.arange(i0, i0 + R)[:, None]) if causal else torch.ones(R, C, dtype=torch.bool)
    want_ds = p * (dp - delta[..., None]) * visible
    leaves = [t.clone().requires_grad_(True) for t in (alpha, beta, num, inv)]
    bias = kf.bias_reference(leaves[2], leaves[3], leaves[0], leaves[1], z, i0, R, C, causal=causal, masked=0.0)
    want = torch.autograd.grad((bias.repeat(B, 1, 1) * want_ds).sum(), leaves)
    grads = tuple(torch.zeros(t.shape, dtype=torch.float64) for t in (alpha, beta, num, inv))
    p2 = p.clone()
    got_ds = kf.ds_(dp.clone(), p2, delta, num, inv, alpha, beta, z, i0, causal=causal, grads=grads)
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == torch.float64 else dict(rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(got_ds, want_ds, **tol)
    assert (p2[:, ~visible] == 0).all() and torch.equal(p2[:, visible], p[:, visible])
    for name, a, b in zip(("alpha", "beta", "num", "inv"), grads, want):
        torch.testing.assert_close(a.to(dtype), b, **tol, msg=lambda m, name=name: f"d_{name}: {m}")


@needs_kernel
@settings(max_examples=60, deadline=None)
@given(**CASE)
def test_rows_function_equals_the_oracle_with_its_gradients(seed, H, K, i0, R, C, causal, dtype, tie):
    """``kf.rows`` (the bias as a tensor of its own, backward through the dS pass with p = 1, delta = 0):
    values and the gradients to num, inv, alpha and beta equal autograd through the oracle; masked keys -inf."""
    num, inv, alpha, beta, z = _tables(seed, H, K, _T(i0, R, C), R, dtype, tie)
    g = torch.randn(H, R, C, generator=torch.Generator().manual_seed(seed + 3), dtype=dtype)
    leaves = [t.clone().requires_grad_(True) for t in (num, inv, alpha, beta)]
    got = kf.rows(*leaves, z, i0, C, causal=causal)
    want = kf.bias_reference(*leaves, z, i0, R, C, causal=causal)
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == torch.float64 else dict(rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(got, want, **tol)
    seen = torch.isfinite(want)
    d_got = torch.autograd.grad((got.masked_fill(~seen, 0) * g).sum(), leaves)
    d_want = torch.autograd.grad((want.masked_fill(~seen, 0) * g).sum(), leaves)
    for name, a, b in zip(("num", "inv", "alpha", "beta"), d_got, d_want):
        torch.testing.assert_close(a, b, **tol, msg=lambda m, name=name: f"d_{name}: {m}")


@needs_kernel
def test_rows_function_gradcheck_and_refusal():
    num, inv, alpha, beta, z = _tables(5, 2, 3, 12, 4, torch.float64, False)
    leaves = [t.clone().requires_grad_(True) for t in (num, inv, alpha, beta)]
    assert torch.autograd.gradcheck(lambda *t: kf.rows(*t, z, 6, 9), leaves)
    with pytest.raises(ValueError, match="i0 must be >= 0"):
        kf.rows(num, inv, alpha, beta, z, -1, 9)


def _fire(L, seed=3, H=2):
    enc = FIRE(n_heads=H, init_L=L)
    randomize_parameters(enc, std=0.5, seed=seed)
    return enc


def _grads(enc, q, k, v, impl, **kw):
    out = relpos.attention(q, k, v, enc, impl=impl, **kw)
    w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    return [out.detach(), *torch.autograd.grad((out * w).sum(), [q, k, v, *enc.parameters()])]


@needs_kernel
@pytest.mark.parametrize("causal, nq, nk, q_offset, L", [
    (True, 13, 13, 0, 6.0),     # rows below and past the threshold L
    (False, 13, 11, 0, 6.0),
    (True, 5, 17, 9, 6.0),      # cached decoding: queries at 9..13, all past L
    (False, 5, 17, 9, 11.5),    # queries straddle L, keys on both sides
    (True, 13, 13, 0, 0.5),     # every query at or past L
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_engine_equals_the_float64_reference_with_every_gradient(monkeypatch, causal, nq, nk, q_offset, L, dtype):
    monkeypatch.setattr(chunked, "FORCE_ROWS", 4)
    enc = _fire(L)
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 2, n, 8, generator=g, dtype=dtype, requires_grad=True) for n in (nq, nk, nk))
    want = _grads(enc, q, k, v, "reference", causal=causal, q_offset=q_offset)
    calls = []
    real = kf.ds_
    monkeypatch.setattr(kf, "ds_", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    got = _grads(enc, q, k, v, "chunked", causal=causal, q_offset=q_offset)
    assert chunked.last_engine == "piecewise" and len(calls) == -(-nq // 4)
    # FIRE's MLP and distances are float32: ~1e-7 relative, in float64 too
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-5, atol=2e-6)
    names = ["out", "q", "k", "v"] + [n for n, _ in enc.named_parameters()]
    for name, a, b in zip(names, got, want):
        torch.testing.assert_close(a, b, **tol, msg=lambda m, name=name: f"{name}: {m}")
    if q_offset == 0 and 1 < L < nq:  # queries below L see keys: the threshold has a gradient (checked above)
        assert float(got[names.index("l_raw")].abs()) > 0


@needs_kernel
@pytest.mark.parametrize("causal, nq, nk, q_offset, L", [
    (True, 13, 13, 0, 6.0),     # rows below and past the threshold: Toeplitz rows and the rows kernel
    (False, 13, 11, 0, 6.0),
    (True, 5, 17, 9, 6.0),      # cached decoding: queries at 9..13, all past L
    (True, 13, 13, 0, 0.5),     # every query at or past L
])
def test_dense_past_the_threshold_equals_the_float64_reference(monkeypatch, causal, nq, nk, q_offset, L):
    """Dense attention with FIRE past its threshold: a causal call on default positions takes ``bias_past``
    (the causal -inf written by the rows kernel, no separate mask); values and every gradient equal the
    reference's."""
    enc = _fire(L)
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 2, n, 8, generator=g, dtype=torch.float32, requires_grad=True) for n in (nq, nk, nk))
    want = _grads(enc, q, k, v, "reference", causal=causal, q_offset=q_offset)
    calls = []
    real = FIRE.bias_past
    monkeypatch.setattr(FIRE, "bias_past", lambda self, *a: calls.append(1) or real(self, *a))
    got = _grads(enc, q, k, v, "dense", causal=causal, q_offset=q_offset)
    assert len(calls) == (1 if causal else 0)
    names = ["out", "q", "k", "v"] + [n for n, _ in enc.named_parameters()]
    for name, a, b in zip(names, got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}")


@needs_kernel
def test_wrong_kernel_numbers_would_fail(monkeypatch):
    """The comparison above can fail: a bias off by a segment (alpha of the next one) changes the output."""
    enc = _fire(6.0)
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 2, 13, 8, generator=g, requires_grad=True) for _ in range(3))
    want = _grads(enc, q, k, v, "reference", causal=True)
    real = kf.bias_
    monkeypatch.setattr(kf, "bias_", lambda out, num, inv, alpha, beta, *a, **kw:
                        real(out, num, inv, alpha.roll(1, 1).contiguous(), beta, *a, **kw))
    got = _grads(enc, q, k, v, "chunked", causal=True)
    assert chunked.last_engine == "piecewise"
    assert not torch.allclose(got[0], want[0], rtol=1e-3, atol=1e-4)


def test_without_the_kernel_it_is_refused_by_name_and_blocks_serves_fire(monkeypatch):
    monkeypatch.setattr(kernels, "ENABLED", False)
    with pytest.raises(kf.KernelMissing, match="FIRE kernel"):
        kf.bias_(torch.zeros(1, 1, 1), *(torch.zeros(1),) * 2, torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(0), 0,
                 causal=True)
    enc = _fire(6.0)
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 2, 9, 8, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    got = _grads(enc, q, k, v, "chunked", causal=True)
    assert chunked.last_engine == "blocks"
    for a, b in zip(got, _grads(enc, q, k, v, "reference", causal=True)):
        torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("causal", [True, False])
def test_padding_and_a_fully_masked_row_take_blocks_without_nan(causal):
    """Key padding is served by the "blocks" engine (the flash kernel's mask cannot hold an empty row);
    a query whose every key is padded gives zeros and finite gradients, equal to the reference."""
    enc = _fire(6.0)
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 2, 9, 8, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[0, 0] = False  # causal: example 0's first query sees no key
    if not causal:
        mask[1] = False
        mask[1, 8] = True
    got = _grads(enc, q, k, v, "chunked", causal=causal, key_mask=mask)
    assert chunked.last_engine == "blocks"
    assert all(torch.isfinite(t).all() for t in got)
    if causal:
        assert (got[0][0, :, 0] == 0).all()
    want = _grads(enc, q, k, v, "reference", causal=causal, key_mask=mask)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-6)


@needs_kernel
def test_strided_inputs_as_a_model_passes_them(monkeypatch):
    """q, k, v as head-transposed views of (B, N, H, D) projections (not contiguous): same numbers."""
    monkeypatch.setattr(chunked, "FORCE_ROWS", 4)
    enc = _fire(6.0)
    g = torch.Generator().manual_seed(9)
    base = [torch.randn(2, 11, 2, 8, generator=g, requires_grad=True) for _ in range(3)]
    q, k, v = (t.transpose(1, 2) for t in base)
    outs = []
    for impl in ("chunked", "reference"):
        out = relpos.attention(q, k, v, enc, impl=impl, causal=True)
        outs.append([out, *torch.autograd.grad((out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum(), base)])
        if impl == "chunked":
            assert chunked.last_engine == "piecewise"
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
