"""A self-attention layer with any relative position scheme: :class:`RelativeSelfAttention`.

Projections, the scheme, :func:`relpos.attention` and the output projection, with
grouped-query / multi-query attention (``n_kv_heads``), key padding (``key_mask``,
True = a real token), an optional boolean ``attn_mask`` (True = attend), attention
dropout, explicit positions and an explicit :class:`~relpos.nn.KVCache`. :mod:`relpos.model` builds
its Transformer blocks from this layer. Papers: see each scheme's module in
:mod:`relpos.encodings`; GQA: Ainslie et al. 2023, https://arxiv.org/abs/2305.13245.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import relpos
from relpos.attention import REQUIRED, _require_causal, check_in_attention
from relpos.attention.masks import check_dropout_p, resolve_key_mask
from relpos.encodings import Encoding, get_scheme, make_encoding
from relpos.nn.cache import KVCache
from relpos.validation import check_bool, check_choice, check_int

__all__ = ["RelativeSelfAttention", "check_positions", "DEFAULT_IMPL", "MAX_WIDTH"]

#: The attention implementation a layer uses unless told otherwise.
DEFAULT_IMPL = "auto"
#: Upper limit of ``d_model`` and head counts.
MAX_WIDTH = 1 << 16



def check_positions(positions, B: int, N: int) -> Tensor:
    """Integer positions of shape ``(N,)`` or ``(B or 1, N)``, returned as ``(B or 1, N)``; else a one-line error."""
    if not isinstance(positions, Tensor) or positions.dtype.is_floating_point or positions.dtype == torch.bool:
        raise TypeError("positions must be an integer torch.Tensor")
    if positions.dim() == 1:
        positions = positions[None]
    if positions.dim() != 2 or positions.shape[1] != N or positions.shape[0] not in (1, B):
        raise ValueError(f"positions must have shape (N,) or (B, N) = ({B}, {N}), got {tuple(positions.shape)}")
    return positions

class RelativeSelfAttention(nn.Module):
    """Multi-head self-attention with any position scheme, GQA and an explicit cache.

    Args:
        d_model: width C.
        n_heads: query heads H (must divide C; head dim D = C / H).
        scheme: a registry name (built here with ``**scheme_options``), an
            :class:`~relpos.Encoding` (used as given: pass one object to several
            layers to share it, or use :meth:`stack`), or None for no positions.
            A scheme that acts only on the token embeddings is refused (add it to
            the embeddings: ``enc.embed(x, positions)``).
        n_kv_heads: key/value heads (None = H); must divide H. Fewer heads is
            grouped-query attention (1 = multi-query); keys and values are not
            copied per query head (see :func:`relpos.attention`).
        causal: required: True for a decoder, False for an encoder.
        impl: :func:`relpos.attention` implementation (default ``"auto"``).
        bias: biases in the projections.
        dropout_p: dropout on the attention weights in training mode (``[0, 1)``;
            ignored in ``eval()``). Only ``impl="dense"`` (and ``"auto"``, which
            then picks it) serves it; other implementations refuse it by name.
        **scheme_options: the scheme's own options (``num_buckets=32``,
            ``max_len=...``) when ``scheme`` is a name.

    Parameters: ``qkv`` (``C -> (H + 2 Hkv) D``, queries then keys then values) and
    ``proj`` (``H D -> C``); ``encoding`` is the scheme module (or None).

    Example:
        >>> import torch, relpos
        >>> attn = relpos.nn.RelativeSelfAttention(64, 8, "t5", n_kv_heads=2, causal=True, num_buckets=16)
        >>> y, _ = attn(torch.randn(2, 10, 64))
        >>> y.shape
        torch.Size([2, 10, 64])
    """

    _scheme_param = "scheme"  # the constructor argument's name, for messages

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        scheme: str | Encoding | None = None,
        *,
        n_kv_heads: int | None = None,
        causal: bool = REQUIRED,  # type: ignore[assignment]
        impl: str = DEFAULT_IMPL,
        bias: bool = False,
        dropout_p: float = 0.0,
        **scheme_options,
    ) -> None:
        super().__init__()
        causal = _require_causal(type(self).__name__, causal)
        self.dropout_p = check_dropout_p(dropout_p)
        check_int("d_model", d_model, 1, MAX_WIDTH)
        check_int("n_heads", n_heads, 1, MAX_WIDTH)
        check_bool("bias", bias)
        from relpos.attention import IMPLS

        check_choice("impl", impl, sorted(IMPLS))
        if d_model % n_heads:
            raise ValueError(f"n_heads ({n_heads}) must divide d_model ({d_model})")
        if n_kv_heads is None:
            n_kv_heads = n_heads
        check_int("n_kv_heads", n_kv_heads, 1, n_heads)
        if n_heads % n_kv_heads:
            raise ValueError(f"n_kv_heads ({n_kv_heads}) must divide n_heads ({n_heads})")
        D = d_model // n_heads
        if isinstance(scheme, str):
            scheme = make_encoding(scheme, n_heads=n_heads, head_dim=D, d_model=d_model, causal=causal,
                                   **scheme_options)
        elif scheme_options:
            raise TypeError(f"scheme options {sorted(scheme_options)} need a scheme given by name")
        if scheme is not None and not isinstance(scheme, Encoding):
            raise TypeError(f"{self._scheme_param} must be a relpos Encoding, a scheme name or None, "
                            f"got {type(scheme).__name__}")
        if scheme is not None:
            check_in_attention(scheme)
            scheme.check_causal(causal)
        self.d_model, self.n_heads, self.n_kv_heads, self.head_dim = d_model, n_heads, n_kv_heads, D
        self.causal = causal
        self.impl = impl
        self.encoding = scheme
        self.qkv = nn.Linear(d_model, (n_heads + 2 * n_kv_heads) * D, bias=bias)
        self.proj = nn.Linear(n_heads * D, d_model, bias=bias)

    @classmethod
    def stack(cls, n_layers: int, d_model: int, n_heads: int, scheme: str, *, share: bool | None = None,
              **kwargs) -> nn.ModuleList:
        """``n_layers`` layers for one scheme, sharing one scheme module when the scheme does.

        Args:
            n_layers: how many layers.
            scheme: a registry name.
            share: one scheme module for every layer (True), one per layer (False),
                or the scheme's default (None: shared for schemes that set
                ``share_across_layers``, i.e. T5, whose bias table is shared by all layers).
            **kwargs: as the constructor (``n_kv_heads``, ``causal``, ``impl``, scheme options).

        Example:
            >>> layers = RelativeSelfAttention.stack(4, 32, 4, "t5", causal=True)
            >>> layers[0].encoding is layers[3].encoding
            True
        """
        check_int("n_layers", n_layers, 1, 1024)
        if share is None:
            cls_, _ = get_scheme(scheme)
            share = bool(getattr(cls_, "share_across_layers", False))
        check_bool("share", share)
        first = cls(d_model, n_heads, scheme, **kwargs)
        if not share:
            return nn.ModuleList([first] + [cls(d_model, n_heads, scheme, **kwargs) for _ in range(n_layers - 1)])
        opts = {k: kwargs[k] for k in ("n_kv_heads", "causal", "impl", "bias", "dropout_p") if k in kwargs}
        return nn.ModuleList([first] + [cls(d_model, n_heads, first.encoding, **opts) for _ in range(n_layers - 1)])

    # ----------------------------------------------------------------- pieces

    def _heads(self, x: Tensor, h: int) -> Tensor:
        B, N, _ = x.shape
        return x.view(B, N, h, self.head_dim).transpose(1, 2)  # (B, h, N, D)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(B, N, C)`` -> q ``(B, H, N, D)``, k and v ``(B, Hkv, N, D)`` (not rotated)."""
        H, Hkv, D = self.n_heads, self.n_kv_heads, self.head_dim
        q, k, v = self.qkv(x).split([H * D, Hkv * D, Hkv * D], dim=-1)
        return self._heads(q, H), self._heads(k, Hkv), self._heads(v, Hkv)

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values only, ``(B, Hkv, N, D)`` each."""
        HD = self.n_heads * self.head_dim
        w_kv = self.qkv.weight[HD:]
        b_kv = None if self.qkv.bias is None else self.qkv.bias[HD:]
        k, v = F.linear(x, w_kv, b_kv).chunk(2, dim=-1)
        return self._heads(k, self.n_kv_heads), self._heads(v, self.n_kv_heads)

    def _enc(self, encoding: Encoding | None) -> Encoding | None:
        return self.encoding if encoding is None else encoding

    def attend(self, q: Tensor, k: Tensor, v: Tensor, *, encoding: Encoding | None = None, q_offset: int = 0,
               positions: Tensor | None = None, key_mask: Tensor | None = None, attn_mask: Tensor | None = None,
               key_padding_mask: Tensor | None = None) -> Tensor:
        """Attention of ``q (B, H, Nq, D)`` over ``k, v (B, Hkv, Nk, D)`` -> ``(B, Nq, C)`` projected.

        ``key_mask (B, Nk)`` and ``attn_mask (B|1, H|1, Nq, Nk)``: bool, True = attend
        (``key_padding_mask``: deprecated alias of ``key_mask``); dropout ``dropout_p``
        in training mode."""
        key_mask = resolve_key_mask("attend", key_mask, key_padding_mask)
        out = relpos.attention(
            q, k, v, self._enc(encoding), causal=self.causal, q_offset=q_offset, positions=positions,
            key_mask=key_mask, attn_mask=attn_mask, impl=self.impl,
            dropout_p=self.dropout_p if self.training else 0.0,
        )  # (B, H, Nq, D)
        B, H, Nq, D = out.shape
        return self.proj(out.transpose(1, 2).reshape(B, Nq, H * D))

    def probabilities(self, q: Tensor, k: Tensor, *, encoding: Encoding | None = None, q_offset: int = 0,
                      positions: Tensor | None = None, key_mask: Tensor | None = None,
                      attn_mask: Tensor | None = None, key_padding_mask: Tensor | None = None) -> Tensor:
        """Attention probabilities ``(B, H, Nq, Nk)`` float32 (before dropout); rows with no allowed key are zeros."""
        from relpos.attention import logits

        key_mask = resolve_key_mask("probabilities", key_mask, key_padding_mask)
        z = logits(q, k, self._enc(encoding), causal=self.causal, key_mask=key_mask, attn_mask=attn_mask,
                   q_offset=q_offset, positions=positions).float()  # (B, H, Nq, Nk), -inf where masked
        allowed = torch.isfinite(z).any(-1, keepdim=True)
        return torch.where(allowed, torch.softmax(z.masked_fill(~allowed, 0.0), dim=-1), torch.zeros_like(z))

    # ----------------------------------------------------------------- forward

    def forward(
        self,
        x: Tensor,
        *,
        cache: KVCache | None = None,
        key_mask: Tensor | None = None,
        positions: Tensor | None = None,
        encoding: Encoding | None = None,
        attn_mask: Tensor | None = None,
        padding_mask: Tensor | None = None,
    ) -> tuple[Tensor, KVCache | None]:
        """Self-attention over ``x (B, N, C)``, after the tokens in ``cache``.

        Args:
            x: ``(B, N, C)`` the new tokens.
            cache: a :class:`KVCache` (causal layers only): the new tokens attend
                to the cached ones and are appended to it (only if the step
                succeeds: a refused step leaves the cache as it was). None: no cache.
            key_mask: ``(B, N)`` bool, **True = a real token** to attend to (left or
                right padding is False); kept in the cache for later steps. The
                opposite of ``torch.nn.MultiheadAttention``'s ``key_padding_mask``
                (True = ignore): pass ``~key_padding_mask``.
            positions: ``(N,)`` or ``(B, N)`` integer positions of the new tokens
                (default: ``L..L+N-1`` after ``L`` cached tokens).
            encoding: use this scheme module instead of ``self.encoding`` (a
                model that owns its schemes elsewhere passes them here).
            attn_mask: optional bool ``(B or 1, H or 1, N, L + N)`` (``L`` cached
                tokens), True = attend; combined with causality and ``key_mask``.
                Not kept in the cache.
            padding_mask: deprecated alias of ``key_mask`` (same meaning; warns once).

        Returns:
            ``y (B, N, C)`` and the cache (the same object, extended; None if none).
        """
        if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be a (B, N, d_model={self.d_model}) tensor, got "
                             f"{tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__}")
        B, N, _ = x.shape
        if B < 1 or N < 1:
            raise ValueError(f"x must hold at least one batch row and one token, got shape {tuple(x.shape)}")
        mask_name = "key_mask" if padding_mask is None else "padding_mask"  # for messages
        padding_mask = resolve_key_mask("RelativeSelfAttention.forward", key_mask, padding_mask, "padding_mask")
        if positions is not None:
            positions = check_positions(positions, B, N)
        if padding_mask is not None:
            if not isinstance(padding_mask, Tensor) or padding_mask.dtype != torch.bool:
                raise TypeError(f"{mask_name} must be a bool tensor (True = a real token)")
            if tuple(padding_mask.shape) != (B, N):
                raise ValueError(f"{mask_name} must have shape (B, N) = ({B}, {N}), got {tuple(padding_mask.shape)}")
        q, k, v = self.project(x)
        L = 0
        if cache is not None:
            if not isinstance(cache, KVCache):
                raise TypeError(f"cache must be a relpos.nn.KVCache, got {type(cache).__name__}")
            if not self.causal:
                raise ValueError("cache needs a causal layer (causal=True): a bidirectional layer's earlier "
                                 "outputs change with every new token")
            L = cache.length
            state = cache.extended(k, v, positions=positions, padding_mask=padding_mask)  # nothing changed yet
            k, v, positions, padding_mask = state
        y = self.attend(q, k, v, encoding=encoding, q_offset=L, positions=positions, key_mask=padding_mask,
                        attn_mask=attn_mask)
        if cache is not None:
            cache.commit(*state)  # only after the step succeeded: a refused step leaves the cache as it was
        return y, cache

    def extra_repr(self) -> str:
        name = self.encoding.name if self.encoding is not None else None
        return (f"d_model={self.d_model}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, "
                f"scheme={name!r}, causal={self.causal}, impl={self.impl!r}"
                + (f", dropout_p={self.dropout_p}" if self.dropout_p else ""))
