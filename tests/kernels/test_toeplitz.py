"""The compiled gradient of a Toeplitz expansion (its sums along diagonals) against the plain-PyTorch form and
against autograd through an explicit index, and the Toeplitz schemes' gradients with it against the float64
reference.

Skipped, with the reason, where the kernels are not built (``make test`` builds them).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import relpos
from relpos import kernels
from relpos.kernels import toeplitz as ktoe
from relpos.offsets import toeplitz
from tests.helpers import build

BUILT = kernels.load() is not None
needs_kernel = pytest.mark.skipif(not BUILT, reason=f"relpos kernels: {kernels.status()}")


def _by_index(g: torch.Tensor) -> torch.Tensor:
    """The oracle: autograd through ``v[..., j - t + R - 1]`` gathered with an explicit index."""
    R, C = g.shape[-2:]
    v = torch.zeros(*g.shape[:-2], R + C - 1, dtype=torch.float64, requires_grad=True)
    idx = torch.arange(C)[None, :] - torch.arange(R)[:, None] + R - 1  # (R, C)
    (v[..., idx] * g.double()).sum().backward()
    return v.grad


@needs_kernel
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), lead=st.lists(st.integers(1, 3), min_size=0, max_size=2),
       R=st.integers(1, 12), C=st.integers(1, 15), dtype=st.sampled_from([torch.float32, torch.float64]),
       rows_of_bigger=st.booleans())
def test_kernel_matches_reference_and_index(seed, lead, R, C, dtype, rows_of_bigger):
    g = torch.Generator().manual_seed(seed)
    big = torch.randn(*lead, R + 3, C, generator=g, dtype=dtype)
    x = big[..., 2 : 2 + R, :] if rows_of_bigger else big[..., :R, :].contiguous()  # a row slice: strided rows
    got = ktoe.diag_sums(x)
    assert got.shape == (*lead, R + C - 1) and got.dtype == dtype
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 1e-12, "rtol": 1e-12}
    torch.testing.assert_close(got, ktoe.diag_sums_reference(x), **tol)
    torch.testing.assert_close(got.double(), _by_index(x), **tol)


@needs_kernel
def test_kernel_is_used_and_refuses_bad_layouts():
    g = torch.randn(2, 3, 5)
    assert ktoe.usable(g) and not ktoe.usable(g.to(torch.bfloat16)) and not ktoe.usable(torch.randn(4))
    with pytest.raises(RuntimeError, match="3-D CPU tensor"):
        kernels.load().toeplitz_grad(torch.randn(3, 5))
    # a transposed gradient (keys not unit-strided) is made contiguous first, not read wrongly
    t = torch.randn(2, 5, 3).transpose(1, 2)
    torch.testing.assert_close(ktoe.diag_sums(t), ktoe.diag_sums_reference(t))


def test_expansion_gradient_matches_index_without_the_kernel(monkeypatch):
    """:func:`relpos.offsets.toeplitz`'s backward on the PyTorch path (kernels off) against the index oracle."""
    monkeypatch.setattr(ktoe, "usable", lambda g: False)
    v = torch.randn(3, 4 + 6 - 1, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 4, 6, dtype=torch.float64)
    (toeplitz(v, 4, 6) * w).sum().backward()
    torch.testing.assert_close(v.grad, _by_index(w))


@needs_kernel
@pytest.mark.parametrize("name", ["t5", "kerple-log", "fire", "alibi"])
@pytest.mark.parametrize("impl", ["dense", "chunked"])
def test_toeplitz_schemes_gradients_against_the_reference(name, impl):
    """The schemes whose bias is a Toeplitz expansion, forward and backward with the kernel, against the float64
    reference (the parameters' gradients go through the diagonal sums)."""
    enc = build(name, n_heads=3, causal=True)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 17, 8, generator=g, requires_grad=True) for _ in range(3))

    def run(i):
        out = relpos.attention(q, k, v, enc, causal=True, impl=i)
        params = [p for p in enc.parameters() if p.requires_grad]
        w = torch.linspace(-1, 1, out.numel()).view_as(out)
        return out.detach(), torch.autograd.grad((out * w).sum(), [q, k, v, *params])

    out, grads = run(impl)
    ref, rgrads = run("reference")
    torch.testing.assert_close(out, ref, atol=3e-4, rtol=1e-3)
    for a, b in zip(grads, rgrads):
        torch.testing.assert_close(a, b, atol=3e-4, rtol=1e-3)
