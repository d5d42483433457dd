"""The Transformer stacks: :class:`TransformerLM` (decoder-only) and :class:`TransformerEncoder`."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from relpos.encodings import Encoding, get_scheme
from relpos.model.config import ModelConfig, position_limit
from relpos.model.decoding import DecodingMixin
from relpos.model.layers import Block
from relpos.nn.attention import check_positions

__all__ = ["TransformerLM", "TransformerEncoder"]


class _Stack(nn.Module):
    """Token embedding, scheme modules, blocks and final LayerNorm (shared by LM and encoder)."""

    def __init__(self, cfg: ModelConfig, causal: bool) -> None:
        super().__init__()
        if not isinstance(cfg, ModelConfig):
            raise TypeError(f"cfg must be a ModelConfig, got {type(cfg).__name__}")
        cfg = ModelConfig.from_dict(cfg.to_dict())  # validated private copy
        self.cfg = cfg
        self.causal = causal
        # Paired initialisation: one draw from the global generator seeds the shared
        # (non-position) weights, before any scheme consumes random numbers.
        init_seed = int(torch.randint(0, 2**62, (1,), device="cpu"))
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
        self.embed_multiplier = math.sqrt(cfg.d_model) if cfg.embed_scale == "sqrt_d" else 1.0
        self._init_weights(torch.Generator(device="cpu").manual_seed(init_seed))

    @torch.no_grad()
    def _init_weights(self, gen: torch.Generator) -> None:
        """Initialise every non-position weight from ``gen`` (a CPU generator: the same on any device)."""
        std = 0.02

        def draw(w: Tensor, s: float, uniform: bool = False) -> None:
            if w.device.type == "meta":  # shapes only (checkpoint checks): nothing to draw
                return
            r = torch.rand if uniform else torch.randn
            x = r(tuple(w.shape), generator=gen, dtype=torch.float32, device="cpu")
            w.copy_((2 * x - 1) * s if uniform else x * s)

        draw(self.tok_emb.weight, std)
        for b in self.blocks:
            mlp_in, mlp_out = ([b.fc1], [b.fc2]) if b.has_mlp else ([], [])
            inner, residual_out = [b.attn.qkv, *mlp_in], [b.attn.proj, *mlp_out]  # drawn in this order
            for lin, residual in [(m, False) for m in inner] + [(m, True) for m in residual_out]:
                if self.cfg.init == "fan_in":  # PyTorch's nn.Linear default: U(+-1/sqrt(fan_in)), bias zero
                    draw(lin.weight, 1.0 / math.sqrt(lin.in_features), uniform=True)
                else:  # GPT-2: N(0, 0.02^2), residual projections scaled by 1/sqrt(2 L)
                    draw(lin.weight, std / math.sqrt(2 * self.cfg.n_layers) if residual else std)
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
            positions = check_positions(positions, B, N).to(device=device, dtype=torch.long)
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

    def logits(self, h: Tensor) -> Tensor:
        """Tied output layer: ``(B, N, C)`` final hidden states -> ``(B, N, V)``."""
        return F.linear(h, self.tok_emb.weight)

    def _embed(self, idx: Tensor, positions: Tensor | None, offset: int = 0) -> Tensor:
        h = self.tok_emb(idx)  # (B, N, C)
        if self.embed_multiplier != 1.0:
            h = h * self.embed_multiplier
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
                                                   key_mask=key_padding_mask).float())
                h, _ = blk(h, self.layer_encoding(i), positions=positions, key_padding_mask=key_padding_mask)
        finally:
            self.train(was_training)
        return maps


class TransformerLM(DecodingMixin, _Stack):
    """Decoder-only language model: pre-LayerNorm blocks, tied input/output embeddings.

    Args:
        cfg: the configuration (``cfg.causal`` should be True for language
            modelling; cached decoding and segment memory require it).

    Cached decoding (:meth:`init_cache`, :meth:`step`, :meth:`generate`) and
    segment memory (:meth:`forward_with_memory`) come from
    :class:`~relpos.model.decoding.DecodingMixin`.

    Example:
        >>> cfg = ModelConfig.preset("tiny", scheme="alibi")
        >>> model = TransformerLM(cfg)
        >>> model(torch.zeros(2, 7, dtype=torch.long)).shape
        torch.Size([2, 7, 256])
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg, causal=cfg.causal)

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

    def forward(self, idx: Tensor, *, positions: Tensor | None = None,
                key_padding_mask: Tensor | None = None) -> Tensor:
        """``idx (B, N)`` -> hidden states ``(B, N, C)``; padding via ``key_padding_mask`` (True = real)."""
        return self.hidden_states(idx, positions=positions, key_padding_mask=key_padding_mask)
