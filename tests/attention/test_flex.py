"""impl="flex": every score_mod against the reference.

PyTorch has no FlexAttention backward on CPU, so on CPU the checks run in
inference mode (uncompiled flex_attention) and requests that need gradients
must raise UnsupportedError. The GPU test (compiled, with gradients) is skipped
when no CUDA device is present.
"""

from __future__ import annotations

import importlib

import pytest
import torch

import relpos
from relpos.attention import UnsupportedError
from tests.helpers import attention_schemes, build

flex = importlib.import_module("relpos.attention.flex")
pytestmark = pytest.mark.skipif(not flex.available(), reason="this PyTorch has no FlexAttention")

SCHEMES = [s for s in attention_schemes() if s != "shaw-kv"]


def _qkv(B, H, Nq, Nk, D, seed=0, device="cpu", grad=False):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, n, D, generator=g).to(device).requires_grad_(grad) for n in (Nq, Nk, Nk))


def _close(enc, q, k, v, **kw):
    with torch.no_grad():
        out = relpos.attention(q, k, v, enc, impl="flex", **kw)
        ref = relpos.attention(q, k, v, enc, impl="reference", **kw)
    torch.testing.assert_close(out, ref, atol=2e-4, rtol=1e-3)


@pytest.mark.parametrize("name", SCHEMES)
def test_inference_matches_reference(name):
    for causal in (True, False):
        enc = build(name, n_heads=3, causal=causal)
        if enc.causal_only and not causal:
            continue
        _close(enc, *_qkv(2, 3, 9, 9, 8), causal=causal)


@pytest.mark.parametrize("name", SCHEMES)
def test_inference_offset_padding_positions(name):
    enc = build(name, n_heads=2, causal=True)
    q, k, v = _qkv(2, 2, 4, 11, 8, seed=1)
    kpm = torch.ones(2, 11, dtype=torch.bool)
    kpm[1, :3] = False
    _close(enc, q, k, v, causal=True, q_offset=7, key_padding_mask=kpm)
    q, k, v = _qkv(2, 2, 6, 6, 8, seed=2)
    _close(enc, q, k, v, causal=True, positions=torch.tensor([[0, 3, 4, 9, 12, 20], [1, 2, 5, 6, 7, 30]]))


def test_fully_masked_rows_are_zero():
    enc = build("t5", n_heads=2, causal=True)
    q, k, v = _qkv(2, 2, 5, 5, 8, seed=3)
    kpm = torch.ones(2, 5, dtype=torch.bool)
    kpm[0] = False
    kpm[1, :2] = False  # causal rows 0, 1 of batch 1 see no key either
    with torch.no_grad():
        out = relpos.attention(q, k, v, enc, causal=True, key_padding_mask=kpm, impl="flex")
        ref = relpos.attention(q, k, v, enc, causal=True, key_padding_mask=kpm, impl="reference")
    assert torch.isfinite(out).all()
    assert out[0].abs().max() == 0 and out[1, :, :2].abs().max() == 0
    torch.testing.assert_close(out, ref, atol=2e-4, rtol=1e-3)


def test_cpu_training_is_unsupported_not_silent():
    enc = build("alibi", n_heads=2, causal=True)
    q, k, v = _qkv(1, 2, 5, 5, 8, grad=True)
    with pytest.raises(UnsupportedError, match="no FlexAttention backward on CPU"):
        relpos.attention(q, k, v, enc, causal=True, impl="flex")
    # learned parameters alone also need a backward
    t5 = build("t5", n_heads=2, causal=True)
    q, k, v = _qkv(1, 2, 5, 5, 8)
    with pytest.raises(UnsupportedError):
        relpos.attention(q, k, v, t5, causal=True, impl="flex")


def test_value_terms_are_unsupported():
    enc = build("shaw-kv", n_heads=2, causal=True)
    q, k, v = _qkv(1, 2, 5, 5, 8)
    with torch.no_grad(), pytest.raises(UnsupportedError, match="score_mod"):
        relpos.attention(q, k, v, enc, causal=True, impl="flex")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["alibi", "t5", "shaw", "rope", "kerple-log"])
def test_gpu_compiled_with_gradients(name):  # pragma: no cover - no GPU in CI
    enc = build(name, n_heads=2, causal=True).cuda()
    q, k, v = _qkv(1, 2, 128, 128, 16, device="cuda", grad=True)
    out = relpos.attention(q, k, v, enc, causal=True, impl="flex")
    ref = relpos.attention(q, k, v, enc, causal=True, impl="reference")
    torch.testing.assert_close(out, ref.to(out.dtype), atol=2e-3, rtol=2e-3)
    params = [p for p in enc.parameters() if p.requires_grad]
    g = torch.autograd.grad(out.sum(), [q, k, v, *params])
    rg = torch.autograd.grad(ref.sum(), [q, k, v, *params])
    for a, b in zip(g, rg):
        torch.testing.assert_close(a, b.to(a.dtype), atol=5e-3, rtol=5e-3)


def test_causal_block_mask_is_built_once_per_shape_and_offset(monkeypatch):
    """The causal mask is cached by (Nq, Nk, q_offset, device); padding masks are built every call."""
    import torch.nn.attention.flex_attention as fa

    built = []
    real = fa.create_block_mask
    monkeypatch.setattr(fa, "create_block_mask", lambda *a, **kw: built.append(a[3:5]) or real(*a, **kw))
    monkeypatch.setattr(flex, "_CAUSAL_MASKS", {})
    enc = build("alibi")
    q, k, v = _qkv(1, 3, 6, 6, 8)
    for _ in range(3):
        _close(enc, q, k, v, causal=True)
    assert len(built) == 1
    _close(enc, q[:, :, :2], k, v, causal=True, q_offset=4)  # another shape and offset: its own mask
    assert len(built) == 2
    pad = torch.tensor([[True, True, False, True, True, True]])
    for _ in range(2):
        _close(enc, q, k, v, causal=True, key_padding_mask=pad)
    assert len(built) == 4
    assert len(flex._CAUSAL_MASKS) == 2
