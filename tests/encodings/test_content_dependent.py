"""Every content-dependent scheme (a ``"score"`` site: the term depends on q and/or k).

One parametrised set of checks instead of a copy per scheme: cached decoding,
left padding and low-precision inputs. Schemes are selected by capability
(``"score" in acts_on``), so a new content-dependent scheme is covered with no edit.
"""

from __future__ import annotations

import pytest
import torch

import relpos
from relpos.encodings import scheme_names
from tests.helpers import build

H, D = 3, 8
CONTENT = [n for n in scheme_names() if "score" in relpos.make_encoding(n, n_heads=2, head_dim=8).acts_on]
IMPLS = ["dense", "chunked"]


def test_selection_covers_the_known_content_schemes():
    assert {"deberta", "cope", "fox", "shaw", "transformer-xl"} <= set(CONTENT)


def _qkv(B, Nq, Nk, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, n, D, generator=g, dtype=dtype) for n in (Nq, Nk, Nk))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", CONTENT)
def test_cached_decoding_rows_equal_full_pass(name, impl):
    enc = build(name, n_heads=H, head_dim=D, causal=True)
    q, k, v = _qkv(2, 15, 15, seed=5)
    full = relpos.attention(q, k, v, enc, causal=True, impl=impl)
    for start in (1, 8, 14):
        part = relpos.attention(q[:, :, start:], k, v, enc, causal=True, q_offset=start, impl=impl)
        torch.testing.assert_close(part, full[:, :, start:], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", CONTENT)
def test_left_padding_changes_nothing_for_real_tokens(name, impl):
    enc = build(name, n_heads=H, head_dim=D, causal=True)
    q, k, v = _qkv(1, 6, 6, seed=8)
    pad = _qkv(1, 3, 3, seed=9)
    qp, kp, vp = (torch.cat([p_, t], dim=2) for p_, t in zip(pad, (q, k, v)))
    kpm = torch.tensor([[False] * 3 + [True] * 6])
    padded = relpos.attention(qp, kp, vp, enc, causal=True, key_padding_mask=kpm, impl=impl)
    plain = relpos.attention(q, k, v, enc, causal=True, impl=impl)
    torch.testing.assert_close(padded[:, :, 3:], plain, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("name", CONTENT)
def test_low_precision_inputs(name, impl):
    causal = True
    enc = build(name, n_heads=H, head_dim=D, causal=causal)
    q, k, v = _qkv(2, 7, 7, seed=3, dtype=torch.bfloat16)
    out = relpos.attention(q, k, v, enc, causal=causal, impl=impl)
    ref = relpos.attention(q, k, v, enc, causal=causal, impl="reference")
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref.float(), atol=3e-2, rtol=3e-2)
