"""impl="auto": its picks per device/shape/mode, that it says what it picked, and
that explicit implementations never fall back.

(test_against_reference.py checks auto's outputs and gradients for every scheme.)
"""

from __future__ import annotations

import importlib
import logging

import pytest
import torch

import relpos
from relpos.attention import Request, UnsupportedError, request
from tests.helpers import attention_schemes, build

auto = importlib.import_module("relpos.attention.auto")


def _req(enc, N=128, *, Nq=None, grad=False, causal=True) -> Request:
    B, H, D = 1, 2, 8
    Nq = N if Nq is None else Nq
    q = torch.randn(B, H, Nq, D, requires_grad=grad)
    k = torch.randn(B, H, N, D, requires_grad=grad)
    v = torch.randn(B, H, N, D, requires_grad=grad)
    return request(q, k, v, enc, causal=causal, q_offset=N - Nq)


@pytest.mark.parametrize("name", attention_schemes())
def test_cpu_picks(name):
    enc = build(name, n_heads=2, causal=True)
    inside = enc.acts_on - {"embedding", "qk"}
    for grad in (False, True):
        pick = auto.choose(_req(enc, 1024, grad=grad))
        assert pick == ("chunked" if inside else "dense"), (name, grad)
        mid = auto.choose(_req(enc, 512, grad=grad))
        # chunked engines measured faster than dense from N = 256 on: clipped tables, per-key bias
        early = name in ("shaw", "shaw-kv", "fox")
        assert mid == ("chunked" if inside and early else "dense"), (name, grad)
        assert pick != "flex"  # not fused on CPU, and no CPU backward
    assert auto.choose(_req(enc, 128)) == "dense"  # small problems: lowest overhead
    assert auto.choose(_req(enc, 1024, Nq=1)) == "dense"  # one decoding step


@pytest.mark.parametrize("name", attention_schemes())
def test_cuda_picks(name):
    enc = build(name, n_heads=2, causal=True)
    inside = enc.acts_on - {"embedding", "qk"}
    pick = auto.choose(_req(enc, 128), device_type="cuda")
    if not inside:
        assert pick == "dense"
    elif "value" in inside:
        assert pick == "dense"
        assert auto.choose(_req(enc, 4096), device_type="cuda") == "chunked"
    else:
        assert pick == "flex"


def test_says_what_it_picked(caplog):
    enc = build("t5", n_heads=2, causal=True)
    q = k = v = torch.randn(1, 2, 800, 8)
    with caplog.at_level(logging.DEBUG, logger="relpos.attention"):
        relpos.attention(q, k, v, enc, causal=True, impl="auto")
    assert auto.last_choice == "chunked"
    assert any("auto:" in r.message and "-> chunked" in r.message for r in caplog.records)
    relpos.attention(q[:, :, :4], k[:, :, :4], v[:, :, :4], enc, causal=True, impl="auto")
    assert auto.last_choice == "dense"


def test_auto_trains_where_explicit_flex_refuses():
    enc = build("alibi", n_heads=2, causal=True)
    q, k, v = (torch.randn(1, 2, 300, 8, requires_grad=True) for _ in range(3))
    with pytest.raises(UnsupportedError):
        relpos.attention(q, k, v, enc, causal=True, impl="flex")
    out = relpos.attention(q, k, v, enc, causal=True, impl="auto")
    out.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()
    ref = relpos.attention(q, k, v, enc, causal=True, impl="reference")
    torch.testing.assert_close(out, ref, atol=2e-4, rtol=1e-3)
