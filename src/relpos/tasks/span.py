"""Effective attention span: how far back a trained model actually looks.

For every layer and head, the attention mass that a query puts on keys at
distance ``>= d`` (``d = i - j``), averaged over queries that have such keys.
The head's *effective span* is the smallest ``d`` at which that mass falls below
``threshold`` (1 %). The first key of a window is left out of the mass: many
models park attention there (an "attention sink"), which says nothing about
reach.

A model whose every head has a span far below its training length attends
within a **local window**: its loss can stay flat past the training length
without using the longer context (DPB and FoX do this at small scale).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["effective_span", "span_of_maps"]


def span_of_maps(maps: list[Tensor], threshold: float = 0.01) -> list[list[int]]:
    """Per layer and head, the effective span of attention maps ``(B, H, N, N)`` (causal)."""
    out = []
    for p in maps:
        B, H, N, _ = p.shape
        p = p.double().clone()
        p[..., 0] = 0.0  # the sink column
        i = torch.arange(N)[:, None]
        j = torch.arange(N)[None, :]
        dist = (i - j).clamp_min(0)  # (N, N)
        # mass at exactly distance d, summed over queries: (H, N)
        per_d = torch.zeros(H, N, dtype=torch.float64)
        per_d.index_add_(1, dist.reshape(-1), p.sum(0).reshape(H, N * N))
        # queries that have a key at distance >= d: N - d of them (i >= d); also minus those whose j=0 is the only one
        tail = per_d.flip(1).cumsum(1).flip(1)  # (H, N): mass at distance >= d
        counts = (N - torch.arange(N, dtype=torch.float64)) * B
        mean_tail = tail / counts.clamp_min(1)
        spans = []
        for h in range(H):
            below = (mean_tail[h] < threshold).nonzero()
            spans.append(int(below[0]) if below.numel() else N)
        out.append(spans)
    return out


@torch.no_grad()
def effective_span(model, x: Tensor, threshold: float = 0.01) -> dict:
    """Effective spans of a model with ``attention_maps`` (e.g. :class:`relpos.model.TransformerLM`).

    Args:
        model: the model (evaluated in eval mode).
        x: ``(B, N)`` int64 inputs (e.g. validation windows of the longest length).
        threshold: attention mass that counts as "not looking".

    Returns:
        ``{"eval_len": N, "threshold": t, "per_head": [[span per head] per layer], "max": m, "median": med}``.
    """
    maps = model.attention_maps(x)
    per = span_of_maps(maps, threshold)
    flat = sorted(s for layer in per for s in layer)
    return {
        "eval_len": int(x.shape[1]),
        "threshold": threshold,
        "per_head": per,
        "max": int(flat[-1]),
        "median": float(flat[len(flat) // 2]),
    }
