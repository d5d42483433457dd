"""Attention dropout (``dropout_p``) in ``relpos.attention`` and the layer (issue 48, item 7).

Served by ``dense`` (and ``auto``, which picks it); refused by name by the float64 reference,
``chunked`` and ``flex``. Checked: ``dropout_p=0`` is exactly no dropout; each attention weight is
either dropped or scaled by ``1 / (1 - p)`` and about ``p`` of them are dropped; the mean over many
draws is the undropped output; a seed fixes the draw; gradients are those of the drawn weights;
a fully masked row stays zeros; the layer drops only in training mode.
"""

from __future__ import annotations

import math

import pytest
import torch

import relpos
from relpos.attention import UnsupportedError
from relpos.attention import auto as auto_mod
from tests.helpers import build

# paths through dense: no term (fused SDPA), a term without gradient (SDPA + float mask), a learned
# term (explicit probabilities), a value term (Shaw's value table), grouped heads
CASES = [("nope", 1), ("alibi", 1), ("t5", 1), ("shaw-kv", 1), ("transformer-xl", 1), ("t5", 2), ("nope", 2)]


def _qkv(B, H, Hkv, N, D, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, N, D, generator=g, dtype=dtype), torch.randn(B, Hkv, N, D, generator=g, dtype=dtype),
            torch.randn(B, Hkv, N, D, generator=g, dtype=dtype))


@pytest.mark.parametrize("impl", ["reference", "dense", "chunked", "flex", "auto"])
def test_dropout_zero_is_exactly_no_dropout(impl):
    enc = build("alibi", n_heads=2, causal=True)
    q, k, v = _qkv(2, 2, 2, 6, 8)
    with torch.no_grad():
        a = relpos.attention(q, k, v, enc, causal=True, impl=impl)
        b = relpos.attention(q, k, v, enc, causal=True, impl=impl, dropout_p=0.0)
    assert torch.equal(a, b)


@pytest.mark.parametrize("impl, text", [
    ("reference", "float64 reference is deterministic"),
    ("chunked", "not served by the chunked engines"),
    ("flex", "FlexAttention has no attention dropout"),
])
def test_dropout_refused_by_name(impl, text):
    enc = build("alibi", n_heads=2, causal=True)
    q, k, v = _qkv(1, 2, 2, 5, 8)
    with torch.no_grad(), pytest.raises(UnsupportedError, match=text) as e:
        relpos.attention(q, k, v, enc, causal=True, impl=impl, dropout_p=0.1)
    assert "\n" not in str(e.value) and "dropout_p" in str(e.value)


def test_auto_picks_dense_for_dropout_and_refuses_it_where_dense_is_too_large(monkeypatch):
    enc = build("fire", n_heads=2, causal=True)
    q, k, v = _qkv(1, 2, 2, 6, 8)
    relpos.attention(q, k, v, enc, causal=True, impl="auto", dropout_p=0.2)
    assert auto_mod.last_choice == "dense"
    monkeypatch.setattr(auto_mod, "DENSE_MAX_BYTES", 16)
    with pytest.raises(UnsupportedError, match="DENSE_MAX_BYTES"):
        relpos.attention(q, k, v, enc, causal=True, impl="auto", dropout_p=0.2)


@pytest.mark.parametrize("bad", [1.0, -0.1, float("nan"), True, "0.1", None])
def test_bad_dropout_p_is_refused_in_one_line(bad):
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match=r"dropout_p must be a number in \[0, 1\)"):
        relpos.attention(q, q, q, None, causal=True, dropout_p=bad)
    with pytest.raises(ValueError, match=r"dropout_p must be a number in \[0, 1\)"):
        relpos.nn.RelativeSelfAttention(16, 2, "alibi", causal=True, dropout_p=bad)


