"""An explicit key/value cache for one attention layer (:class:`KVCache`).

Cached decoding in relpos is exact because the cache holds keys *before* rotation
and every step hands the whole key set to :func:`relpos.attention` with
``q_offset`` = the number of cached tokens: each scheme rotates, biases or gates
there exactly as in a full forward pass. Besides keys and values the cache keeps
what a later step needs to see the earlier tokens as the full pass saw them:
their positions (when explicit positions were given) and their padding. No scheme
in relpos keeps hidden state beyond that: CoPE's gates and FoX's forget gates are
functions of the cached keys and are recomputed from them at each step (see
``docs/use.md`` for the table).
"""

from __future__ import annotations

import torch
from torch import Tensor

from relpos.validation import MAX_POSITIONS, check_int

__all__ = ["KVCache"]


class KVCache:
    """Keys, values, positions and padding of the tokens one layer has seen so far.

    Mutable (as Hugging Face's caches): :meth:`RelativeSelfAttention.forward
    <relpos.nn.RelativeSelfAttention.forward>` appends to it and returns it.

    Attributes:
        keys: ``(B, Hkv, L, D)`` before rotation, or None when empty.
        values: ``(B, Hkv, L, Dv)``, or None.
        positions: ``(B or 1, L)`` int64 key positions, or None for ``0..L-1``.
        padding: ``(B, L)`` bool, True = a real token, or None for no padding.
        max_len: the most tokens it may hold (None = unbounded).

    Example:
        >>> import relpos, torch
        >>> attn = relpos.nn.RelativeSelfAttention(16, 4, "alibi", n_kv_heads=2, causal=True)
        >>> cache = relpos.nn.KVCache()
        >>> y, cache = attn(torch.randn(1, 3, 16), cache=cache)
        >>> y, cache = attn(torch.randn(1, 1, 16), cache=cache)
        >>> cache.length
        4
    """

    def __init__(self, max_len: int | None = None) -> None:
        if max_len is not None:
            check_int("max_len", max_len, 1, MAX_POSITIONS)
        self.max_len = max_len
        self.reset()

    def reset(self) -> None:
        """Forget every token."""
        self.keys: Tensor | None = None
        self.values: Tensor | None = None
        self.positions: Tensor | None = None
        self.padding: Tensor | None = None

    @property
    def length(self) -> int:
        """Number of cached tokens L."""
        return 0 if self.keys is None else int(self.keys.shape[2])

    @property
    def batch_size(self) -> int | None:
        return None if self.keys is None else int(self.keys.shape[0])

    def __repr__(self) -> str:
        return f"KVCache(length={self.length}, batch_size={self.batch_size}, max_len={self.max_len})"

    def append(self, k: Tensor, v: Tensor, *, positions: Tensor | None = None,
               padding_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        """Add ``n`` new tokens; return the whole ``(keys, values, positions, padding)`` to attend over.

        :meth:`extended` then :meth:`commit`; the layer calls the two apart so that a
        step refused in between (NaN input, out-of-range positions) leaves the cache
        as it was.
        """
        state = self.extended(k, v, positions=positions, padding_mask=padding_mask)
        self.commit(*state)
        return state

    def commit(self, keys: Tensor, values: Tensor, positions: Tensor | None, padding: Tensor | None) -> None:
        """Replace the cached state with what :meth:`extended` returned (all four together)."""
        self.keys, self.values, self.positions, self.padding = keys, values, positions, padding

    def extended(self, k: Tensor, v: Tensor, *, positions: Tensor | None = None,
                 padding_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        """The ``(keys, values, positions, padding)`` the cache would hold after adding ``n`` tokens,
        without changing it (new tensors; the cache's own are not modified).

        Args:
            k: ``(B, Hkv, n, D)`` new keys (not rotated); v: ``(B, Hkv, n, Dv)``.
            positions: ``(B or 1, n)`` int64 positions of the new tokens, or None
                (``L..L+n-1`` when the cache holds no explicit positions).
            padding_mask: ``(B, n)`` bool, True = a real token, or None.

        Raises:
            ValueError: a batch size, head count or width that differs from the
                cached tokens, or ``max_len`` exceeded.
        """
        B, Hkv, n, _ = k.shape
        L = self.length
        new_pos, new_pad = self.positions, self.padding
        if self.keys is not None:
            if (self.keys.shape[0], self.keys.shape[1], self.keys.shape[3]) != (B, Hkv, k.shape[3]):
                raise ValueError(
                    f"cache holds keys of shape (B, Hkv, L, D) = {tuple(self.keys.shape)}, the new keys have "
                    f"{tuple(k.shape)}; use one KVCache per layer and batch (reorder() for beam search)"
                )
        if self.max_len is not None and L + n > self.max_len:
            raise ValueError(f"cache max_len exceeded: {L} cached + {n} new > max_len={self.max_len}")
        check_int("cached length + new tokens", L + n, 1, MAX_POSITIONS)
        if positions is not None or self.positions is not None:
            if positions is None:
                positions = torch.arange(L, L + n, device=k.device)[None]
            if self.positions is None:
                old = torch.arange(L, device=k.device)[None].expand(positions.shape[0], L)
            else:
                old = self.positions
            if old.shape[0] != positions.shape[0]:
                old, positions = old.expand(B, L), positions.expand(B, n)
            new_pos = torch.cat([old, positions.to(old.device, torch.long)], dim=1)
        if padding_mask is not None or self.padding is not None:
            new = padding_mask if padding_mask is not None else torch.ones(B, n, dtype=torch.bool, device=k.device)
            old = self.padding if self.padding is not None else torch.ones(B, L, dtype=torch.bool, device=k.device)
            new_pad = torch.cat([old, new], dim=1)
        keys = k if self.keys is None else torch.cat([self.keys, k], dim=2)
        values = v if self.values is None else torch.cat([self.values, v], dim=2)
        return keys, values, new_pos, new_pad

    def crop(self, n: int) -> "KVCache":
        """Keep the first ``n`` tokens (``0 <= n <= length``), e.g. to roll back rejected draft tokens."""
        check_int("n", n, 0, self.length)
        if n == 0:
            self.reset()
            return self
        self.keys, self.values = self.keys[:, :, :n], self.values[:, :, :n]
        if self.positions is not None:
            self.positions = self.positions[:, :n]
        if self.padding is not None:
            self.padding = self.padding[:, :n]
        return self

    def reorder(self, index: Tensor) -> "KVCache":
        """Select batch rows ``index (B',)`` (beam search: the surviving beams, repeats allowed)."""
        if not isinstance(index, Tensor) or index.dtype.is_floating_point or index.dtype == torch.bool \
                or index.dim() != 1:
            raise TypeError("index must be a 1-D integer tensor of batch rows")
        if self.keys is None:
            return self
        B = self.keys.shape[0]
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= B):
            raise ValueError(f"index must hold batch rows in [0, {B}), got [{int(index.min())}, {int(index.max())}]")
        index = index.to(self.keys.device)
        self.keys, self.values = self.keys.index_select(0, index), self.values.index_select(0, index)
        if self.positions is not None and self.positions.shape[0] == B:
            self.positions = self.positions.index_select(0, index)
        if self.padding is not None:
            self.padding = self.padding.index_select(0, index)
        return self
