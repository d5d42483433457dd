"""A refused step leaves ``relpos.nn.KVCache`` exactly as it was (issue 47, item 9), and an empty
batch is refused in one line (issue 47, minor).

Before the fix the layer appended the step's keys to the cache and *then* attended: a step refused
for NaN input left the cache one token longer (7 instead of 6) and every later step was refused (the
NaN keys stayed); a step refused for an out-of-range position left its tokens behind, so retrying
it failed too.
"""

from __future__ import annotations

import pytest
import torch

import relpos
from relpos.attention import NonFiniteError


def _layer(scheme: str = "alibi") -> relpos.nn.RelativeSelfAttention:
    torch.manual_seed(0)
    return relpos.nn.RelativeSelfAttention(16, 4, scheme, n_kv_heads=2, causal=True)


def _snapshot(cache: relpos.nn.KVCache) -> tuple:
    return tuple(None if t is None else t.clone() for t in (cache.keys, cache.values, cache.positions, cache.padding))


def _assert_unchanged(cache: relpos.nn.KVCache, snap: tuple) -> None:
    now = (cache.keys, cache.values, cache.positions, cache.padding)
    for a, b in zip(now, snap):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.equal(a, b)


def _prefill(attn, cache, x, **kw):
    with torch.no_grad():
        return attn(x, cache=cache, **kw)[0]


@pytest.mark.parametrize("impl", ["dense", "chunked", "reference"])
def test_nan_step_leaves_cache_and_later_steps_work(impl):
    attn = _layer()
    attn.impl = impl
    x = torch.randn(1, 7, 16)
    cache = relpos.nn.KVCache()
    _prefill(attn, cache, x[:, :6])
    snap = _snapshot(cache)
    bad = x[:, 6:7].clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(NonFiniteError):
        _prefill(attn, cache, bad)
    assert cache.length == 6
    _assert_unchanged(cache, snap)
    y_step = _prefill(attn, cache, x[:, 6:7])  # the next (good) step is served and exact
    assert cache.length == 7
    with torch.no_grad():
        y_full = attn(x)[0][:, 6:7]
    torch.testing.assert_close(y_step, y_full, atol=1e-5, rtol=1e-5)


def test_out_of_range_position_step_can_be_retried():
    attn = _layer()
    x = torch.randn(1, 7, 16)
    cache = relpos.nn.KVCache()
    _prefill(attn, cache, x[:, :6], positions=torch.arange(6))
    snap = _snapshot(cache)
    with pytest.raises(ValueError, match="positions must be in"):
        _prefill(attn, cache, x[:, 6:7], positions=torch.tensor([2**40]))
    _assert_unchanged(cache, snap)
    y = _prefill(attn, cache, x[:, 6:7], positions=torch.tensor([6]))  # the retry is served
    with torch.no_grad():
        ref = attn(x, positions=torch.arange(7))[0][:, 6:7]
    torch.testing.assert_close(y, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case", ["max_len", "batch", "key_mask_shape", "key_mask_dtype", "attn_mask_shape",
                                  "positions_shape", "dropout_reference"])
def test_every_refusal_leaves_cache_unchanged(case):
    attn = _layer()
    cache = relpos.nn.KVCache(max_len=7)
    x = torch.randn(2, 6, 16)
    _prefill(attn, cache, x, key_mask=torch.ones(2, 6, dtype=torch.bool))
    snap = _snapshot(cache)
    new = torch.randn(2, 1, 16)
    kw: dict = {}
    if case == "max_len":
        new = torch.randn(2, 2, 16)
    elif case == "batch":
        new = torch.randn(3, 1, 16)
    elif case == "key_mask_shape":
        kw["key_mask"] = torch.ones(2, 7, dtype=torch.bool)
    elif case == "key_mask_dtype":
        kw["key_mask"] = torch.ones(2, 1)
    elif case == "attn_mask_shape":
        kw["attn_mask"] = torch.ones(2, 4, 1, 6, dtype=torch.bool)  # keys must be the 7 after the step
    elif case == "positions_shape":
        kw["positions"] = torch.arange(3)
    elif case == "dropout_reference":
        attn = relpos.nn.RelativeSelfAttention(16, 4, attn.encoding, n_kv_heads=2, causal=True, impl="reference",
                                               dropout_p=0.1)
        attn.load_state_dict(_layer().state_dict())
        attn.train()
    with pytest.raises((ValueError, TypeError)) as e:
        _prefill(attn, cache, new, **kw)
    assert "\n" not in str(e.value)
    _assert_unchanged(cache, snap)
    assert cache.length == 6


def test_empty_batch_is_refused_in_one_line():
    attn = _layer()
    with pytest.raises(ValueError, match="at least one batch row") as e:
        attn(torch.randn(0, 5, 16))
    assert "\n" not in str(e.value)
    q = torch.randn(0, 4, 5, 4)
    with pytest.raises(ValueError, match=r"B >= 1"):
        relpos.attention(q, q, q, None, causal=True)
