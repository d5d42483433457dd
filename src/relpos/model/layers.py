"""Model layers: the pre-LayerNorm :class:`Block` (built on :class:`relpos.nn.RelativeSelfAttention`)
and :class:`MultiHeadAttention`, that layer under its older name."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import relpos
from relpos.attention import REQUIRED
from relpos.encodings import Encoding
from relpos.model.config import DEFAULT_ATTN_IMPL, ModelConfig
from relpos.nn.attention import RelativeSelfAttention

__all__ = ["MultiHeadAttention", "Block"]


class MultiHeadAttention(RelativeSelfAttention):
    """The library's attention layer (:class:`relpos.nn.RelativeSelfAttention`) under its older name.

    Differences, kept for existing code: the scheme argument is called ``encoding``,
    projection biases are on by default, and :meth:`forward` returns ``y`` only
    (no cache; use :class:`relpos.nn.RelativeSelfAttention` for an explicit cache).
    A model that shares one scheme module across layers builds the attention with
    ``encoding=None`` and passes the scheme to :meth:`forward` instead.

    Args:
        d_model: width C.
        n_heads: heads H (must divide C).
        encoding: an :class:`~relpos.Encoding`, a registry name, or None.
        causal: required keyword: causal (True) or bidirectional (False) attention.
        impl: implementation name for :func:`relpos.attention` (default ``"auto"``).
        bias: biases in the projections.
        n_kv_heads: key/value heads for grouped-query attention (None = H).

    Example:
        >>> enc = relpos.make_encoding("alibi", n_heads=2, head_dim=8)
        >>> mha = MultiHeadAttention(16, 2, enc, causal=True)
        >>> mha(torch.randn(3, 5, 16)).shape
        torch.Size([3, 5, 16])
    """

    _scheme_param = "encoding"

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        encoding: Encoding | str | None = None,
        *,
        causal: bool = REQUIRED,  # type: ignore[assignment]
        impl: str = DEFAULT_ATTN_IMPL,
        bias: bool = True,
        n_kv_heads: int | None = None,
    ) -> None:
        super().__init__(d_model, n_heads, encoding, n_kv_heads=n_kv_heads, causal=causal, impl=impl, bias=bias)

    def forward(  # type: ignore[override]
        self,
        x: Tensor,
        *,
        encoding: Encoding | None = None,
        positions: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        """Self-attention over ``x (B, N, C)`` -> ``(B, N, C)``.

        Args:
            x: inputs.
            encoding: overrides the scheme given at construction (see class doc).
            positions: optional ``(N,)`` or ``(B, N)`` int64 positions.
            key_padding_mask: optional ``(B, N)`` bool, True = a real token.
        """
        return super().forward(x, key_mask=key_padding_mask, positions=positions, encoding=encoding)[0]


class Block(nn.Module):
    """Pre-LayerNorm Transformer block: ``h + attn(LN(h))``, then ``h + mlp(LN(h))``
    (no MLP sublayer when ``cfg.d_ff == 0``: attention-only)."""

    def __init__(self, cfg: ModelConfig, causal: bool) -> None:
        super().__init__()
        C = cfg.d_model
        self.ln1 = nn.LayerNorm(C)
        # the package's one attention layer; the scheme modules live in the stack (model.pos)
        self.attn = RelativeSelfAttention(C, cfg.n_heads, None, causal=causal, impl=cfg.attn_impl, bias=True)
        d_ff = 4 * C if cfg.d_ff is None else cfg.d_ff
        self.has_mlp = d_ff > 0
        if self.has_mlp:
            self.ln2 = nn.LayerNorm(C)
            self.fc1 = nn.Linear(C, d_ff)
            self.fc2 = nn.Linear(d_ff, C)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(
        self,
        h: Tensor,
        encoding: Encoding | None,
        *,
        past: tuple[Tensor, Tensor] | None = None,
        positions: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """One block.

        Args:
            h: ``(B, N, C)`` residual stream of the new tokens.
            encoding: this layer's scheme module (or None).
            past: earlier keys and values ``(B, H, L, D)`` (cache or memory), un-rotated.
            positions: ``(B or 1, L + N)`` key positions, or None for ``0..L+N-1``.
            key_padding_mask: ``(B, L + N)`` bool, True = real.

        Returns:
            ``h (B, N, C)`` and the full un-rotated ``(k, v)`` ``(B, H, L + N, D)``.
        """
        a = self.ln1(h)
        q, k, v = self.attn.project(a)
        L = 0
        if past is not None:
            L = past[0].shape[2]
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        out = self.attn.attend(q, k, v, encoding=encoding, q_offset=L, positions=positions,
                               key_mask=key_padding_mask)
        h = h + self.drop(out)
        if self.has_mlp:
            h = h + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(h)))))
        return h, (k, v)
