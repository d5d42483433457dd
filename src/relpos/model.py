"""Transformer models that take any position scheme by name.

* :class:`ModelConfig` -- one flat, JSON-able dataclass; the scheme is a name
  (``scheme="t5"``) plus that scheme's own options (``scheme_options``). Named
  presets: :data:`PRESETS` (``tiny``, ``small``, ``medium``, ``base``).
* :class:`MultiHeadAttention` -- self-attention (causal or bidirectional, with key
  padding) that takes a scheme as one typed object (an :class:`~relpos.Encoding`);
  everything position-related happens in :func:`relpos.attention`.
* :class:`TransformerLM` -- decoder-only, pre-LayerNorm, tied input/output
  embeddings; full forward, cached incremental decoding (:meth:`TransformerLM.step`,
  :meth:`TransformerLM.generate`) and Transformer-XL segment recurrence
  (:meth:`TransformerLM.forward_with_memory`).
* :class:`TransformerEncoder` -- the same stack, bidirectional.

Where a scheme's parameters live
--------------------------------
The model owns the scheme modules in ``model.pos`` (an ``nn.ModuleList``):

* schemes that only act on the input embeddings (sinusoidal, learned absolute) and
  NoPE: one module, used once at the input;
* otherwise one module per layer (``len(model.pos) == n_layers``), or one module
  shared by every layer when ``share_encoding=True``. ``share_encoding=None``
  takes the scheme's default: shared for T5 (T5 computes its bias in the first
  layer and reuses it in all layers) and for any scheme class that sets
  ``share_across_layers = True``; per layer otherwise (so Transformer-XL's ``u``
  and ``v`` are per layer by default and shared with ``share_encoding=True``).

Keys in the KV cache and in segment memory are stored *before* any rotation:
every call hands the whole key set to :func:`relpos.attention` with
``q_offset`` = number of earlier tokens, and the scheme rotates or biases there.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import relpos
from relpos.encodings import Dims, Encoding, get_scheme, make_encoding, normalise_name

__all__ = [
    "ModelConfig",
    "PRESETS",
    "MultiHeadAttention",
    "Block",
    "TransformerLM",
    "TransformerEncoder",
    "KVCache",
    "Memory",
    "position_limit",
]

#: Named model sizes; any field can be overridden (``ModelConfig.preset("small", scheme="t5")``).
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"d_model": 32, "n_layers": 2, "n_heads": 2, "max_len": 256},
    "small": {"d_model": 128, "n_layers": 4, "n_heads": 4, "max_len": 1024},
    "medium": {"d_model": 256, "n_layers": 6, "n_heads": 8, "max_len": 2048},
    "base": {"d_model": 512, "n_layers": 8, "n_heads": 8, "max_len": 2048},
}


def _check_int(name: str, v, lo: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")


@dataclass
class ModelConfig:
    """Everything needed to build a model; flat and JSON-able.

    Attributes:
        vocab_size: token vocabulary V (256 for bytes).
        d_model: width C.
        n_layers: Transformer blocks L.
        n_heads: heads H; ``d_model`` must be divisible by it (head dim D = C / H).
        max_len: longest sequence the scheme is built for (size of learned absolute
            tables; the original length of RoPE scalings).
        causal: causal attention (an LM) or bidirectional.
        dropout: dropout on embeddings and residual branches.
        scheme: position scheme name (``relpos.encodings.scheme_names()``).
        scheme_options: the scheme's own options (e.g. ``{"num_buckets": 16}`` for t5).
        share_encoding: one scheme module for all layers (True), one per layer
            (False), or the scheme's default (None: shared for t5 only).
        random_positions: randomized positions (Ruoss et al. 2023,
            https://arxiv.org/abs/2305.16843): at train time the positions of a
            length-N row are a sorted random sample of N distinct integers from
            ``[0, random_positions)``; at eval time ``0..N-1``. None = off. Only
            schemes driven by integer positions use them.
        attn_impl: attention implementation (``relpos.attention.available_impls()``);
            ``"auto"`` (default) picks the fastest exact one for the device, shape and mode.
        d_ff: MLP hidden width (None = 4 * d_model).
    """

    vocab_size: int = 256
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    max_len: int = 1024
    causal: bool = True
    dropout: float = 0.0
    scheme: str = "rope"
    scheme_options: dict = field(default_factory=dict)
    share_encoding: bool | None = None
    random_positions: int | None = None
    attn_impl: str = "auto"
    d_ff: int | None = None

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ checks

    def validate(self) -> None:
        """Raise ValueError/TypeError naming the first contradiction found."""
        for name, lo in (("vocab_size", 2), ("d_model", 1), ("n_layers", 1), ("n_heads", 1), ("max_len", 1)):
            _check_int(name, getattr(self, name), lo)
        if self.d_model % self.n_heads:
            raise ValueError(
                f"n_heads ({self.n_heads}) must divide d_model ({self.d_model}): head dim would be "
                f"{self.d_model / self.n_heads:g}"
            )
        if not isinstance(self.causal, bool):
            raise TypeError(f"causal must be a bool, got {self.causal!r}")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be a float in [0, 1), got {self.dropout!r}")
        self.scheme = normalise_name(self.scheme, "scheme")
        get_scheme(self.scheme)  # unknown scheme -> ValueError listing the known ones
        if not isinstance(self.scheme_options, dict) or not all(isinstance(k, str) for k in self.scheme_options):
            raise TypeError(f"scheme_options must be a dict with str keys, got {self.scheme_options!r}")
        if self.share_encoding is not None and not isinstance(self.share_encoding, bool):
            raise TypeError(f"share_encoding must be True, False or None, got {self.share_encoding!r}")
        if self.random_positions is not None:
            _check_int("random_positions", self.random_positions, 1)
        if self.d_ff is not None:
            _check_int("d_ff", self.d_ff, 1)
        from relpos.attention import IMPLS

        if not isinstance(self.attn_impl, str) or self.attn_impl not in IMPLS:
            raise ValueError(f"attn_impl must be one of {sorted(IMPLS)}, got {self.attn_impl!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def dims(self, causal: bool | None = None) -> Dims:
        """The :class:`~relpos.encodings.Dims` the scheme is built with."""
        return Dims(
            n_heads=self.n_heads,
            head_dim=self.head_dim,
            d_model=self.d_model,
            max_len=self.max_len,
            causal=self.causal if causal is None else causal,
        )

    def make_encoding(self, causal: bool | None = None) -> Encoding:
        """Build one scheme module for this configuration."""
        d = self.dims(causal)
        return make_encoding(
            self.scheme, n_heads=d.n_heads, head_dim=d.head_dim, d_model=d.d_model, max_len=d.max_len,
            causal=d.causal, **self.scheme_options,
        )

    def resolved_share_encoding(self) -> bool:
        """``share_encoding`` with None replaced by the scheme's default."""
        if self.share_encoding is not None:
            return self.share_encoding
        cls, _ = get_scheme(self.scheme)
        default = getattr(cls, "share_across_layers", None)
        if default is None:
            default = cls.name == "t5"
        return bool(default)

    # ----------------------------------------------------------- constructors

    @classmethod
    def preset(cls, name: str, **overrides) -> "ModelConfig":
        """A named preset (:data:`PRESETS`) with fields overridden.

        Raises:
            ValueError: unknown preset; TypeError: unknown field.
        """
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - fields)
        if unknown:
            raise TypeError(f"unknown ModelConfig field(s) {unknown}; fields: {sorted(fields)}")
        kw = dict(PRESETS[name])
        kw.update(overrides)
        return cls(**kw)

    def to_dict(self) -> dict:
        """JSON-able dict (round-trips through :meth:`from_dict`)."""
        d = dataclasses.asdict(self)
        d["scheme_options"] = copy.deepcopy(self.scheme_options)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        """Inverse of :meth:`to_dict`; unknown keys raise ValueError naming them."""
        if not isinstance(d, dict):
            raise TypeError(f"model config must be a dict, got {type(d).__name__}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields)
        if unknown:
            raise ValueError(f"unknown model config field(s) {unknown}; fields: {sorted(fields)}")
        return cls(**copy.deepcopy(d))

    def replace(self, **changes) -> "ModelConfig":
        """A validated copy with some fields changed."""
        return dataclasses.replace(self, **changes)


def position_limit(enc: Encoding | None) -> int | None:
    """Number of positions a scheme's *learned absolute table* covers, else None.

    Only schemes that add learned vectors to the input embeddings have such a
    limit; they expose it as ``max_len`` (or as the first dim of an
    ``nn.Embedding``).
    """
    if enc is None or "embedding" not in enc.acts_on or enc.num_params() == 0:
        return None
    n = getattr(enc, "max_len", None)
    if isinstance(n, int) and not isinstance(n, bool):
        return n
    for m in enc.modules():
        if isinstance(m, nn.Embedding):
            return m.num_embeddings
    return None


# --------------------------------------------------------------------- layers


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
        causal: causal (True) or bidirectional attention.
        impl: implementation name for :func:`relpos.attention`.
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
        causal: bool = False,
        impl: str = "dense",
        bias: bool = True,
    ) -> None:
        super().__init__()
        _check_int("d_model", d_model, 1)
        _check_int("n_heads", n_heads, 1)
        if d_model % n_heads:
            raise ValueError(f"n_heads ({n_heads}) must divide d_model ({d_model})")
        if isinstance(encoding, str):
            encoding = make_encoding(encoding, n_heads=n_heads, head_dim=d_model // n_heads, d_model=d_model,
                                     causal=causal)
        if encoding is not None and not isinstance(encoding, Encoding):
            raise TypeError(f"encoding must be a relpos Encoding, a scheme name or None, got {type(encoding).__name__}")
        if encoding is not None:
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
        enc = self.encoding if encoding is None else encoding
        if enc is not None and not (enc.acts_on - {"embedding"}):
            return None  # acts only at the input (or nowhere): nothing to do in attention
        return enc

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
        from relpos.attention import Request, _make_positions
        from relpos.attention.dense import additive_terms, rotated_qk
        from relpos.attention.reference import masked_softmax
        from relpos.encodings.nope import NoPE

        enc = self._enc(encoding) or NoPE(q.shape[1])
        B, H, Nq, D = q.shape
        qpos, kpos, contiguous = _make_positions(positions, B, Nq, k.shape[2], q_offset, q.device)
        req = Request(q, k, k, enc, self.causal, key_padding_mask, q_offset, qpos, kpos, contiguous,
                      float(enc.attention_scale(D)))
        qr, kr = rotated_qk(req)
        logits = req.scale * (qr.float() @ kr.float().transpose(-1, -2))  # (B, H, Nq, Nk)
        add = additive_terms(req, qr, kr)
        if add is not None:
            logits = logits + add.float()
        return masked_softmax(logits, req.mask())

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
    """Pre-LayerNorm Transformer block: ``h + attn(LN(h))``, then ``h + mlp(LN(h))``."""

    def __init__(self, cfg: ModelConfig, causal: bool) -> None:
        super().__init__()
        C = cfg.d_model
        self.ln1 = nn.LayerNorm(C)
        self.attn = MultiHeadAttention(C, cfg.n_heads, None, causal=causal, impl=cfg.attn_impl)
        self.ln2 = nn.LayerNorm(C)
        d_ff = cfg.d_ff or 4 * C
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
        h = h + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(h)))))
        return h, (k, v)


