"""FIRE's MLP on a Toeplitz bias's offsets in one C++ call each way (``fire_mlp.cpp``), against the float64
reference written from the paper's formula and against the PyTorch path it replaces, gradients to every FIRE
parameter included.

Skipped, with the reason, where the kernels are not built (``make test`` builds them and requires them).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from relpos import kernels
from relpos.encodings import fire as fire_mod
from relpos.encodings.fire import FIRE
from relpos.kernels import fire as kf
from tests.helpers import randomize_parameters

BUILT = kernels.load() is not None
needs_kernel = pytest.mark.skipif(not BUILT, reason=f"relpos kernels: {kernels.status()}")


def _fire(seed: int, H: int, width: int, init_L: float, c_raw_shift: float = 0.0) -> FIRE:
    enc = FIRE(H, mlp_width=width, init_L=init_L)
    randomize_parameters(enc, seed=seed)
    with torch.no_grad():
        enc.c_raw.add_(c_raw_shift)
    return enc


def _bias_and_grads(enc: FIRE, delta: torch.Tensor, g: torch.Tensor):
    enc.zero_grad()
    v = enc.relative_bias(delta)
    (v * g).sum().backward()
    return v.detach(), {n: p.grad.detach().clone() for n, p in enc.named_parameters()}


def _reference(enc: FIRE, n: int, g: torch.Tensor):
    """The float64 reference on an ``n x n`` grid of positions below the threshold, and its gradients: entry
    ``(i, j)`` is offset ``j - i``, so ``g`` on offsets becomes a Toeplitz weight on the grid, shared among the
    entries of one offset."""
    pos = torch.arange(n)[None]
    enc.zero_grad()
    ref = enc.reference_bias(pos, pos)[0]  # (H, n, n) float64
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    count = (n - (j - i).abs()).double()  # offset j - i occurs n - |j - i| times on the grid
    w = g.double()[:, (j - i + n - 1)] / count  # (H, n, n): so each offset weighs g once in all
    (ref * w).sum().backward()
    grads = {k: p.grad.detach().clone() for k, p in enc.named_parameters()}
    o = torch.arange(-(n - 1), n)  # offset j - i of each output entry: read at (i, j) = (max(-o, 0), max(o, 0))
    return ref.detach()[:, (-o).clamp(min=0), o.clamp(min=0)], grads


@needs_kernel
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), H=st.integers(1, 4), width=st.integers(1, 40), n=st.integers(1, 30),
       c_shift=st.sampled_from([0.0, 25.0]))
def test_one_call_equals_the_float64_reference_with_every_gradient(seed, H, width, n, c_shift):
    # c_shift 25 puts c_raw past softplus's threshold (20), where softplus is the identity
    enc = _fire(seed, H, width, init_L=10.0 * (n + 5), c_raw_shift=c_shift)
    assert enc.toeplitz_below() > n  # every grid query sits below the threshold, where the bias is Toeplitz
    delta = torch.arange(-(n - 1), n)  # (2n - 1,)
    g = torch.randn(H, 2 * n - 1, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    assert fire_mod._one_call(delta, tuple(enc.parameters()))
    vals, grads = _bias_and_grads(enc, delta, g.float())
    assert vals.dtype == torch.float32 and vals.shape == (H, 2 * n - 1)
    ref_vals, ref_grads = _reference(enc, n, g)
    torch.testing.assert_close(vals.double(), ref_vals, atol=2e-5, rtol=2e-5)
    for name, ref in ref_grads.items():
        scale = max(1.0, float(ref.abs().max()))
        torch.testing.assert_close(grads[name].double(), ref.double(), atol=5e-5 * scale, rtol=1e-4, msg=name)


@needs_kernel
@pytest.mark.parametrize("shape", [(7,), (3, 5)])
def test_one_call_equals_the_pytorch_path(monkeypatch, shape):
    enc = _fire(3, 4, 32, init_L=64.0)
    delta = torch.randint(-60, 61, shape)
    g = torch.randn(4, *shape, generator=torch.Generator().manual_seed(1))
    fused = _bias_and_grads(enc, delta, g)
    monkeypatch.setattr(fire_mod, "_one_call", lambda *a: False)
    plain = _bias_and_grads(enc, delta, g)
    torch.testing.assert_close(fused[0], plain[0], atol=1e-6, rtol=1e-6)
    for name in plain[1]:
        torch.testing.assert_close(fused[1][name], plain[1][name], atol=1e-5, rtol=1e-4, msg=name)


@needs_kernel
def test_the_one_call_runs_and_a_wrong_kernel_would_fail(monkeypatch):
    """A spy proves the kernel serves the encoding; a kernel whose slope gradient is off fails the comparison."""
    enc = _fire(5, 2, 8, init_L=40.0)
    delta = torch.arange(-9, 10)
    g = torch.randn(2, 19, generator=torch.Generator().manual_seed(2))
    calls = []
    real = kf.mlp_offsets
    monkeypatch.setattr(kf, "mlp_offsets", lambda *a: calls.append(1) or real(*a))
    _, good = _bias_and_grads(enc, delta, g)
    assert calls
    monkeypatch.setattr(kf, "mlp_offsets", lambda *a: real(*a) * 1.001)
    _, bad = _bias_and_grads(enc, delta, g)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(bad["mlp.2.weight"], good["mlp.2.weight"], atol=1e-6, rtol=1e-6)


def test_other_dtypes_and_compile_take_the_pytorch_path():
    enc = _fire(0, 2, 4, init_L=16.0)
    delta = torch.arange(-3, 4)
    assert not fire_mod._one_call(delta.int(), tuple(enc.parameters()))
    enc64 = _fire(0, 2, 4, init_L=16.0).double()
    assert not fire_mod._one_call(delta, tuple(enc64.parameters()))
    assert enc64.relative_bias(delta).dtype == torch.float32  # position tables stay float32


def _bias_grads(enc: FIRE, qpos: torch.Tensor, kpos: torch.Tensor, g: torch.Tensor):
    enc.zero_grad()
    b = enc.bias(qpos, kpos)
    (b * g).sum().backward()
    return b.detach(), {n: p.grad.detach().clone() for n, p in enc.named_parameters()}


@needs_kernel
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 24), below=st.integers(0, 8), causal_keys=st.booleans(),
       gaps=st.booleans(), one_call=st.booleans())
def test_rows_past_the_threshold_equal_the_reference_and_the_piecewise_form(seed, n, below, causal_keys, gaps,
                                                                            one_call):
    """Rows at or past FIRE's learned threshold are not Toeplitz. On contiguous positions they take the rows kernel
    (``kernels.fire.rows``, the piecewise form in one walk each way), or for at most ``ONE_CALL_PAIRS`` pairs the
    MLP on each pair in one C++ call; on shared positions with gaps (a randomized-position draw), for a few pairs,
    that one call too. All must give the float64 reference's values and gradients (the normaliser psi(max(L, i)),
    its gradient to L only where L > i) and the plain piecewise form's. ``one_call=False`` sets ``ONE_CALL_PAIRS``
    to 0, so the rows kernel serves every count."""
    enc = FIRE(3, mlp_width=8, init_L=16.0)
    randomize_parameters(enc, seed=seed)
    step = 2 if gaps else 1
    with torch.no_grad():  # the threshold inside the rows, half-way between two positions (ties: the next test)
        L = max(step * (n - below) - 0.5, 0.5)
        enc.l_raw.copy_(torch.tensor(fire_mod._softplus_inv(L * 0.6931471805599453 / 16.0)))
    pos = torch.arange(n)[None] * step
    kpos = pos if causal_keys else torch.arange(step * n + 3)[None]
    g = torch.randn(1, 3, n, kpos.shape[-1], generator=torch.Generator().manual_seed(seed))
    calls = []
    real_mlp, real_rows = kf.mlp_offsets, kf.rows
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kf, "mlp_offsets", lambda *a, **k: calls.append("mlp" if k.get("qpos") is not None else "toe")
                   or real_mlp(*a, **k))
        mp.setattr(kf, "rows", lambda *a, **k: calls.append("rows") or real_rows(*a, **k))
        if not one_call:
            mp.setattr(fire_mod, "ONE_CALL_PAIRS", 0)
        fast, g_fast = _bias_grads(enc, pos, kpos, g)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fire_mod, "ONE_CALL_PAIRS", 0)
        mp.setattr(FIRE, "_kernel_ok", lambda self, qpos: False)
        piece, g_piece = _bias_grads(enc, pos, kpos, g)
    enc.zero_grad()
    ref = enc.reference_bias(pos, kpos)
    (ref * g.double()).sum().backward()
    g_ref = {k: p.grad.detach().clone() for k, p in enc.named_parameters()}
    torch.testing.assert_close(fast.double(), ref.detach(), atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(fast, piece, atol=2e-5, rtol=2e-5)
    for name, r in g_ref.items():
        scale = max(1.0, float(r.abs().max()))
        torch.testing.assert_close(g_fast[name].double(), r.double(), atol=1e-4 * scale, rtol=1e-4, msg=name)
        torch.testing.assert_close(g_fast[name], g_piece[name], atol=1e-4 * scale, rtol=1e-3, msg=name)
    past = int((pos[0].float() >= enc.threshold.detach()).sum())  # rows at or past the threshold
    few = one_call and past * kpos.shape[-1] <= fire_mod.ONE_CALL_PAIRS
    if not gaps and past:  # contiguous: a few rows' pairs in one MLP call, else the rows kernel
        assert ("mlp" if few else "rows") in calls and ("rows" if few else "mlp") not in calls
    if gaps and one_call and pos.shape[-1] * kpos.shape[-1] <= fire_mod.ONE_CALL_PAIRS:  # every pair, one call
        assert "mlp" in calls


@needs_kernel
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 20), past=st.integers(1, 20), extra=st.integers(0, 4),
       one_call=st.booleans())
def test_bias_past_is_the_bias_with_the_causal_mask_folded_in(seed, n, past, extra, one_call):
    """``bias_past`` (asked for by dense causal calls on default positions): the reference bias where ``j <= i``,
    -inf after, and the same gradients as masking the reference (none from the masked pairs), with the rows past
    the threshold through the MLP's one call (few pairs) or the rows kernel (``one_call=False``)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fire_mod, "ONE_CALL_PAIRS", 1024 if one_call else 0)
        _bias_past_case(seed, n, min(past, n), extra)


