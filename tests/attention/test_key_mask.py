"""``key_mask`` (True = attend) and its deprecated alias ``key_padding_mask`` (issue 48, item 6).

relpos's ``key_padding_mask`` meant True = a real key, the opposite of
``torch.nn.MultiheadAttention``'s argument of the same name (True = ignore): an inverted mask was
accepted without a word. The new name cannot be confused; the old one still works, warns once per
process, and may not be given together with the new one.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import relpos
from relpos.attention import masks
from tests.helpers import build


@pytest.fixture
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(masks, "_WARNED", set())


def _qkv(B=2, H=2, N=5, D=8):
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(B, H, N, D, generator=g) for _ in range(3))


def _real():
    m = torch.ones(2, 5, dtype=torch.bool)
    m[1, :2] = False
    return m


def test_alias_gives_the_same_result_and_warns_once_at_the_callers_line(fresh_warnings):
    q, k, v = _qkv()
    enc = build("alibi", n_heads=2, causal=True)
    new = relpos.attention(q, k, v, enc, causal=True, key_mask=_real())
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        old = relpos.attention(q, k, v, enc, causal=True, key_padding_mask=_real())
        relpos.attention(q, k, v, enc, causal=True, key_padding_mask=_real())
        relpos.attention.logits(q, k, enc, causal=True, key_padding_mask=_real())
    assert torch.equal(new, old)
    dep = [w for w in rec if issubclass(w.category, FutureWarning)]
    assert len(dep) == 1, [str(w.message) for w in rec]  # once per process, whatever the entry point
    assert "key_mask" in str(dep[0].message) and "MultiheadAttention" in str(dep[0].message)
    assert dep[0].filename == __file__


def test_layer_padding_mask_alias_warns_once(fresh_warnings):
    torch.manual_seed(0)
    attn = relpos.nn.RelativeSelfAttention(16, 2, "t5", causal=True)
    x = torch.randn(2, 5, 16)
    new = attn(x, key_mask=_real())[0]
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        old = attn(x, padding_mask=_real())[0]
        attn(x, padding_mask=_real())
    assert torch.equal(new, old)
    dep = [w for w in rec if issubclass(w.category, FutureWarning)]
    assert len(dep) == 1 and "padding_mask is deprecated" in str(dep[0].message)
    assert dep[0].filename == __file__  # the user's line, not torch's Module.__call__


def test_both_names_at_once_are_refused():
    q, k, v = _qkv()
    m = _real()
    with pytest.raises(TypeError, match="both key_mask and its deprecated alias key_padding_mask"):
        relpos.attention(q, k, v, None, causal=True, key_mask=m, key_padding_mask=m)
    with pytest.raises(TypeError, match="both key_mask"):
        relpos.attention.logits(q, k, None, causal=True, key_mask=m, key_padding_mask=m)
    with pytest.raises(TypeError, match="both key_mask"):
        relpos.attention.request(q, k, v, None, causal=True, key_mask=m, key_padding_mask=m)
    attn = relpos.nn.RelativeSelfAttention(16, 2, "alibi", causal=True)
    with pytest.raises(TypeError, match="both key_mask and its deprecated alias padding_mask"):
        attn(torch.randn(2, 5, 16), key_mask=m, padding_mask=m)
    with pytest.raises(TypeError, match="both key_mask"):
        attn.attend(q, k, v, key_mask=m, key_padding_mask=m)
    with pytest.raises(TypeError, match="both key_mask"):
        attn.probabilities(q, k, key_mask=m, key_padding_mask=m)


def test_key_mask_is_the_inverse_of_torch_key_padding_mask():
    """The documented conversion: relpos ``key_mask = ~key_padding_mask`` of nn.MultiheadAttention."""
    torch.manual_seed(0)
    C, H = 16, 2
    mha = torch.nn.MultiheadAttention(C, H, bias=False, batch_first=True)
    attn = relpos.nn.RelativeSelfAttention(C, H, None, causal=False)
    with torch.no_grad():
        attn.qkv.weight.copy_(mha.in_proj_weight)  # queries, keys, values: the same layout
        attn.proj.weight.copy_(mha.out_proj.weight)
    x = torch.randn(2, 5, C)
    torch_kpm = ~_real()  # torch: True = ignore this key
    ref = mha(x, x, x, key_padding_mask=torch_kpm, need_weights=False)[0]
    with torch.no_grad():
        ours = attn(x, key_mask=~torch_kpm)[0]
        wrong = attn(x, key_mask=torch_kpm)[0]  # torch's mask passed unconverted
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-5)
    assert (wrong - ref).abs().max() > 0.1


@pytest.mark.parametrize("impl", ["reference", "dense", "chunked", "auto"])
def test_key_mask_equals_the_same_attn_mask(impl):
    """``key_mask (B, Nk)`` is ``attn_mask (B, 1, 1, Nk)`` broadcast over heads and queries."""
    q, k, v = _qkv()
    enc = build("fire", n_heads=2, causal=False)
    a = relpos.attention(q, k, v, enc, causal=False, key_mask=_real(), impl=impl)
    b = relpos.attention(q, k, v, enc, causal=False, attn_mask=_real()[:, None, None, :].expand(2, 1, 5, 5),
                         impl=impl)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
