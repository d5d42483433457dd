"""Transformer-XL segment recurrence with every relative scheme.

Where the two must agree:

* memory at least as long as everything before the segment: segment-by-segment
  logits equal one pass over the whole sequence (any depth);
* truncated memory of M tokens in a one-layer model: the memory holds the
  previous M token embeddings exactly, so a segment's logits equal a single pass
  over ``[previous M tokens ; segment]`` (its last N positions).

``rope-dynamic`` depends on the window length, so its model is built with an
original length covering the whole sequence (where it is plain RoPE).
"""

from __future__ import annotations

import pytest
import torch

from relpos.encodings import get_scheme, scheme_names
from relpos.model import Memory, ModelConfig, TransformerLM
from tests.helpers import randomize_parameters

RELATIVE = [s for s in scheme_names() if "embedding" not in get_scheme(s)[0].acts_on]
ABSOLUTE = [s for s in scheme_names() if s not in RELATIVE]


def model_for(scheme: str, n_layers: int = 2, max_len: int = 16) -> TransformerLM:
    if scheme == "rope-dynamic":
        max_len = 64
    cfg = ModelConfig(d_model=16, n_layers=n_layers, n_heads=2, max_len=max_len, scheme=scheme)
    torch.manual_seed(0)
    m = TransformerLM(cfg).eval()
    randomize_parameters(m, std=0.2)
    return m


@pytest.mark.parametrize("scheme", RELATIVE)
def test_full_memory_equals_single_pass(scheme):
    m = model_for(scheme)
    x = torch.randint(0, 256, (2, 18), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = m(x)
        mem, outs = None, []
        for s in range(0, 18, 6):
            logits, mem = m.forward_with_memory(x[:, s:s + 6], mem, mem_len=12)
            outs.append(logits)
    assert isinstance(mem, Memory) and mem.length == 12
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("scheme", RELATIVE)
def test_truncated_memory_one_layer_equals_window_pass(scheme):
    m = model_for(scheme, n_layers=1)
    x = torch.randint(0, 256, (2, 20), generator=torch.Generator().manual_seed(1))
    M, Nseg = 3, 5
    with torch.no_grad():
        mem = None
        for s in range(0, 20, Nseg):
            logits, mem = m.forward_with_memory(x[:, s:s + Nseg], mem, mem_len=M)
            lo = max(0, s - M)
            ref = m(x[:, lo:s + Nseg])[:, -Nseg:]
            torch.testing.assert_close(logits, ref, atol=2e-5, rtol=1e-4)


def test_memory_is_detached_and_training_works():
    m = model_for("t5").train()
    x = torch.randint(0, 256, (2, 12))
    _, mem = m.forward_with_memory(x[:, :6])
    assert all(h.grad_fn is None and not h.requires_grad for h in mem.hidden)
    logits, mem2 = m.forward_with_memory(x[:, 6:], mem)
    logits.sum().backward()
    assert m.tok_emb.weight.grad is not None
    assert mem2.length == 6  # default mem_len = segment length


def test_zero_memory_is_independent_segments():
    m = model_for("alibi")
    x = torch.randint(0, 256, (1, 10))
    with torch.no_grad():
        _, mem = m.forward_with_memory(x[:, :5], mem_len=0)
        assert mem.length == 0
        logits, _ = m.forward_with_memory(x[:, 5:], mem, mem_len=0)
        torch.testing.assert_close(logits, m(x[:, 5:]))


@pytest.mark.parametrize("scheme", ABSOLUTE[:2])
def test_absolute_schemes_are_refused(scheme):
    m = model_for(scheme, max_len=32)
    with pytest.raises(ValueError, match="relative scheme"):
        m.forward_with_memory(torch.zeros(1, 4, dtype=torch.long))


def test_memory_errors():
    m = model_for("alibi")
    _, mem = m.forward_with_memory(torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="batch size"):
        m.forward_with_memory(torch.zeros(3, 4, dtype=torch.long), mem)
    with pytest.raises(ValueError, match="mem_len"):
        m.forward_with_memory(torch.zeros(2, 4, dtype=torch.long), mem, mem_len=-1)
    with pytest.raises(TypeError, match="Memory"):
        m.forward_with_memory(torch.zeros(2, 4, dtype=torch.long), "mem")