def _bias_past_case(seed, n, past, extra):
    enc = FIRE(2, mlp_width=6, init_L=16.0)
    randomize_parameters(enc, seed=seed)
    with torch.no_grad():
        L = n - past + extra + 0.5 if extra else n - past + 0.5
        enc.l_raw.copy_(torch.tensor(fire_mod._softplus_inv(L * 0.6931471805599453 / 16.0)))
    q, k = torch.arange(extra, extra + n)[None], torch.arange(extra + n)[None]  # a cached step's rows
    g = torch.randn(1, 2, n, extra + n, generator=torch.Generator().manual_seed(seed))
    future = k[0][None, :] > q[0][:, None]  # (Nq, Nk)
    enc.zero_grad()
    b = enc.bias_past(q, k)
    assert b is not None
    (b.masked_fill(future, 0.0) * g).sum().backward()
    got = {name: p.grad.detach().clone() for name, p in enc.named_parameters()}
    enc.zero_grad()
    ref = enc.reference_bias(q, k)
    (ref.masked_fill(future, 0.0) * g.double()).sum().backward()
    assert bool(torch.isneginf(b[0][:, future]).all()) and bool(torch.isfinite(b[0][:, ~future]).all())
    torch.testing.assert_close(b[0][:, ~future].double(), ref[0][:, ~future].detach(), atol=2e-5, rtol=2e-5)
    for name, p in enc.named_parameters():
        r = p.grad.double()
        torch.testing.assert_close(got[name].double(), r, atol=1e-4 * max(1.0, float(r.abs().max())), rtol=1e-4,
                                   msg=name)


