"""Properties every registered scheme promises through its flags (hypothesis, generic over the registry).

* ``relative=True``: attention output is unchanged when every position shifts by ``c``.
* ``"embedding"`` schemes (absolute): the embedding changes when positions shift.
* ``toeplitz=True``: the bias depends on ``j - i`` only.
* rotary schemes: RoPE preserves norms (up to YaRN's ``mscale``) and ``q.k`` depends only on ``i - j``.
* ALiBi's slopes are exactly the paper's.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import relpos
from relpos.encodings import scheme_names
from relpos.encodings.rope import RoPE
from relpos.encodings.xpos import XPos
from tests.helpers import build

NAMES = scheme_names()
RELATIVE = [n for n in NAMES if relpos.make_encoding(n, n_heads=2, head_dim=8).relative]
ABSOLUTE_EMB = [n for n in NAMES if "embedding" in relpos.make_encoding(n, n_heads=2, head_dim=8).acts_on]
TOEPLITZ = [n for n in NAMES if relpos.make_encoding(n, n_heads=2, head_dim=8).toeplitz]
ROTARY = [n for n in NAMES if isinstance(relpos.make_encoding(n, n_heads=2, head_dim=8), RoPE)]
PLAIN_ROTARY = [n for n in ROTARY if not isinstance(relpos.make_encoding(n, n_heads=2, head_dim=8), XPos)]


def _qkv(B, H, N, D, seed):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, N, D, generator=g, dtype=torch.float64) for _ in range(3))


def test_flag_lists_are_not_empty():
    """Guard: the generic tests below must actually cover something."""
    for lst in (RELATIVE, TOEPLITZ, PLAIN_ROTARY):
        assert lst
    assert {"rope", "alibi", "t5", "sandwich", "xpos"} <= set(RELATIVE)
    assert "fire" not in RELATIVE and "rope-dynamic" not in RELATIVE


@pytest.mark.parametrize("name", RELATIVE)
@settings(max_examples=12)
@given(c=st.integers(1, 1000), n=st.integers(1, 10), h=st.sampled_from([1, 3]), causal=st.booleans(),
       seed=st.integers(0, 2**16))
def test_relative_schemes_are_shift_invariant(name, c, n, h, causal, seed):
    enc = build(name, n_heads=h, causal=causal, max_len=64)
    if enc.causal_only:
        causal = True
        enc = build(name, n_heads=h, causal=True, max_len=64)
    enc = enc.double()
    q, k, v = _qkv(2, h, n, 8, seed)
    base = relpos.attention(q, k, v, enc, causal=causal, positions=torch.arange(n))
    shifted = relpos.attention(q, k, v, enc, causal=causal, positions=torch.arange(n) + c)
    torch.testing.assert_close(shifted, base, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ABSOLUTE_EMB)
@settings(max_examples=10)
@given(c=st.integers(1, 30), n=st.integers(1, 16), seed=st.integers(0, 2**16))
def test_absolute_embeddings_change_under_shift(name, c, n, seed):
    enc = build(name, n_heads=2, head_dim=8, max_len=64)
    assert not enc.relative
    x = torch.randn(2, n, enc_width(enc), generator=torch.Generator().manual_seed(seed))
    a = enc.embed(x, torch.arange(n)[None])
    b = enc.embed(x, torch.arange(n)[None] + c)
    assert a.shape == x.shape
    assert not torch.allclose(a, b)
    # and the embedding is a function of (token, position): the same position gives the same output
    torch.testing.assert_close(enc.embed(x, torch.arange(n)[None] + c), b)


def enc_width(enc) -> int:
    d = getattr(enc, "d_model", None)
    return int(d) if d else 16


#: (name, causal) for every Toeplitz scheme and every direction it is defined for.
TOEPLITZ_CASES = [(n, c) for n in TOEPLITZ for c in (True, False)
                  if c or not relpos.make_encoding(n, n_heads=2, head_dim=8).causal_only]


@pytest.mark.parametrize("name,causal", TOEPLITZ_CASES)
@given(c=st.integers(0, 500), qpos=st.lists(st.integers(0, 200), min_size=1, max_size=6),
       kpos=st.lists(st.integers(0, 200), min_size=1, max_size=6))
@settings(max_examples=15)
def test_toeplitz_bias_depends_on_offset_only(name, causal, c, qpos, kpos):
    enc = build(name, n_heads=3, causal=causal)
    qp, kp = torch.tensor([qpos]), torch.tensor([kpos])
    b = enc.bias(qp, kp)
    torch.testing.assert_close(enc.bias(qp + c, kp + c), b)
    torch.testing.assert_close(b[0], enc.relative_bias(kp[0][None, :] - qp[0][:, None]))


@pytest.mark.parametrize("name", PLAIN_ROTARY)
@given(pos=st.lists(st.integers(0, 5000), min_size=1, max_size=8), seed=st.integers(0, 2**16))
@settings(max_examples=15)
def test_rope_preserves_norms(name, pos, seed):
    enc = relpos.make_encoding(name, n_heads=2, head_dim=16, max_len=64)
    x = torch.randn(1, 2, len(pos), 16, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    p = torch.tensor([pos])
    y = enc.rotate(x, p, is_query=True, seq_len=max(pos) + 1)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1) * enc.mscale, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", ROTARY)
@given(i=st.integers(0, 3000), j=st.integers(0, 3000), c=st.integers(-500, 3000), seed=st.integers(0, 2**16))
@settings(max_examples=15)
def test_rotary_qk_depends_only_on_offset(name, i, j, c, seed):
    if min(i, j) + c < 0:
        c = -min(i, j)
    enc = relpos.make_encoding(name, n_heads=1, head_dim=16, max_len=64)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 1, 1, 16, generator=g, dtype=torch.float64)
    k = torch.randn(1, 1, 1, 16, generator=g, dtype=torch.float64)
    L = 4000  # one total length for both, as within one attention call

    def score(a, b):
        qa = enc.rotate(q, torch.tensor([[a]]), is_query=True, seq_len=L)
        kb = enc.rotate(k, torch.tensor([[b]]), is_query=False, seq_len=L)
        return float((qa * kb).sum())

    # rel 1e-5: the angles are float32; xPos scales can amplify their rounding (|i - j| ~ 1000)
    assert score(i + c, j + c) == pytest.approx(score(i, j), rel=1e-5, abs=1e-6)


def _alibi_paper_slopes(n: int) -> list[float]:
    """Press et al.: geometric sequence 2^(-8/n) ... for powers of two; otherwise interleave."""
    def geo(m):
        return [2.0 ** (-8.0 * (h + 1) / m) for h in range(m)]

    p = 2 ** int(math.floor(math.log2(n)))
    return geo(n) if p == n else geo(p) + geo(2 * p)[0::2][: n - p]


@given(st.integers(1, 128))
def test_alibi_slopes_exact(n):
    enc = relpos.make_encoding("alibi", n_heads=n, head_dim=8)
    torch.testing.assert_close(enc.slopes.double(), torch.tensor(_alibi_paper_slopes(n), dtype=torch.float64),
                               rtol=1e-7, atol=0)