# --------------------------------------------------------------- state types


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


# --------------------------------------------------------------------- models


class _Stack(nn.Module):
    """Token embedding, scheme modules, blocks and final LayerNorm (shared by LM and encoder)."""

    def __init__(self, cfg: ModelConfig, causal: bool) -> None:
        super().__init__()
        if not isinstance(cfg, ModelConfig):
            raise TypeError(f"cfg must be a ModelConfig, got {type(cfg).__name__}")
        cfg = ModelConfig.from_dict(cfg.to_dict())  # validated private copy
        self.cfg = cfg
        self.causal = causal
        enc0 = cfg.make_encoding(causal)
        enc0.check_causal(causal)
        self.attention_sites = enc0.acts_on - {"embedding"}
        shared = cfg.resolved_share_encoding() or not self.attention_sites
        encs = [enc0] + ([] if shared else [cfg.make_encoding(causal) for _ in range(cfg.n_layers - 1)])
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.ModuleList(encs)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, causal) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.max_positions = position_limit(enc0)
        if self.max_positions is not None and cfg.random_positions is not None and enc0.integer_positions \
                and cfg.random_positions > self.max_positions:
            raise ValueError(
                f"random_positions ({cfg.random_positions}) exceeds the learned absolute position table of "
                f"scheme {cfg.scheme!r} (max_len={self.max_positions})"
            )
        self._init_weights()

    def _init_weights(self) -> None:
        std = 0.02
        nn.init.normal_(self.tok_emb.weight, std=std)
        for b in self.blocks:
            for lin in (b.attn.qkv, b.fc1):
                nn.init.normal_(lin.weight, std=std)
                nn.init.zeros_(lin.bias)
            for lin in (b.attn.proj, b.fc2):  # residual projections, GPT-2 style
                nn.init.normal_(lin.weight, std=std / math.sqrt(2 * self.cfg.n_layers))
                nn.init.zeros_(lin.bias)

    # ---------------------------------------------------------------- helpers

    @property
    def input_encoding(self) -> Encoding | None:
        """The scheme module applied to the input embeddings, or None."""
        return self.pos[0] if "embedding" in self.pos[0].acts_on else None

    def layer_encoding(self, layer: int) -> Encoding | None:
        """The scheme module layer ``layer`` passes to attention, or None."""
        if not self.attention_sites:
            return None
        return self.pos[layer if len(self.pos) > 1 else 0]

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def _check_idx(self, idx) -> None:
        if not isinstance(idx, Tensor):
            raise TypeError(f"idx must be a torch.Tensor of token ids, got {type(idx).__name__}")
        if idx.dtype.is_floating_point or idx.dtype == torch.bool:
            raise TypeError(f"idx must have an integer dtype, got {idx.dtype}")
        if idx.dim() != 2 or idx.shape[1] < 1 or idx.shape[0] < 1:
            raise ValueError(f"idx must have shape (B, N) with B, N >= 1, got {tuple(idx.shape)}")
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= self.cfg.vocab_size):
            raise ValueError(f"token ids must be in [0, vocab_size={self.cfg.vocab_size}), "
                             f"got range [{int(idx.min())}, {int(idx.max())}]")

    def _check_limit(self, n_positions: int, what: str) -> None:
        if self.max_positions is not None and n_positions > self.max_positions:
            raise ValueError(
                f"{what} ({n_positions}) exceeds the learned absolute position table of scheme "
                f"{self.cfg.scheme!r} (max_len={self.max_positions}); build the model with a larger max_len"
            )

    def _positions(self, positions: Tensor | None, B: int, N: int, device) -> Tensor | None:
        """Validated ``(B or 1, N)`` positions, randomized ones in training, or None (= 0..N-1)."""
        if positions is not None:
            if not isinstance(positions, Tensor) or positions.dtype.is_floating_point or positions.dtype == torch.bool:
                raise TypeError("positions must be an integer torch.Tensor")
            if positions.dim() == 1:
                positions = positions[None]
            if positions.dim() != 2 or positions.shape[1] != N or positions.shape[0] not in (1, B):
                raise ValueError(f"positions must have shape (N,) or (B, N) = ({B}, {N}), got {tuple(positions.shape)}")
            positions = positions.to(device=device, dtype=torch.long)
            if int(positions.min()) < 0:
                raise ValueError("positions must be >= 0")
            self._check_limit(int(positions.max()) + 1, "largest position + 1")
            return positions
        R = self.cfg.random_positions
        if self.training and R is not None and self.pos[0].integer_positions:
            if N > R:
                raise ValueError(f"sequence length {N} exceeds random_positions ({R}): cannot draw {N} distinct positions")
            # sorted sample of N distinct positions from [0, R), one per row
            keys = torch.rand(B, R, device=device)
            return keys.topk(N, dim=1).indices.sort(dim=1).values
        self._check_limit(N, "sequence length")
        return None

    def _embed(self, idx: Tensor, positions: Tensor | None, offset: int = 0) -> Tensor:
        h = self.tok_emb(idx)  # (B, N, C)
        enc = self.input_encoding
        if enc is not None:
            pos = positions if positions is not None else torch.arange(offset, offset + idx.shape[1],
                                                                       device=idx.device)[None]
            h = enc.embed(h, pos)
        return self.drop(h)

    def hidden_states(self, idx: Tensor, *, positions: Tensor | None = None,
                      key_padding_mask: Tensor | None = None) -> Tensor:
        """Final-LayerNorm outputs ``(B, N, C)``."""
        self._check_idx(idx)
        B, N = idx.shape
        positions = self._positions(positions, B, N, idx.device)
        h = self._embed(idx, positions)
        for i, blk in enumerate(self.blocks):
            h, _ = blk(h, self.layer_encoding(i), positions=positions, key_padding_mask=key_padding_mask)
        return self.ln_f(h)

    @torch.no_grad()
    def attention_maps(self, idx: Tensor, *, positions: Tensor | None = None,
                       key_padding_mask: Tensor | None = None) -> list[Tensor]:
        """Attention probabilities of every layer (eval-time positions unless given).

        Args:
            idx: ``(B, N)`` token ids (the explorer passes ``B = 1``).

        Returns:
            One ``(B, H, N, N)`` float32 tensor per layer; row ``t`` sums to 1
            over the keys query ``t`` may attend to.
        """
        self._check_idx(idx)
        B, N = idx.shape
        was_training = self.training
        self.eval()
        try:
            positions = self._positions(positions, B, N, idx.device)
            h = self._embed(idx, positions)
            maps = []
            for i, blk in enumerate(self.blocks):
                q, k, _ = blk.attn.project(blk.ln1(h))
                maps.append(blk.attn.probabilities(q, k, encoding=self.layer_encoding(i), positions=positions,
                                                   key_padding_mask=key_padding_mask).float())
                h, _ = blk(h, self.layer_encoding(i), positions=positions, key_padding_mask=key_padding_mask)
        finally:
            self.train(was_training)
        return maps


