"""Public ``relpos.attention.logits`` and ``relpos.attention.request``."""

from __future__ import annotations

import pytest
import torch

import relpos
from relpos.attention import Request, logits, request
from relpos.attention.reference import masked_softmax
from tests.helpers import attention_schemes, build


@pytest.mark.parametrize("name", attention_schemes())
def test_softmax_of_logits_is_the_attention(name):
    enc = build(name, n_heads=2, causal=True)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, n, 8, generator=g, dtype=torch.float64) for n in (4, 9, 9))
    kpm = torch.ones(2, 9, dtype=torch.bool)
    kpm[1, :2] = False
    kw = dict(causal=True, q_offset=5, key_padding_mask=kpm)
    lg = logits(q, k, enc, **kw)
    assert lg.shape == (2, 2, 4, 9) and lg.dtype == torch.float64
    assert torch.isinf(lg[1, :, :, :2]).all() and torch.isinf(lg[0, :, 0, 6:]).all()  # padding, future
    p = masked_softmax(lg, torch.isfinite(lg))
    out = p @ v
    if "value" in enc.acts_on:
        out = out + enc.value(p, torch.arange(5, 9)[None], torch.arange(9)[None])
    torch.testing.assert_close(out, relpos.attention(q, k, v, enc, impl="reference", **kw), atol=1e-5, rtol=1e-4)


def test_logits_are_float32_for_low_precision_and_reachable_from_relpos():
    enc = build("alibi", n_heads=2)
    q = k = torch.randn(1, 2, 5, 8, dtype=torch.bfloat16)
    lg = relpos.attention.logits(q, k, enc, causal=True)
    assert lg.dtype == torch.float32
    assert lg[0, 0, 0, 1] == float("-inf") and torch.isfinite(lg[0, 0, 4]).all()


def test_request_validates_and_fills_positions():
    enc = build("t5", n_heads=2)
    q = torch.randn(1, 2, 3, 8)
    k = torch.randn(1, 2, 7, 8)
    req = relpos.attention.request(q, k, None, enc, causal=True, q_offset=4)
    assert isinstance(req, Request) and req.contiguous and req.v is k
    assert req.qpos.tolist() == [[4, 5, 6]] and req.kpos.tolist() == [list(range(7))]
    assert req.scale == pytest.approx(8 ** -0.5)
    req = request(q, k, None, enc, causal=True, positions=torch.arange(7) * 2, q_offset=4)
    assert not req.contiguous and req.qpos.tolist() == [[8, 10, 12]]
    with pytest.raises(ValueError, match="q_offset"):
        request(q, k, None, enc, causal=True, q_offset=5)
