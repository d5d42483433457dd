"""Grouped-query and multi-query attention: k, v with fewer heads than q (issue 32).

Every scheme and implementation against the float64 reference (which repeats each
key/value head), outputs and gradients; and the fast paths do not copy k and v
per query head where the scheme's terms do not read per-head keys.
"""

from __future__ import annotations

import sys

import pytest
import torch

import relpos
from relpos.attention import UnsupportedError
from tests.attention.test_against_reference import _run, expected_unsupported
from tests.helpers import attention_schemes, build

SCHEMES = attention_schemes()
IMPLS = ["dense", "chunked", "flex", "auto"]


def _inputs(B, H, Hkv, Nq, Nk, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, Nq, D, generator=g).requires_grad_()
    k = torch.randn(B, Hkv, Nk, D, generator=g).requires_grad_()
    v = torch.randn(B, Hkv, Nk, D, generator=g).requires_grad_()
    return q, k, v


def _compare(impl, enc, q, k, v, **kw):
    if expected_unsupported(impl, enc, q) is not None:
        if expected_unsupported(impl, enc, q, grad=False) is not None:
            with pytest.raises(UnsupportedError):
                relpos.attention(q, k, v, enc, impl=impl, **kw)
            return
        with torch.no_grad():
            out = relpos.attention(q, k, v, enc, impl=impl, **kw)
            ref = relpos.attention(q, k, v, enc, impl="reference", **kw)
        torch.testing.assert_close(out, ref, atol=2e-4, rtol=1e-3)
        return
    out, grads = _run(impl, enc, q, k, v, **kw)
    ref, rgrads = _run("reference", enc, q, k, v, **kw)
    torch.testing.assert_close(out, ref, atol=2e-4, rtol=1e-3)
    for i, (a, b) in enumerate(zip(grads, rgrads)):
        if a is None or b is None:
            assert a is None and b is None or (a if a is not None else b).abs().max() == 0, f"grad {i}"
            continue
        torch.testing.assert_close(a, b, atol=2e-4, rtol=1e-3, msg=f"grad {i} mismatch")


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", SCHEMES)
@pytest.mark.parametrize("Hkv", [1, 2])
def test_gqa_matches_reference(impl, name, Hkv):
    enc = build(name, n_heads=4, causal=True)
    q, k, v = _inputs(2, 4, Hkv, 9, 9)
    _compare(impl, enc, q, k, v, causal=True)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", SCHEMES)
def test_gqa_bidirectional_offset_and_padding(impl, name):
    enc = build(name, n_heads=4, causal=False)
    causal = enc.causal_only
    if causal:
        enc = build(name, n_heads=4, causal=True)
    q, k, v = _inputs(2, 4, 2, 4, 11, seed=1)
    kpm = torch.ones(2, 11, dtype=torch.bool)
    kpm[1, :3] = False
    kpm[0, -2:] = False
    _compare(impl, enc, q, k, v, causal=causal, q_offset=7, key_padding_mask=kpm)


def test_gqa_reference_equals_repeated_heads():
    """The oracle's own definition: query head h reads key/value head h // G."""
    enc = build("alibi", n_heads=6, causal=True)
    q, k, v = _inputs(1, 6, 2, 5, 5)
    a = relpos.attention(q, k, v, enc, causal=True, impl="reference")
    b = relpos.attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), enc, causal=True, impl="reference")
    torch.testing.assert_close(a, b)


def test_heads_that_do_not_divide_are_refused():
    q, k, v = _inputs(1, 4, 3, 5, 5)
    with pytest.raises(ValueError, match="H_kv dividing q's H=4"):
        relpos.attention(q, k, v, causal=True)


@pytest.mark.parametrize("impl", ["dense", "chunked", "flex"])
@pytest.mark.parametrize("name", ["nope", "rope", "alibi", "t5", "shaw-kv", "kerple-log", "fire"])
def test_fast_paths_do_not_copy_kv(monkeypatch, impl, name):
    """No repeat_interleave of k or v (chunked copies only for schemes with per-head terms)."""
    enc = build(name, n_heads=4, causal=True)
    if impl == "flex" and "value" in enc.acts_on:
        pytest.skip("flex has no value term")
    if impl == "chunked" and enc.acts_on - {"embedding", "qk"}:
        pytest.skip("chunked expands k, v for schemes with per-head terms (documented)")
    q, k, v = _inputs(2, 4, 1, 6, 6)
    calls = []
    orig = torch.Tensor.repeat_interleave

    def spy(self, *a, **kw):
        caller = sys._getframe(1).f_code.co_filename
        if "relpos" in caller and "tests" not in caller:  # torch's own eager CPU flex expands internally
            calls.append((caller, tuple(self.shape)))
        return orig(self, *a, **kw)

    monkeypatch.setattr(torch.Tensor, "repeat_interleave", spy)
    monkeypatch.setattr(torch, "repeat_interleave", spy)
    with torch.no_grad():
        relpos.attention(q, k, v, enc, causal=True, impl=impl)
    assert calls == []