def test_bias_past_refuses_without_the_kernel(monkeypatch):
    """Without the compiled kernel FIRE has no cheaper masked form: None, and the engine masks the bias itself."""
    enc = FIRE(2, mlp_width=4, init_L=4.0)
    monkeypatch.setattr(FIRE, "_kernel_ok", lambda self, qpos: False)
    assert enc.bias_past(torch.arange(8)[None], torch.arange(8)[None]) is None


@needs_kernel
def test_a_query_exactly_at_the_threshold_gets_half_the_gradient_to_it():
    """torch.maximum splits the gradient at a tie; the one call does the same (the reference uses torch.maximum)."""
    enc = FIRE(2, mlp_width=4, init_L=8.0)  # l_raw = 0: L = 8 exactly
    randomize_parameters(enc, seed=1)
    with torch.no_grad():
        enc.l_raw.zero_()
    assert float(enc.threshold.detach()) == 8.0
    q, k = torch.tensor([[8]]), torch.arange(9)[None]
    enc.zero_grad()
    enc.bias(q, k).sum().backward()
    one = enc.l_raw.grad.clone()
    enc.zero_grad()
    enc.reference_bias(q, k).sum().backward()
    torch.testing.assert_close(one.double(), enc.l_raw.grad.double(), atol=1e-6, rtol=1e-5)
    assert float(one) != 0.0
