"""Cached incremental decoding gives the full forward's logits, for every scheme.

Models are built with ``max_len=16`` (the length learned tables cover and RoPE
scalings treat as the original/training length) and decoded to 24 tokens, i.e.
beyond that length; the learned absolute table is built with 32 positions so it
can cover 24.

Dynamic NTK RoPE (``rope-dynamic``) changes its base with the current length
(``seq_len = max position + 1``). A full forward over 24 tokens rotates every
position with the base of length 24, while token ``t`` of cached decoding is
computed at length ``t + 1``: beyond the original length the two legitimately
differ, so for that scheme the whole-sequence comparison stays within the original
length. The prefix property below (step ``t`` == full forward of the first
``t + 1`` tokens) holds for every scheme at every length; for dynamic NTK only in
a one-layer model (deeper layers' cached keys come from hidden states that
earlier steps computed with a shorter length's base).
"""

from __future__ import annotations

import pytest
import torch

from relpos.encodings import scheme_names
from relpos.model import KVCache, ModelConfig, TransformerLM
from tests.helpers import randomize_parameters

SCHEMES = scheme_names()
N = 24
ORIGINAL = 16


def model_for(scheme: str, n_layers: int = 2, **kw) -> TransformerLM:
    max_len = 32 if scheme == "learned" else ORIGINAL
    cfg = ModelConfig(d_model=16, n_layers=n_layers, n_heads=2, max_len=max_len, scheme=scheme, **kw)
    torch.manual_seed(0)
    m = TransformerLM(cfg).eval()
    randomize_parameters(m, std=0.2)
    return m


def decode_in_chunks(m, x, chunks):
    cache = m.init_cache(x.shape[0])
    out, t = [], 0
    for n in chunks:
        logits, cache = m.step(x[:, t:t + n], cache)
        out.append(logits)
        t += n
    assert cache.length == t
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_cached_decoding_equals_full_forward(scheme):
    m = model_for(scheme)
    n = ORIGINAL if scheme == "rope-dynamic" else N  # see module docstring
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (3, n), generator=g)
    chunks = [5, 1, 1, 3] + [1] * (n - 10)  # a prompt, single tokens, a multi-token step
    with torch.no_grad():
        full = m(x)
        inc = decode_in_chunks(m, x, chunks)
    torch.testing.assert_close(inc, full, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_each_step_equals_forward_of_its_prefix(scheme):
    m = model_for(scheme, n_layers=1 if scheme == "rope-dynamic" else 2)  # see module docstring
    x = torch.randint(0, 256, (2, N), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        cache = m.init_cache(2)
        logits, cache = m.step(x[:, :4], cache)
        for t in range(4, N):
            logits, cache = m.step(x[:, t:t + 1], cache)
            if t in (ORIGINAL - 1, ORIGINAL + 2, N - 1):
                torch.testing.assert_close(logits[:, -1], m(x[:, :t + 1])[:, -1], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_greedy_generate_matches_uncached_loop(scheme):
    m = model_for(scheme)
    prompt = torch.randint(0, 256, (2, 5), generator=torch.Generator().manual_seed(3))
    out = m.generate(prompt, 8, greedy=True)
    seq = prompt
    with torch.no_grad():
        for _ in range(8):
            nxt = m(seq)[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], dim=1)
    assert torch.equal(out, seq)


def test_sampling_is_seeded_and_top_k_one_is_greedy():
    m = model_for("alibi")
    prompt = torch.randint(0, 256, (2, 4), generator=torch.Generator().manual_seed(4))
    a = m.generate(prompt, 10, seed=7, temperature=1.5)
    b = m.generate(prompt, 10, seed=7, temperature=1.5)
    c = m.generate(prompt, 10, seed=8, temperature=1.5)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(m.generate(prompt, 6, top_k=1, seed=0), m.generate(prompt, 6, greedy=True))
    assert m.generate(prompt, 0).shape == (2, 4)


def test_step_does_not_mutate_the_cache():
    m = model_for("t5")
    x = torch.randint(0, 256, (1, 8))
    with torch.no_grad():
        _, c1 = m.step(x[:, :4], m.init_cache(1))
        la, ca = m.step(x[:, 4:5], c1)
        lb, cb = m.step(x[:, 4:5], c1)  # branch from the same cache
    assert isinstance(c1, KVCache) and c1.length == 4 and ca.length == cb.length == 5
    torch.testing.assert_close(la, lb)


def test_cache_errors():
    m = model_for("alibi")
    with pytest.raises(ValueError, match="batch size"):
        m.step(torch.zeros(2, 1, dtype=torch.long), m.init_cache(1))
    cache = m.init_cache(1, max_len=3)
    _, cache = m.step(torch.zeros(1, 3, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="capacity"):
        m.step(torch.zeros(1, 1, dtype=torch.long), cache)
    with pytest.raises(TypeError, match="KVCache"):
        m.step(torch.zeros(1, 1, dtype=torch.long), None)
    with pytest.raises(ValueError, match="temperature"):
        m.generate(torch.zeros(1, 1, dtype=torch.long), 2, temperature=0)
    bi = TransformerLM(ModelConfig(d_model=16, n_layers=1, n_heads=2, scheme="alibi", causal=False))
    with pytest.raises(ValueError, match="causal"):
        bi.init_cache(1)
