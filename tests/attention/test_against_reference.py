"""Every attention implementation of every scheme against the float64 reference.

Outputs and gradients (q, k, v and every learned parameter of the scheme), causal
and bidirectional, head counts that are and are not powers of two, q_offset > 0,
key padding, and explicit (randomized-style) positions.
"""

from __future__ import annotations

import pytest
import torch

import relpos
from relpos.attention import UnsupportedError, available_impls
from tests.helpers import attention_schemes, build

FAST_IMPLS = [i for i in available_impls() if i not in ("reference",)]
assert set(FAST_IMPLS) == {"dense", "chunked", "flex", "auto"}
SCHEMES = attention_schemes()  # embedding-only schemes are refused (tests/attention/test_validation.py)


def _inputs(B, H, Nq, Nk, D, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, Nq, D, generator=g, dtype=dtype, requires_grad=True)
    k = torch.randn(B, H, Nk, D, generator=g, dtype=dtype, requires_grad=True)
    v = torch.randn(B, H, Nk, D, generator=g, dtype=dtype, requires_grad=True)
    return q, k, v


def _run(impl, enc, q, k, v, **kw):
    out = relpos.attention(q, k, v, enc, impl=impl, **kw)
    grads = torch.autograd.grad(
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum(),
        [q, k, v] + [p for p in enc.parameters() if p.requires_grad],
        allow_unused=True,
    )
    return out.detach(), grads


def expected_unsupported(impl: str, enc, q: torch.Tensor, *, grad: bool = True) -> str | None:
    """Why ``impl`` is *expected* to refuse this request, or None if it must serve it.

    This is the whole list: any other UnsupportedError is a failure.
    """
    if impl == "flex" and "value" in enc.acts_on:
        return "a value term cannot be a FlexAttention score_mod"
    if impl == "flex" and q.device.type == "cpu" and grad:
        return "PyTorch has no FlexAttention backward on CPU"
    return None


def _compare(impl, enc, q, k, v, atol=2e-4, **kw):
    why = expected_unsupported(impl, enc, q)
    if why is not None:
        with pytest.raises(UnsupportedError):
            relpos.attention(q, k, v, enc, impl=impl, **kw)
        if expected_unsupported(impl, enc, q, grad=False) is None:  # the forward alone is served
            with torch.no_grad():
                out = relpos.attention(q, k, v, enc, impl=impl, **kw)
                ref = relpos.attention(q, k, v, enc, impl="reference", **kw)
            torch.testing.assert_close(out, ref, atol=atol, rtol=1e-3)
        return
    out, grads = _run(impl, enc, q, k, v, **kw)
    ref, ref_grads = _run("reference", enc, q, k, v, **kw)
    torch.testing.assert_close(out, ref, atol=atol, rtol=1e-3)
    for i, (g, rg) in enumerate(zip(grads, ref_grads)):
        if rg is None:
            assert g is None or g.abs().max() == 0, f"grad {i} should be absent"
            continue
        assert g is not None, f"grad {i} missing from {impl}"
        torch.testing.assert_close(g, rg, atol=atol, rtol=1e-3, msg=f"grad {i} mismatch")


@pytest.mark.parametrize("impl", FAST_IMPLS)
@pytest.mark.parametrize("name", SCHEMES)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("H", [1, 3, 4])
def test_matches_reference(impl, name, causal, H):
    enc = build(name, n_heads=H, causal=causal)
    if enc.causal_only and not causal:
        pytest.skip("causal-only scheme")
    q, k, v = _inputs(2, H, 9, 9, 8)
    _compare(impl, enc, q, k, v, causal=causal)


@pytest.mark.parametrize("impl", FAST_IMPLS)
@pytest.mark.parametrize("name", SCHEMES)
def test_q_offset_and_padding(impl, name):
    enc = build(name, n_heads=3, causal=True)
    q, k, v = _inputs(2, 3, 4, 11, 8, seed=1)
    kpm = torch.ones(2, 11, dtype=torch.bool)
    kpm[1, :3] = False
    _compare(impl, enc, q, k, v, causal=True, q_offset=7, key_padding_mask=kpm)


@pytest.mark.parametrize("impl", FAST_IMPLS)
@pytest.mark.parametrize("name", SCHEMES)
def test_explicit_positions(impl, name):
    enc = build(name, n_heads=2, causal=True)
    q, k, v = _inputs(2, 2, 6, 6, 8, seed=2)
    pos = torch.tensor([[0, 3, 4, 9, 12, 20], [1, 2, 5, 6, 7, 30]])
    _compare(impl, enc, q, k, v, causal=True, positions=pos)


@pytest.mark.parametrize("impl", ["reference"] + FAST_IMPLS)
@pytest.mark.parametrize("name", SCHEMES)
def test_fully_masked_row_is_zero_not_nan(impl, name):
    enc = build(name, n_heads=2, causal=False)
    if enc.causal_only:
        enc = build(name, n_heads=2, causal=True)
    q, k, v = _inputs(2, 2, 5, 5, 8, seed=3)
    kpm = torch.ones(2, 5, dtype=torch.bool)
    kpm[0] = False  # batch 0: every key is padding
    kw = dict(causal=enc.causal_only, key_padding_mask=kpm, impl=impl)
    grad = expected_unsupported(impl, enc, q) is None
    if not grad:
        with pytest.raises(UnsupportedError):
            relpos.attention(q, k, v, enc, **kw)
        if expected_unsupported(impl, enc, q, grad=False) is not None:
            return
    with torch.set_grad_enabled(grad):
        out = relpos.attention(q, k, v, enc, **kw)
    assert torch.isfinite(out).all()
    assert out[0].abs().max() == 0
    assert out[1].abs().max() > 0
    if grad:
        out.sum().backward()
        assert torch.isfinite(q.grad).all()
