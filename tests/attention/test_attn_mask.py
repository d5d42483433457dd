"""``attn_mask`` (bool, True = attend) in every implementation, against the float64 reference.

Issue 48 item 7: outputs and gradients (q, k, v and the scheme's parameters) for every scheme,
causal and bidirectional, a per-head and a broadcast mask, combined with ``key_mask`` and
``q_offset``, grouped-query heads, a block-diagonal (packed documents) mask, a fully masked row
(zeros, never NaN) and the one-line errors for a bad mask.
"""

from __future__ import annotations

import pytest
import torch

import relpos
from relpos.attention import chunked
from tests.attention.test_against_reference import FAST_IMPLS, SCHEMES, _compare, _inputs
from tests.helpers import build


def _mask(B, H, Nq, Nk, seed=1):
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(B, H, Nq, Nk, generator=g) > 0.35
    m[0, 0, 1] = False  # a fully masked row
    return m


@pytest.mark.parametrize("impl", FAST_IMPLS)
@pytest.mark.parametrize("name", SCHEMES)
def test_attn_mask_matches_reference(impl, name, monkeypatch):
    monkeypatch.setattr(chunked, "FORCE_ROWS", 3)  # several blocks in the chunked engine
    for causal in (True, False):
        enc = build(name, n_heads=2, causal=causal)
        if enc.causal_only and not causal:
            continue
        q, k, v = _inputs(2, 2, 7, 7, 8, seed=3)
        _compare(impl, enc, q, k, v, causal=causal, attn_mask=_mask(2, 2, 7, 7))  # per batch and head
        _compare(impl, enc, q, k, v, causal=causal, attn_mask=_mask(1, 1, 7, 7)[0, 0])  # (Nq, Nk), broadcast


@pytest.mark.parametrize("impl", FAST_IMPLS)
@pytest.mark.parametrize("name", ["alibi", "t5", "rope", "transformer-xl", "shaw-kv", "cope"])
def test_attn_mask_with_key_mask_offset_and_gqa(impl, name, monkeypatch):
    monkeypatch.setattr(chunked, "FORCE_ROWS", 2)
    enc = build(name, n_heads=4, causal=True)
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 4, 3, 8, generator=g, requires_grad=True)
    k = torch.randn(2, 2, 8, 8, generator=g, requires_grad=True)  # 2 key/value heads for 4 query heads
    v = torch.randn(2, 2, 8, 8, generator=g, requires_grad=True)
    key_mask = torch.ones(2, 8, dtype=torch.bool)
    key_mask[1, :2] = False  # left padding
    _compare(impl, enc, q, k, v, causal=True, q_offset=5, key_mask=key_mask, attn_mask=_mask(2, 4, 3, 8))
    _compare(impl, enc, q, k, v, causal=True, q_offset=5, key_mask=key_mask, attn_mask=_mask(1, 4, 3, 8))


def test_block_diagonal_mask_keeps_packed_documents_apart():
    """Two documents packed in one row, with positions restarting: each attends as if alone."""
    enc = build("alibi", n_heads=2, causal=True)
    q, k, v = (t.detach() for t in _inputs(1, 2, 9, 9, 8, seed=7))
    doc = torch.tensor([0] * 4 + [1] * 5)
    block = (doc[:, None] == doc[None, :])  # (Nq, Nk)
    pos = torch.cat([torch.arange(4), torch.arange(5)])
    for impl in ["dense", "chunked", "auto"]:
        packed = relpos.attention(q, k, v, enc, causal=True, attn_mask=block, positions=pos, impl=impl)
        first = relpos.attention(q[:, :, :4], k[:, :, :4], v[:, :, :4], enc, causal=True, impl=impl)
        second = relpos.attention(q[:, :, 4:], k[:, :, 4:], v[:, :, 4:], enc, causal=True, impl=impl)
        torch.testing.assert_close(packed, torch.cat([first, second], 2), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("impl", ["reference"] + FAST_IMPLS)
def test_all_false_mask_gives_zeros_and_finite_grads(impl):
    enc = build("t5", n_heads=2, causal=False)
    q, k, v = _inputs(1, 2, 4, 4, 8)
    m = torch.zeros(1, 1, 4, 4, dtype=torch.bool)
    m[..., 2, :] = True
    ctx = torch.no_grad() if impl == "flex" else torch.enable_grad()
    with ctx:
        out = relpos.attention(q, k, v, enc, causal=False, attn_mask=m, impl=impl)
    assert torch.isfinite(out).all()
    assert out[:, :, [0, 1, 3]].abs().max() == 0 and out[:, :, 2].abs().max() > 0
    if impl != "flex":
        out.sum().backward()
        assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_logits_and_layer_probabilities_apply_attn_mask():
    enc = build("alibi", n_heads=2, causal=False)
    q, k, _ = (t.detach() for t in _inputs(1, 2, 4, 4, 8))
    m = _mask(1, 2, 4, 4)
    z = relpos.attention.logits(q, k, enc, causal=False, attn_mask=m)
    assert torch.isinf(z[~m]).all() and torch.isfinite(z[m]).all()
    attn = relpos.nn.RelativeSelfAttention(16, 2, enc, causal=False)
    p = attn.probabilities(q, k, attn_mask=m)
    assert (p[~m] == 0).all() and (p[0, 0, 1] == 0).all()
    torch.testing.assert_close(p.sum(-1)[m.any(-1)], torch.ones(int(m.any(-1).sum())))


@pytest.mark.parametrize("bad, err, text", [
    (torch.ones(1, 1, 4, 4), TypeError, "attn_mask must be a bool tensor"),
    (torch.ones(1, 1, 4, 5, dtype=torch.bool), ValueError, r"attn_mask must have shape \(B or 1, H or 1, Nq, Nk\)"),
    (torch.ones(3, 1, 4, 4, dtype=torch.bool), ValueError, "B=2"),
    (torch.ones(1, 3, 4, 4, dtype=torch.bool), ValueError, "H=2"),
    (torch.ones(4, dtype=torch.bool), ValueError, "attn_mask must have shape"),
    ("yes", TypeError, "attn_mask must be a bool tensor"),
])
def test_bad_attn_mask_is_refused_in_one_line(bad, err, text):
    q = torch.randn(2, 2, 4, 8)
    with pytest.raises(err, match=text) as e:
        relpos.attention(q, q, q, None, causal=True, attn_mask=bad)
    assert "\n" not in str(e.value)


def test_layer_attn_mask_with_cache_matches_full_pass():
    torch.manual_seed(0)
    attn = relpos.nn.RelativeSelfAttention(16, 4, "t5", n_kv_heads=2, causal=True)
    x = torch.randn(1, 6, 16)
    m = torch.tril(torch.ones(6, 6, dtype=torch.bool))
    m[4:, :2] = False  # the last two tokens do not see the first two
    with torch.no_grad():
        full = attn(x, attn_mask=m)[0]
        cache = relpos.nn.KVCache()
        attn(x[:, :4], cache=cache, attn_mask=m[:4, :4])
        step = attn(x[:, 4:], cache=cache, attn_mask=m[4:, :6])[0]
    torch.testing.assert_close(step, full[:, 4:], atol=1e-5, rtol=1e-5)
    assert (full[:, 4:] - attn(x)[0][:, 4:]).abs().max() > 1e-3  # the mask changed them
