"""Model layers: :class:`MultiHeadAttention` (any position scheme) and the pre-LayerNorm :class:`Block`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import relpos
from relpos.attention import REQUIRED, _require_causal, check_in_attention
from relpos.encodings import Encoding, make_encoding
from relpos.model.config import DEFAULT_ATTN_IMPL, MAX_D_MODEL, ModelConfig
from relpos.validation import check_bool, check_choice, check_int

__all__ = ["MultiHeadAttention", "Block"]


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention with any position scheme.

    The scheme is one typed choice: an :class:`~relpos.Encoding` (built with
    :func:`relpos.make_encoding`), or a registry name (built with default options),
    or None for no position information. A model that shares one scheme module
    across layers builds the attention with ``encoding=None`` and passes the scheme
    to :meth:`forward` instead, so that the module is owned once.

    Args:
        d_model: width C.
        n_heads: heads H (must divide C).
        encoding: the scheme (see above).
        causal: required keyword, no default: causal (True) or bidirectional (False) attention.
        impl: implementation name for :func:`relpos.attention` (default
            ``"auto"``, the same as :class:`ModelConfig`'s ``attn_impl``).
        bias: biases in the projections.

    Example:
        >>> enc = relpos.make_encoding("alibi", n_heads=2, head_dim=8)
        >>> mha = MultiHeadAttention(16, 2, enc, causal=True)
        >>> mha(torch.randn(3, 5, 16)).shape
        torch.Size([3, 5, 16])
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        encoding: Encoding | str | None = None,
        *,
        causal: bool = REQUIRED,  # type: ignore[assignment]
        impl: str = DEFAULT_ATTN_IMPL,
        bias: bool = True,
    ) -> None:
        super().__init__()
        causal = _require_causal("MultiHeadAttention", causal)
        check_int("d_model", d_model, 1, MAX_D_MODEL)
        check_int("n_heads", n_heads, 1, MAX_D_MODEL)
        check_bool("bias", bias)
        from relpos.attention import IMPLS

        check_choice("impl", impl, sorted(IMPLS))
        if d_model % n_heads:
            raise ValueError(f"n_heads ({n_heads}) must divide d_model ({d_model})")
        if isinstance(encoding, str):
            encoding = make_encoding(encoding, n_heads=n_heads, head_dim=d_model // n_heads, d_model=d_model,
                                     causal=causal)
        if encoding is not None and not isinstance(encoding, Encoding):
            raise TypeError(f"encoding must be a relpos Encoding, a scheme name or None, got {type(encoding).__name__}")
        if encoding is not None:
            check_in_attention(encoding)
            encoding.check_causal(causal)
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.causal = causal
        self.impl = impl
        self.encoding = encoding
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.proj = nn.Linear(d_model, d_model, bias=bias)

    def _heads(self, x: Tensor) -> Tensor:
        B, N, _ = x.shape
        return x.view(B, N, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, N, D)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(B, N, C)`` -> q, k, v each ``(B, H, N, D)`` (not rotated)."""
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self._heads(q), self._heads(k), self._heads(v)

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values only, ``(B, H, N, D)`` each."""
        w_kv = self.qkv.weight[self.d_model:]
        b_kv = None if self.qkv.bias is None else self.qkv.bias[self.d_model:]
        k, v = F.linear(x, w_kv, b_kv).chunk(2, dim=-1)
        return self._heads(k), self._heads(v)

    def _enc(self, encoding) -> Encoding | None:
        return self.encoding if encoding is None else encoding

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        encoding: Encoding | None = None,
        q_offset: int = 0,
        positions: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        """Attention of ``q (B, H, Nq, D)`` over ``k, v (B, H, Nk, D)`` -> ``(B, Nq, C)`` projected."""
        out = relpos.attention(
            q, k, v, self._enc(encoding), causal=self.causal, q_offset=q_offset, positions=positions,
            key_padding_mask=key_padding_mask, impl=self.impl,
        )  # (B, H, Nq, D)
        B, H, Nq, D = out.shape
        return self.proj(out.transpose(1, 2).reshape(B, Nq, H * D))

    def probabilities(
        self,
        q: Tensor,
        k: Tensor,
        *,
        encoding: Encoding | None = None,
        q_offset: int = 0,
        positions: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        """Attention probabilities ``(B, H, Nq, Nk)`` float32 (the dense path's logits, softmaxed).

        Rows with no allowed key are all zeros.
        """
        from relpos.attention import logits

        z = logits(q, k, self._enc(encoding), causal=self.causal, key_padding_mask=key_padding_mask,
                   q_offset=q_offset, positions=positions).float()  # (B, H, Nq, Nk), -inf where masked
        allowed = torch.isfinite(z).any(-1, keepdim=True)
        return torch.where(allowed, torch.softmax(z.masked_fill(~allowed, 0.0), dim=-1), torch.zeros_like(z))

    def forward(
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
        q, k, v = self.project(x)
        return self.attend(q, k, v, encoding=encoding, positions=positions, key_padding_mask=key_padding_mask)


class Block(nn.Module):
    """Pre-LayerNorm Transformer block: ``h + attn(LN(h))``, then ``h + mlp(LN(h))``
    (no MLP sublayer when ``cfg.d_ff == 0``: attention-only)."""

    def __init__(self, cfg: ModelConfig, causal: bool) -> None:
        super().__init__()
        C = cfg.d_model
        self.ln1 = nn.LayerNorm(C)
        self.attn = MultiHeadAttention(C, cfg.n_heads, None, causal=causal, impl=cfg.attn_impl)
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
                               key_padding_mask=key_padding_mask)
        h = h + self.drop(out)
        if self.has_mlp:
            h = h + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(h)))))
        return h, (k, v)
