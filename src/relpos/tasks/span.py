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


def _mass_by_distance(p: Tensor) -> Tensor:
    """Attention mass at each distance ``d = i - j``, summed over batch and queries: ``(H, N)`` float64,
    from causal maps ``(B, H, N, N)`` with the sink column left out."""
    B, H, N, _ = p.shape
    q = p.sum(0, dtype=torch.float64)  # (H, N, N): summed over the batch first
    q[..., 0] = 0.0  # the sink column
    i = torch.arange(N)[:, None]
    j = torch.arange(N)[None, :]
    dist = (i - j).clamp_min(0)  # (N, N)
    per_d = torch.zeros(H, N, dtype=torch.float64)
    per_d.index_add_(1, dist.reshape(-1), q.reshape(H, N * N))
    return per_d


def _spans(per_d: Tensor, B: int, threshold: float) -> list[int]:
    """Per head, the smallest distance whose mean tail mass (per query that has such keys) is below ``threshold``."""
    H, N = per_d.shape
    tail = per_d.flip(1).cumsum(1).flip(1)  # (H, N): mass at distance >= d
    counts = (N - torch.arange(N, dtype=torch.float64)) * B  # queries with a key at distance >= d
    mean_tail = tail / counts.clamp_min(1)
    spans = []
    for h in range(H):
        below = (mean_tail[h] < threshold).nonzero()
        spans.append(int(below[0]) if below.numel() else N)
    return spans


def span_of_maps(maps: list[Tensor], threshold: float = 0.01) -> list[list[int]]:
    """Per layer and head, the effective span of attention maps ``(B, H, N, N)`` (causal)."""
    return [_spans(_mass_by_distance(p), p.shape[0], threshold) for p in maps]


@torch.no_grad()
def effective_span(model, x: Tensor, threshold: float = 0.01, *, batch: int = 4) -> dict:
    """Effective spans of a model with ``attention_maps`` (e.g. :class:`relpos.model.TransformerLM`).

    Args:
        model: the model (evaluated in eval mode).
        x: ``(B, N)`` int64 inputs (e.g. test windows of the longest length; the benchmark uses 32).
        threshold: attention mass that counts as "not looking".
        batch: windows per forward pass (the maps are ``(batch, H, N, N)`` per layer); the masses are
            summed over all ``B`` windows, so the result does not depend on it.

    Returns:
        ``{"eval_len": N, "threshold": t, "windows": B, "per_head": [[span per head] per layer],
        "max": m, "median": med}``: ``max`` and ``median`` over every head of every layer.
    """
    B = int(x.shape[0])
    acc: list[Tensor] | None = None
    for s in range(0, B, max(1, int(batch))):
        maps = model.attention_maps(x[s: s + batch])
        masses = [_mass_by_distance(p) for p in maps]
        acc = masses if acc is None else [a + m for a, m in zip(acc, masses)]
    per = [_spans(m, B, threshold) for m in acc]
    flat = sorted(s for layer in per for s in layer)
    k = len(flat)
    median = flat[k // 2] if k % 2 else (flat[k // 2 - 1] + flat[k // 2]) / 2
    return {
        "eval_len": int(x.shape[1]),
        "threshold": threshold,
        "windows": B,
        "per_head": per,
        "max": int(flat[-1]),
        "median": float(median),
    }
