"""Decoding state and methods: :class:`KVCache`, :class:`Memory`, cached ``step``/``generate`` and segment memory.

:class:`DecodingMixin` holds the incremental-decoding methods of
:class:`~relpos.model.TransformerLM`; it relies on the stack's ``blocks``,
``_embed``, ``ln_f``, ``logits``, ``layer_encoding`` and checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from relpos.validation import MAX_POSITIONS, check_bool, check_float, check_int

__all__ = ["KVCache", "Memory", "DecodingMixin"]


@dataclass(frozen=True)
class KVCache:
    """Keys and values of every layer for the tokens decoded so far.

    Attributes:
        keys: per layer ``(B, H, L, D)``, *before* rotation (schemes rotate at use).
        values: per layer ``(B, H, L, D)``.
        capacity: the most tokens this cache may hold (None = unbounded).
    """

    keys: tuple[Tensor, ...]
    values: tuple[Tensor, ...]
    capacity: int | None = None

    @property
    def length(self) -> int:
        """Number of cached tokens L."""
        return int(self.keys[0].shape[2]) if self.keys else 0

    @property
    def batch_size(self) -> int:
        return int(self.keys[0].shape[0])


@dataclass(frozen=True)
class Memory:
    """Transformer-XL segment memory: detached inputs of every layer for the last M tokens.

    Attributes:
        hidden: per layer ``(B, M, C)``; entry ``l`` is what entered layer ``l``.
    """

    hidden: tuple[Tensor, ...]

    @property
    def length(self) -> int:
        return int(self.hidden[0].shape[1]) if self.hidden else 0


class DecodingMixin:
    """Cached incremental decoding and Transformer-XL segment recurrence for a causal stack."""

    # --------------------------------------------------------- cached decoding

    def _require_causal(self, what: str) -> None:
        if not self.causal:
            raise ValueError(f"{what} needs a causal model (ModelConfig.causal=True)")

    def init_cache(self, batch_size: int, max_len: int | None = None) -> KVCache:
        """An empty cache for ``batch_size`` sequences.

        Args:
            batch_size: B.
            max_len: optional capacity; must fit a learned absolute table.

        Raises:
            ValueError: non-causal model, or ``max_len`` beyond the learned table.
        """
        self._require_causal("cached decoding")
        check_int("batch_size", batch_size, 1)
        if max_len is not None:
            check_int("max_len", max_len, 1, MAX_POSITIONS)
            self._check_limit(max_len, "cache length max_len")
        p = self.tok_emb.weight
        H, D = self.cfg.n_heads, self.cfg.head_dim
        empty = tuple(p.new_zeros(batch_size, H, 0, D) for _ in self.blocks)
        return KVCache(keys=empty, values=tuple(p.new_zeros(batch_size, H, 0, D) for _ in self.blocks),
                       capacity=max_len)

    def step(self, idx: Tensor, cache: KVCache) -> tuple[Tensor, KVCache]:
        """Run ``n`` new tokens after the cached ones; nothing is mutated.

        Args:
            idx: ``(B, n)`` int64, the next tokens (n >= 1; a prompt at once is fine).
            cache: from :meth:`init_cache` or a previous :meth:`step`.

        Returns:
            ``logits (B, n, V)`` and the cache extended by the new tokens. For
            every scheme but one they equal the full forward's logits over all
            ``L + n`` tokens at the new positions (up to float rounding). The
            exception is RoPE with dynamic NTK scaling (``rope-dynamic``), which
            rescales with the current length: a step matches a full pass *of the
            same total length* ``L + n`` (exactly in a one-layer model; deeper
            layers reuse cached keys computed at shorter lengths), and once the
            length exceeds ``max_len`` it differs from a longer full pass.
        """
        self._require_causal("cached decoding")
        if not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache (from init_cache), got {type(cache).__name__}")
        self._check_idx(idx)
        B, n = idx.shape
        if cache.batch_size != B:
            raise ValueError(f"idx has batch size {B} but the cache was made for {cache.batch_size}")
        L = cache.length
        if cache.capacity is not None and L + n > cache.capacity:
            raise ValueError(f"cache capacity exceeded: {L} cached + {n} new > max_len={cache.capacity}")
        self._check_limit(L + n, "cached length")
        h = self._embed(idx, None, offset=L)
        keys, values = [], []
        for i, blk in enumerate(self.blocks):
            past = (cache.keys[i], cache.values[i]) if L else None
            h, (k, v) = blk(h, self.layer_encoding(i), past=past)
            keys.append(k)
            values.append(v)
        return self.logits(self.ln_f(h)), KVCache(tuple(keys), tuple(values), cache.capacity)

    @torch.no_grad()
    def generate(
        self,
        idx: Tensor,
        max_new_tokens: int,
        *,
        greedy: bool = False,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int | None = None,
    ) -> Tensor:
        """Continue ``idx (B, N)`` by ``max_new_tokens`` tokens with the KV cache.

        Args:
            idx: prompt token ids.
            max_new_tokens: tokens to add (>= 0).
            greedy: take the most likely token (ignores temperature and top_k).
            temperature: softmax temperature (> 0).
            top_k: sample among the k most likely tokens only.
            seed: seed of the sampling generator (None = nondeterministic).

        Each new token's logits come from :meth:`step` (see its note on
        ``rope-dynamic``).

        Returns:
            ``(B, N + max_new_tokens)`` int64.
        """
        self._check_idx(idx)
        check_int("max_new_tokens", max_new_tokens, 0, MAX_POSITIONS)
        check_bool("greedy", greedy)
        if not greedy:
            check_float("temperature", temperature, 0.0, lo_open=True)
        if top_k is not None:
            check_int("top_k", top_k, 1)
        B, N = idx.shape
        total = N + max_new_tokens
        self._check_limit(total, "prompt + max_new_tokens")
        was_training = self.training
        self.eval()
        gen = None
        if seed is not None:
            check_int("seed", seed, 0, 2**64 - 1)
            gen = torch.Generator(device=idx.device).manual_seed(seed)
        try:
            cache = self.init_cache(B)
            out = [idx]
            logits, cache = self.step(idx, cache)
            for t in range(max_new_tokens):
                last = logits[:, -1].float()  # (B, V)
                if greedy:
                    nxt = last.argmax(dim=-1, keepdim=True)
                else:
                    last = last / temperature
                    if top_k is not None and top_k < last.shape[-1]:
                        kth = last.topk(top_k, dim=-1).values[:, -1:]
                        last = last.masked_fill(last < kth, float("-inf"))
                    probs = torch.softmax(last, dim=-1)
                    nxt = torch.multinomial(probs, 1, generator=gen)
                out.append(nxt)
                if t + 1 < max_new_tokens:
                    logits, cache = self.step(nxt, cache)
        finally:
            self.train(was_training)
        return torch.cat(out, dim=1)

    # ------------------------------------------------------- segment recurrence

    def forward_with_memory(
        self, idx: Tensor, memory: Memory | None = None, mem_len: int | None = None
    ) -> tuple[Tensor, Memory]:
        """Transformer-XL segment-level recurrence with any relative scheme.

        Each layer attends over ``[memory ; segment]``: keys and values of the
        memory come from the *detached* inputs of that layer for the previous
        ``M`` tokens (through the current weights), with positions ``0..M+N-1``
        and the segment's queries at ``M..M+N-1``; relative schemes only see
        ``j - i``, so distances stay consistent across segments.

        Args:
            idx: ``(B, N)`` tokens of this segment.
            memory: from the previous call (None at the start).
            mem_len: tokens of memory to keep for the next segment (default N).

        Returns:
            ``logits (B, N, V)`` and the new memory (detached).

        Raises:
            ValueError: an absolute scheme (positions added to the embeddings
                would restart each segment), a non-causal model, or a batch
                size that does not match the memory.
        """
        self._require_causal("segment memory")
        if self.input_encoding is not None:
            raise ValueError(
                f"segment memory needs a relative scheme; {self.cfg.scheme!r} adds absolute positions to the "
                f"input embeddings"
            )
        self._check_idx(idx)
        B, N = idx.shape
        if mem_len is None:
            mem_len = N
        check_int("mem_len", mem_len, 0)
        if memory is not None:
            if not isinstance(memory, Memory):
                raise TypeError(f"memory must be a Memory (from forward_with_memory), got {type(memory).__name__}")
            if len(memory.hidden) != len(self.blocks):
                raise ValueError(f"memory has {len(memory.hidden)} layers, the model {len(self.blocks)}")
            if memory.length and memory.hidden[0].shape[0] != B:
                raise ValueError(f"idx has batch size {B} but the memory {memory.hidden[0].shape[0]}")
        M = memory.length if memory is not None else 0
        h = self._embed(idx, None)
        new_hidden = []
        for i, blk in enumerate(self.blocks):
            past = None
            if M:
                mem_h = memory.hidden[i]  # (B, M, C), detached
                past = blk.attn.project_kv(blk.ln1(mem_h))
                cat = torch.cat([mem_h, h], dim=1)
            else:
                cat = h
            new_hidden.append(cat[:, cat.shape[1] - min(mem_len, cat.shape[1]):].detach())
            h, _ = blk(h, self.layer_encoding(i), past=past)
        return self.logits(self.ln_f(h)), Memory(tuple(new_hidden))
