"""Scheme-specific tests of the T5 bias and ALiBi (the generic attention tests cover the rest)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import relpos
from relpos.distance import t5_bucket
from relpos.encodings.alibi import ALiBi
from relpos.encodings.t5 import T5Bias
from tests.helpers import randomize_parameters

# ------------------------------------------------------------------------------- T5


@pytest.mark.parametrize("causal", [True, False])
def test_t5_relative_bias_is_table_lookup(causal):
    enc = T5Bias(n_heads=3, causal=causal, num_buckets=16, max_distance=40)
    randomize_parameters(enc)
    d = torch.arange(-60, 61)
    b = enc.relative_bias(d)  # (H, S)
    ids = t5_bucket(d, bidirectional=not causal, num_buckets=16, max_distance=40)
    torch.testing.assert_close(b, enc.table[ids].T)
    assert enc.bidirectional is (not causal)


@pytest.mark.parametrize("causal", [True, False])
def test_t5_bias_matches_reference(causal):
    enc = T5Bias(n_heads=2, causal=causal, num_buckets=8, max_distance=12)
    randomize_parameters(enc)
    qpos = torch.tensor([[5, 9, 30]])
    kpos = torch.tensor([[0, 1, 5, 9, 17, 30, 60]])
    torch.testing.assert_close(enc.bias(qpos, kpos).double(), enc.reference_bias(qpos, kpos))


def test_t5_causal_future_keys_share_bucket_zero_and_far_past_saturates():
    enc = T5Bias(n_heads=2, causal=True, num_buckets=8, max_distance=16)
    randomize_parameters(enc)
    b = enc.relative_bias(torch.tensor([0, 1, 5, -16, -17, -1000]))
    torch.testing.assert_close(b[:, 1], b[:, 0])
    torch.testing.assert_close(b[:, 2], b[:, 0])
    torch.testing.assert_close(b[:, 4], b[:, 3])
    torch.testing.assert_close(b[:, 5], b[:, 3])
    torch.testing.assert_close(b[:, 5], enc.table[7])


def test_t5_params_and_grad():
    enc = relpos.make_encoding("t5", n_heads=4, head_dim=8, num_buckets=32)
    assert enc.num_params() == 32 * 4 and enc.toeplitz and enc.relative
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, 6, 8, generator=g) for _ in range(3))
    out = relpos.attention(q, k, v, enc, causal=True)
    gt, = torch.autograd.grad(out.square().sum(), enc.table)
    used = t5_bucket(torch.arange(-5, 1), bidirectional=False).unique()
    assert bool((gt[used].abs().sum(-1) > 0).all())
    unused = torch.ones(32, dtype=torch.bool)
    unused[used] = False
    assert gt[unused].abs().max() == 0


@pytest.mark.parametrize("kwargs,match", [({"num_buckets": 1}, "num_buckets"), ({"max_distance": 4}, "max_distance"),
                                          ({"num_buckets": 3, "causal": False}, "num_buckets")])
def test_t5_bad_options(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        T5Bias(n_heads=2, **kwargs)


# ---------------------------------------------------------------------------- ALiBi


def test_alibi_values_by_hand():
    enc = ALiBi(n_heads=4)  # slopes 1/4, 1/16, 1/64, 1/256
    b = enc.relative_bias(torch.tensor([-3, 0, 2]))
    want = -torch.tensor([[3 / 4, 0, 2 / 4], [3 / 16, 0, 2 / 16], [3 / 64, 0, 2 / 64], [3 / 256, 0, 2 / 256]])
    torch.testing.assert_close(b, want)
    enc3 = ALiBi(n_heads=3)  # 2 heads of the 2-sequence (1/16, 1/256), then every other of the 4-sequence: 1/4
    torch.testing.assert_close(enc3.slopes, torch.tensor([2 ** -4, 2 ** -8, 2 ** -2], dtype=torch.float64))


@given(st.integers(1, 64), st.lists(st.integers(-1000, 1000), min_size=1, max_size=10))
def test_alibi_symmetric_linear_nonpositive(H, ds):
    enc = ALiBi(n_heads=H)
    d = torch.tensor(ds)
    b = enc.relative_bias(d)
    torch.testing.assert_close(b, enc.relative_bias(-d))
    assert bool((b <= 0).all())
    torch.testing.assert_close(b, -enc.slopes.float()[:, None] * d.abs().float()[None])


def test_alibi_reference_and_learnable_slopes():
    enc = relpos.make_encoding("alibi", n_heads=3, head_dim=8, learnable_slopes=True)
    assert enc.num_params() == 3
    randomize_parameters(enc, std=0.1)
    qpos, kpos = torch.tensor([[2, 3, 10]]), torch.tensor([[0, 2, 3, 7, 10]])
    torch.testing.assert_close(enc.bias(qpos, kpos).double(), enc.reference_bias(qpos, kpos))
    g, = torch.autograd.grad(enc.bias(qpos, kpos).sum(), enc.slopes)
    assert bool((g != 0).all())
    assert relpos.make_encoding("alibi", n_heads=3, head_dim=8).num_params() == 0
