"""Test helpers shared across test modules (import as ``from tests.helpers import ...``)."""

from __future__ import annotations

import torch

import relpos
from relpos.encodings import scheme_names


def randomize_parameters(module: torch.nn.Module, std: float = 0.5, seed: int = 0) -> None:
    """Give every learned parameter non-trivial values, so a test cannot pass on zeros."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * std)


def build(name: str, *, n_heads: int = 3, head_dim: int = 8, causal: bool = True, max_len: int = 64, **opts):
    enc = relpos.make_encoding(name, n_heads=n_heads, head_dim=head_dim, causal=causal, max_len=max_len, **opts)
    randomize_parameters(enc)
    return enc


def attention_schemes() -> list[str]:
    """Schemes that act inside attention (not only on the input embeddings)."""
    out = []
    for n in scheme_names():
        enc = relpos.make_encoding(n, n_heads=2, head_dim=8)
        if enc.acts_on - {"embedding"} or not enc.acts_on:
            out.append(n)
    return out
