"""relpos.nn: decoding with KVCache equals a full forward pass, for every scheme (issue 32).

With grouped-query attention (n_kv_heads < n_heads) and padding (left and right).
"""

from __future__ import annotations

import pytest
import torch

import relpos
from relpos.nn import KVCache, RelativeSelfAttention
from tests.helpers import attention_schemes, randomize_parameters

SCHEMES = attention_schemes()


def _layer(name, *, n_kv_heads=2, impl="auto", seed=0):
    torch.manual_seed(seed)
    layer = RelativeSelfAttention(32, 4, name, n_kv_heads=n_kv_heads, causal=True, impl=impl, bias=True)
    if layer.encoding is not None:
        randomize_parameters(layer.encoding, seed=seed)
    return layer.double()


def _inputs(B=3, N=9, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, 32, generator=g, dtype=torch.float64)
    pad = torch.ones(B, N, dtype=torch.bool)
    pad[1, :3] = False  # left padding
    pad[-1, -2:] = False  # right padding
    return x, pad


@pytest.mark.parametrize("name", SCHEMES)
@pytest.mark.parametrize("chunks", [[1] * 9, [4, 1, 3, 1]])
def test_cached_decoding_equals_full_forward(name, chunks):
    layer = _layer(name)
    x, pad = _inputs()
    with torch.no_grad():
        full, none = layer(x, padding_mask=pad)
        assert none is None
        cache, outs, t = KVCache(), [], 0
        for n in chunks:
            y, cache = layer(x[:, t:t + n], cache=cache, padding_mask=pad[:, t:t + n])
            outs.append(y)
            t += n
    assert cache.length == 9
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-6, rtol=1e-5)  # dense forms value-side softmax in float32


@pytest.mark.parametrize("name", ["rope", "alibi", "t5", "fire", "cope", "fox", "transformer-xl"])
def test_cached_decoding_with_explicit_positions(name):
    layer = _layer(name, n_kv_heads=1)
    x, pad = _inputs(B=2, N=6)
    pos = torch.tensor([[0, 2, 3, 7, 8, 11], [1, 2, 4, 5, 9, 10]])
    with torch.no_grad():
        full, _ = layer(x, positions=pos, padding_mask=pad)
        cache, outs = KVCache(), []
        for t in range(6):
            y, cache = layer(x[:, t:t + 1], cache=cache, positions=pos[:, t:t + 1], padding_mask=pad[:, t:t + 1])
            outs.append(y)
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-6, rtol=1e-5)  # dense forms value-side softmax in float32


def test_crop_and_reorder():
    layer = _layer("alibi")
    x, _ = _inputs(B=2, N=6)
    with torch.no_grad():
        cache = KVCache()
        layer(x[:, :5], cache=cache)
        cache.crop(3)  # roll back two tokens
        y, cache = layer(x[:, 3:6], cache=cache)
        torch.testing.assert_close(y, layer(x)[0][:, 3:6])
        cache.reorder(torch.tensor([1, 1, 0]))  # beam search: keep beam 1 twice, then beam 0
        xb = x[[1, 1, 0]]
        extra = torch.randn(3, 1, 32, dtype=torch.float64)
        y, cache = layer(extra, cache=cache)
        torch.testing.assert_close(y, layer(torch.cat([xb, extra], 1))[0][:, -1:])
        cache.reset()
        assert cache.length == 0 and cache.keys is None


def test_cache_refusals():
    layer = _layer("rope")
    x, _ = _inputs(B=2, N=4)
    cache = KVCache(max_len=5)
    layer(x, cache=cache)
    with pytest.raises(ValueError, match="max_len=5"):
        layer(x[:, :2], cache=cache)
    with pytest.raises(ValueError, match="one KVCache per layer and batch"):
        layer(x[:1, :1], cache=cache)
    with pytest.raises(ValueError, match="n must be in"):
        cache.crop(9)
    with pytest.raises(ValueError, match="batch rows"):
        cache.reorder(torch.tensor([2]))
    enc_layer = RelativeSelfAttention(32, 4, "alibi", causal=False)
    with pytest.raises(ValueError, match="causal=True"):
        enc_layer(x.float(), cache=KVCache())


def test_layer_arguments_are_checked():
    with pytest.raises(TypeError, match="'causal'"):
        RelativeSelfAttention(32, 4, "alibi")
    with pytest.raises(ValueError, match="n_kv_heads \\(3\\) must divide n_heads \\(4\\)"):
        RelativeSelfAttention(32, 4, "alibi", n_kv_heads=3, causal=True)
    with pytest.raises(ValueError, match="token embeddings"):
        RelativeSelfAttention(32, 4, "sinusoidal", causal=True)
    with pytest.raises(TypeError, match="need a scheme given by name"):
        RelativeSelfAttention(32, 4, None, causal=True, num_buckets=8)
    with pytest.raises(TypeError, match="unknown option"):
        RelativeSelfAttention(32, 4, "t5", causal=True, buckets=8)


def test_gqa_layer_has_fewer_kv_parameters_and_matches_repeated_heads():
    torch.manual_seed(0)
    gqa = RelativeSelfAttention(32, 4, "t5", n_kv_heads=1, causal=True)
    assert gqa.qkv.weight.shape == ((4 + 2) * 8, 32)
    full = RelativeSelfAttention(32, 4, gqa.encoding, causal=True)
    with torch.no_grad():  # the same layer with the key/value head repeated 4 times
        wq, wk, wv = gqa.qkv.weight.split([32, 8, 8])
        full.qkv.weight.copy_(torch.cat([wq, wk.repeat(4, 1), wv.repeat(4, 1)]))
        full.proj.weight.copy_(gqa.proj.weight)
    x = torch.randn(2, 7, 32)
    torch.testing.assert_close(gqa(x)[0], full(x)[0], atol=1e-5, rtol=1e-5)


def test_stack_shares_t5_and_not_alibi():
    t5 = RelativeSelfAttention.stack(3, 32, 4, "t5", causal=True, n_kv_heads=2)
    assert t5[0].encoding is t5[2].encoding and t5[1].n_kv_heads == 2
    params = {id(p) for p in t5.parameters()}
    assert len(params) == 3 * 2 + 1  # qkv, proj per layer + one table
    fire = RelativeSelfAttention.stack(2, 32, 4, "fire", causal=True)
    assert fire[0].encoding is not fire[1].encoding
    shared = RelativeSelfAttention.stack(2, 32, 4, "fire", causal=True, share=True)
    assert shared[0].encoding is shared[1].encoding
    assert isinstance(relpos.nn.KVCache(), KVCache)


@pytest.mark.parametrize("impl", ["dense", "chunked"])
@pytest.mark.parametrize("name", SCHEMES)
def test_cached_decoding_per_implementation(name, impl):
    """The same equality through each fast implementation (GQA, left and right padding)."""
    layer = _layer(name, impl=impl)
    x, pad = _inputs()
    with torch.no_grad():
        full, _ = layer(x, padding_mask=pad)
        cache, outs, t = KVCache(), [], 0
        for n in [3, 1, 4, 1]:
            y, cache = layer(x[:, t:t + n], cache=cache, padding_mask=pad[:, t:t + n])
            outs.append(y)
            t += n
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-6, rtol=1e-5)