class TransformerLM(_Stack):
    """Decoder-only language model: pre-LayerNorm blocks, tied input/output embeddings.

    Args:
        cfg: the configuration (``cfg.causal`` should be True for language
            modelling; cached decoding and segment memory require it).

    Example:
        >>> cfg = ModelConfig.preset("tiny", scheme="alibi")
        >>> model = TransformerLM(cfg)
        >>> model(torch.zeros(2, 7, dtype=torch.long)).shape
        torch.Size([2, 7, 256])
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg, causal=cfg.causal)

    def logits(self, h: Tensor) -> Tensor:
        """Tied output layer: ``(B, N, C)`` final hidden states -> ``(B, N, V)``."""
        return F.linear(h, self.tok_emb.weight)

    def forward(self, idx: Tensor, *, positions: Tensor | None = None,
                key_padding_mask: Tensor | None = None) -> Tensor:
        """Logits for every position.

        Args:
            idx: ``(B, N)`` int64 token ids.
            positions: optional ``(N,)`` or ``(B, N)`` int64 positions (default
                ``0..N-1``, or randomized ones in training when configured).
            key_padding_mask: optional ``(B, N)`` bool, True = a real token.

        Returns:
            ``(B, N, V)`` logits.

        Raises:
            ValueError: N (or a position) beyond a learned absolute table, bad shapes.
        """
        return self.logits(self.hidden_states(idx, positions=positions, key_padding_mask=key_padding_mask))

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
        _check_int("batch_size", batch_size, 1)
        if max_len is not None:
            _check_int("max_len", max_len, 1)
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
            ``logits (B, n, V)`` (equal to the full forward's logits at those
            positions) and the cache extended by the new tokens.
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

        Returns:
            ``(B, N + max_new_tokens)`` int64.
        """
        self._check_idx(idx)
        _check_int("max_new_tokens", max_new_tokens, 0)
        if not greedy and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
                           or not temperature > 0):
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        if top_k is not None:
            _check_int("top_k", top_k, 1)
        B, N = idx.shape
        total = N + max_new_tokens
        self._check_limit(total, "prompt + max_new_tokens")
        was_training = self.training
        self.eval()
        gen = None
        if seed is not None:
            gen = torch.Generator(device=idx.device).manual_seed(int(seed))
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
        _check_int("mem_len", mem_len, 0)
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