@pytest.mark.parametrize("name, G", [c for c in CASES if c[0] != "shaw-kv"])  # a value term adds value(p)
def test_each_weight_is_dropped_or_scaled(name, G):
    """With ``v`` the identity (``Dv = Nk``), the output *is* the dropped weight matrix."""
    p = 0.3
    H, N, B = 2 * G, 8, 64
    enc = build(name, n_heads=H, causal=True, head_dim=N)
    q, k, _ = _qkv(B, H, H // G, N, N)
    v = torch.eye(N).expand(B, H // G, N, N)
    with torch.no_grad():
        full = relpos.attention(q, k, v, enc, causal=True, impl="dense")
        torch.manual_seed(0)
        drop = relpos.attention(q, k, v, enc, causal=True, impl="dense", dropout_p=p)
    kept = drop != 0
    pos = full > 1e-6
    torch.testing.assert_close(drop[kept & pos], full[kept & pos] / (1 - p), atol=1e-5, rtol=1e-4)
    frac = 1 - (kept & pos).sum() / pos.sum()
    n = int(pos.sum())
    assert abs(float(frac) - p) < 4 * math.sqrt(p * (1 - p) / n), (float(frac), n)


@pytest.mark.parametrize("name, G", CASES)
def test_mean_over_draws_is_the_undropped_output(name, G):
    H, N, B = 2 * G, 6, 1500
    enc = build(name, n_heads=H, causal=True)
    q, k, v = _qkv(1, H, H // G, N, 8, seed=2)
    qb, kb, vb = (t.expand(B, *t.shape[1:]) for t in (q, k, v))
    with torch.no_grad():
        ref = relpos.attention(q, k, v, enc, causal=True, impl="reference")
        torch.manual_seed(1)
        drop = relpos.attention(qb, kb, vb, enc, causal=True, impl="dense", dropout_p=0.25)
    assert (drop - ref).abs().max() > 0.05  # the draws do differ from the mean
    torch.testing.assert_close(drop.mean(0, keepdim=True), ref, atol=0.08, rtol=0)


@pytest.mark.parametrize("impl", ["dense", "auto"])
def test_a_seed_fixes_the_draw(impl):
    enc = build("t5", n_heads=2, causal=True)
    q, k, v = _qkv(2, 2, 2, 6, 8)

    def once(seed):
        torch.manual_seed(seed)
        return relpos.attention(q, k, v, enc, causal=True, impl=impl, dropout_p=0.5)

    assert torch.equal(once(3), once(3))
    assert not torch.equal(once(3), once(4))


@pytest.mark.parametrize("name, G", CASES)
def test_gradients_are_those_of_the_drawn_weights(name, G):
    """A fixed seed makes dropout a fixed function; its gradients pass ``gradcheck`` (float64)."""
    H = 2 * G
    enc = build(name, n_heads=H, causal=True).double()
    q, k, v = (t.requires_grad_(True) for t in _qkv(1, H, H // G, 4, 8, dtype=torch.float64))

    def f(q, k, v):
        torch.manual_seed(0)
        return relpos.attention(q, k, v, enc, causal=True, impl="dense", dropout_p=0.4)

    assert torch.autograd.gradcheck(f, (q, k, v), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("name", ["nope", "alibi", "t5", "shaw-kv"])
def test_fully_masked_row_gives_zeros_with_dropout(name):
    enc = build(name, n_heads=2, causal=False)
    q, k, v = (t.requires_grad_(True) for t in _qkv(2, 2, 2, 5, 8))
    key_mask = torch.ones(2, 5, dtype=torch.bool)
    key_mask[1] = False  # batch row 1: no key at all
    attn_mask = torch.ones(1, 1, 5, 5, dtype=torch.bool)
    attn_mask[..., 2, :] = False  # query 2: no key
    torch.manual_seed(0)
    out = relpos.attention(q, k, v, enc, causal=False, impl="dense", dropout_p=0.3, key_mask=key_mask,
                           attn_mask=attn_mask)
    assert torch.isfinite(out).all()
    assert out[1].abs().max() == 0 and out[:, :, 2].abs().max() == 0 and out[0, :, 0].abs().max() > 0
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_layer_drops_only_in_training_mode():
    torch.manual_seed(0)
    attn = relpos.nn.RelativeSelfAttention(16, 4, "t5", n_kv_heads=2, causal=True, dropout_p=0.3)
    plain = relpos.nn.RelativeSelfAttention(16, 4, attn.encoding, n_kv_heads=2, causal=True)
    plain.load_state_dict(attn.state_dict())
    x = torch.randn(2, 6, 16)
    attn.eval()
    assert torch.equal(attn(x)[0], plain(x)[0])  # eval: no dropout
    attn.train()
    torch.manual_seed(5)
    a = attn(x)[0]
    torch.manual_seed(5)
    assert torch.equal(a, attn(x)[0])
    assert (a - plain(x)[0]).abs().max() > 1e-3
    assert "dropout_p=0.3" in repr(attn)
    layers = relpos.nn.RelativeSelfAttention.stack(2, 16, 4, "t5", causal=True, dropout_p=0.2)
    assert all(layer.dropout_p == 0.2 for layer in layers)


def test_layer_with_an_impl_without_dropout_refuses_in_training_only():
    attn = relpos.nn.RelativeSelfAttention(16, 4, "alibi", causal=True, impl="chunked", dropout_p=0.1)
    x = torch.randn(1, 5, 16)
    with pytest.raises(UnsupportedError, match="dropout_p"):
        attn(x)
    attn.eval()
    assert attn(x)[0].shape == (1, 5, 16)
