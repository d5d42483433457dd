"""A scheme registered from *outside* relpos gets every fast path with no edit to relpos.

``BucketBias`` below is a copy of T5's bucketed bias under a new name, defined in
this test file. It declares its structure through capabilities only
(``toeplitz = True``, ``saturation_distance()``, ``share_across_layers``); the
test shows that it is in the registry, that ``impl="chunked"`` runs it on the fast
Toeplitz engine (asked through public introspection), and that every
implementation matches the float64 reference, gradients included.
"""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import torch
from torch import Tensor, nn

import relpos
from relpos.distance import t5_bucket
from relpos.encodings import Encoding, make_encoding, register_scheme, scheme_names, unregister_scheme
from tests.helpers import randomize_parameters

chunked = importlib.import_module("relpos.attention.chunked")
NAME = "bucket-bias-copy"


class BucketBias(Encoding):
    """T5's bucketed learned scalar bias, written outside the package."""

    name = NAME
    acts_on = frozenset({"bias"})
    toeplitz = True
    share_across_layers = True
    paper = "https://arxiv.org/abs/1910.10683"

    def __init__(self, n_heads: int = 8, causal: bool = True, *, num_buckets: int = 32, max_distance: int = 128):
        super().__init__(n_heads)
        self.bidirectional = not causal
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.table = nn.Parameter(torch.randn(num_buckets, n_heads) * 0.02)  # (NB, H)

    def saturation_distance(self) -> int:
        return self.max_distance

    def relative_bias(self, delta: Tensor) -> Tensor:
        b = t5_bucket(delta, bidirectional=self.bidirectional, num_buckets=self.num_buckets,
                      max_distance=self.max_distance)
        return self.table.float()[b].movedim(-1, 0)  # (H, *S)

    def _ref_bucket(self, d: int) -> int:
        n, ret = self.num_buckets, 0
        if self.bidirectional:
            n //= 2
            ret = n if d > 0 else 0
            dist = abs(d)
        else:
            dist = max(-d, 0)
        exact = n // 2
        if dist < exact:
            return ret + dist
        f32 = np.float32
        val = np.log(f32(dist) / f32(exact)) / f32(math.log(self.max_distance / exact)) * f32(n - exact)
        return ret + min(exact + int(f32(val)), n - 1)

    def reference_bias(self, qpos: Tensor, kpos: Tensor) -> Tensor:
        B = max(qpos.shape[0], kpos.shape[0])
        qp, kp = qpos.expand(B, -1).tolist(), kpos.expand(B, -1).tolist()
        idx = torch.tensor([[[self._ref_bucket(j - i) for j in kp[b]] for i in qp[b]] for b in range(B)])
        return self.table.double()[idx].permute(0, 3, 1, 2)  # (B, H, Nq, Nk)


@pytest.fixture
def registered():
    register_scheme(NAME, BucketBias, summary="T5 copy registered by a test")
    try:
        yield NAME
    finally:
        unregister_scheme(NAME)


def _build(causal=True, **opts):
    enc = make_encoding(NAME, n_heads=2, head_dim=8, causal=causal, num_buckets=8, max_distance=6, **opts)
    randomize_parameters(enc)
    return enc


def test_it_is_in_the_registry(registered):
    assert NAME in scheme_names()
    assert NAME in relpos.SCHEMES and relpos.SCHEMES[NAME].summary
    enc = make_encoding(NAME, n_heads=2)
    assert isinstance(enc, BucketBias) and enc.describe()["name"] == NAME
    with pytest.raises(ValueError, match="already registered"):
        register_scheme(NAME, BucketBias)


def test_registration_needs_an_encoding_class():
    with pytest.raises(TypeError, match="Encoding"):
        register_scheme("not-a-scheme", dict)
    assert "not-a-scheme" not in scheme_names()


@pytest.mark.parametrize("causal", [True, False])
def test_it_gets_the_fast_chunked_engine(registered, causal):
    enc = _build(causal)
    q, k, v = (torch.randn(1, 2, 12, 8) for _ in range(3))
    req = relpos.attention.request(q, k, v, enc, causal=causal)
    assert chunked.engine_for(req) == "regions"  # the Toeplitz (Hankel-view) engine, not the general one
    relpos.attention(q, k, v, enc, causal=causal, impl="chunked")
    assert chunked.last_engine == "regions"
    assert chunked.saturation_distance(enc) == 6  # the band shortcut of the backward applies


@pytest.mark.parametrize("impl", ["dense", "chunked", "auto"])
@pytest.mark.parametrize("causal", [True, False])
def test_every_impl_matches_the_reference(registered, impl, causal, monkeypatch):
    monkeypatch.setattr(chunked, "FORCE_ROWS", 3)  # many blocks and staircase squares
    enc = _build(causal)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 17, 8, generator=g, requires_grad=True) for _ in range(3))

    def run(name):
        out = relpos.attention(q, k, v, enc, causal=causal, impl=name)
        w = torch.linspace(-1, 1, out.numel()).view_as(out)
        return (out.detach(), *torch.autograd.grad((out * w).sum(), [q, k, v, enc.table]))

    for got, want in zip(run(impl), run("reference")):
        torch.testing.assert_close(got, want, atol=2e-4, rtol=1e-3)


def test_it_matches_t5_itself(registered):
    """Same parameters, same answer as the built-in T5 (the copy is faithful)."""
    ours = _build(True)
    t5 = make_encoding("t5", n_heads=2, head_dim=8, causal=True, num_buckets=8, max_distance=6)
    with torch.no_grad():
        t5.table.copy_(ours.table)
    q, k, v = (torch.randn(1, 2, 20, 8) for _ in range(3))
    torch.testing.assert_close(relpos.attention(q, k, v, ours, causal=True, impl="chunked"),
                               relpos.attention(q, k, v, t5, causal=True, impl="chunked"))
