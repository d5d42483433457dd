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