class TransformerEncoder(_Stack):
    """Bidirectional pre-LayerNorm encoder stack (``cfg.causal`` is ignored: always bidirectional).

    ``forward`` returns final hidden states ``(B, N, C)``; :meth:`logits` maps them
    to the vocabulary with the tied embedding (e.g. for masked-token prediction).

    Example:
        >>> enc = TransformerEncoder(ModelConfig.preset("tiny", scheme="t5"))
        >>> enc(torch.zeros(1, 5, dtype=torch.long)).shape
        torch.Size([1, 5, 32])
    """

    def __init__(self, cfg: ModelConfig) -> None:
        cls, _ = get_scheme(cfg.scheme)
        if cls.causal_only:
            raise ValueError(f"scheme {cfg.scheme!r} is causal-only; TransformerEncoder is bidirectional")
        super().__init__(cfg, causal=False)

    def logits(self, h: Tensor) -> Tensor:
        return F.linear(h, self.tok_emb.weight)

    def forward(self, idx: Tensor, *, positions: Tensor | None = None,
                key_padding_mask: Tensor | None = None) -> Tensor:
        """``idx (B, N)`` -> hidden states ``(B, N, C)``; padding via ``key_padding_mask`` (True = real)."""
        return self.hidden_states(idx, positions=positions, key_padding_mask=key_padding_mask)
