"""Absolute position embeddings added to the token embeddings.

Papers:

* Sinusoidal: Vaswani et al. 2017, "Attention Is All You Need",
  https://arxiv.org/abs/1706.03762 (section 3.5).
* Learned: one trainable vector per position, as in Gehring et al. 2017
  (https://arxiv.org/abs/1705.03122) and GPT-2/BERT.

Both act on the ``"embedding"`` site only: ``x[b, n] + PE[pos[b, n]]`` is
formed once, before the first layer, and attention sees no positions at all.
They are *not* relative (``relative = False``): shifting every position by a
constant changes the model's output. Both are driven by integer positions, so
randomized positions (Ruoss et al. 2023, :mod:`relpos.encodings.randomized`)
apply to them; the learned table must then cover the largest sampled position.

Sinusoidal convention (interleaved, as in the paper), for channel pairs
``c = 0 .. C/2 - 1``::

    PE[p, 2c]     = sin(p / base^(2c / C))
    PE[p, 2c + 1] = cos(p / base^(2c / C))

with ``base = 10000``. An odd ``C`` keeps the final ``sin`` column. The table is
computed in float32 (float64 in the reference) whatever the model's dtype, and
cast to ``x``'s dtype only when it is added. No scaling of ``x`` happens here
(a model that wants the paper's ``sqrt(C)`` factor applies it itself).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from relpos.encodings.base import Encoding
from relpos.validation import MAX_TABLE, check_float, check_int

__all__ = ["Sinusoidal", "LearnedAbsolute", "sinusoidal_table"]


def _check_embed_args(x: Tensor, pos: Tensor, d_model: int) -> None:
    if not isinstance(x, Tensor) or not x.dtype.is_floating_point:
        raise TypeError("x must be a floating-point torch.Tensor of shape (B, N, C)")
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(f"x must have shape (B, N, C) with C = d_model = {d_model}, got {tuple(x.shape)}")
    if not isinstance(pos, Tensor) or pos.dtype.is_floating_point or pos.dtype == torch.bool:
        raise TypeError("pos must be an integer torch.Tensor of shape (B or 1, N)")
    if pos.dim() != 2 or pos.shape[-1] != x.shape[1] or pos.shape[0] not in (1, x.shape[0]):
        raise ValueError(
            f"pos must have shape (B or 1, N) = ({x.shape[0]} or 1, {x.shape[1]}), got {tuple(pos.shape)}"
        )


def sinusoidal_table(pos: Tensor, dim: int, base: float = 10000.0, *, dtype: torch.dtype = torch.float32) -> Tensor:
    """Interleaved sinusoids of (possibly negative) integer positions.

    Args:
        pos: integer tensor of positions, any shape ``S``.
        dim: number of channels ``C`` (>= 1).
        base: wavelength base (> 1).
        dtype: float32 (default) or float64.

    Returns:
        ``(*S, C)`` tensor with ``out[..., 2c] = sin(p * w_c)`` and
        ``out[..., 2c + 1] = cos(p * w_c)``, ``w_c = base^(-2c / C)``.

    Example:
        >>> sinusoidal_table(torch.tensor([0, 1]), 4)
        tensor([[0.0000, 1.0000, 0.0000, 1.0000],
                [0.8415, 0.5403, 0.0100, 0.9999]])
    """
    check_int("dim", dim, 1, MAX_TABLE)
    half = (dim + 1) // 2
    inv_freq = base ** (-torch.arange(0, 2 * half, 2, dtype=dtype, device=pos.device) / dim)  # (ceil(C/2),)
    ang = pos.to(dtype)[..., None] * inv_freq  # (*S, ceil(C/2))
    out = torch.stack((ang.sin(), ang.cos()), dim=-1).flatten(-2)  # (*S, 2 ceil(C/2)) interleaved
    return out[..., :dim]


class Sinusoidal(Encoding):
    """Fixed sinusoidal absolute embeddings (Vaswani et al. 2017).

    ``embed(x, pos) = x + PE[pos]`` with the interleaved sin/cos table of the
    module docstring. No learned parameters; defined for every integer position
    (no maximum length).

    Args:
        d_model: model width ``C`` (>= 1).
        n_heads: heads H (unused; accepted for a uniform interface).
        base: wavelength base, ``10000`` in the paper (> 1).

    Example:
        >>> enc = Sinusoidal(d_model=4)
        >>> enc.embed(torch.zeros(1, 2, 4), torch.tensor([[0, 1]]))
        tensor([[[0.0000, 1.0000, 0.0000, 1.0000],
                 [0.8415, 0.5403, 0.0100, 0.9999]]])
        >>> enc.num_params()
        0
    """

    name = "sinusoidal"
    acts_on = frozenset({"embedding"})
    relative = False
    integer_positions = True
    paper = "https://arxiv.org/abs/1706.03762"

    def __init__(self, d_model: int = 512, n_heads: int = 1, *, base: float = 10000.0) -> None:
        super().__init__(n_heads)
        self.d_model = check_int("d_model", d_model, 1, MAX_TABLE)
        self.base = check_float("base", base, 1, lo_open=True)

    def table(self, pos: Tensor) -> Tensor:
        """float32 ``(*S, C)`` embeddings of integer positions ``pos`` (any shape ``S``)."""
        return sinusoidal_table(pos, self.d_model, self.base)

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        _check_embed_args(x, pos, self.d_model)
        pe = self.table(pos.to(x.device))  # (B|1, N, C) float32
        return x + pe.to(x.dtype)

    def reference_embed(self, x: Tensor, pos: Tensor) -> Tensor:
        _check_embed_args(x, pos, self.d_model)
        C = self.d_model
        rows = []
        for row in pos.tolist():
            r = []
            for p in row:
                vec = []
                for c in range(C):
                    w = self.base ** (-(2 * (c // 2)) / C)
                    vec.append(math.sin(p * w) if c % 2 == 0 else math.cos(p * w))
                r.append(vec)
            rows.append(r)
        pe = torch.tensor(rows, dtype=torch.float64, device=x.device)  # (B|1, N, C)
        return x.double() + pe


class LearnedAbsolute(Encoding):
    """A trainable embedding table, one row per absolute position.

    ``embed(x, pos) = x + table[pos]``. Positions must lie in ``[0, max_len)``;
    anything else raises ``ValueError`` naming ``max_len`` and the offending
    position (a learned table cannot extrapolate).

    Args:
        d_model: model width ``C`` (>= 1).
        max_len: number of rows (>= 1).
        n_heads: heads H (unused; accepted for a uniform interface).
        init_std: std of the normal initialisation (>= 0).

    Parameters: ``table`` of shape ``(max_len, C)``; ``max_len * C`` in all
    (262,144 for ``C = max_len = 512``).

    Example:
        >>> enc = LearnedAbsolute(d_model=8, max_len=16)
        >>> enc.num_params()
        128
        >>> enc.embed(torch.zeros(2, 3, 8), torch.tensor([[0, 1, 2]])).shape
        torch.Size([2, 3, 8])
    """

    name = "learned"
    acts_on = frozenset({"embedding"})
    relative = False
    integer_positions = True
    paper = "https://arxiv.org/abs/1705.03122"

    def __init__(self, d_model: int = 512, max_len: int = 512, n_heads: int = 1, *, init_std: float = 0.02) -> None:
        super().__init__(n_heads)
        self.d_model = check_int("d_model", d_model, 1, MAX_TABLE)
        self.max_len = check_int("max_len", max_len, 1, MAX_TABLE)
        check_float("init_std", init_std, 0)
        self.table = nn.Parameter(torch.randn(max_len, d_model) * init_std)  # (max_len, C)

    def _check_range(self, pos: Tensor) -> None:
        if pos.numel() == 0:
            return
        lo, hi = int(pos.min()), int(pos.max())
        if hi >= self.max_len:
            raise ValueError(
                f"position {hi} is outside the learned table (max_len={self.max_len}, valid positions "
                f"0..{self.max_len - 1}); build the model with a larger max_len"
            )
        if lo < 0:
            raise ValueError(f"position {lo} is negative; learned absolute positions must be in 0..{self.max_len - 1}")

    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        _check_embed_args(x, pos, self.d_model)
        self._check_range(pos)
        pe = self.table[pos.to(self.table.device)]  # (B|1, N, C)
        return x + pe.to(x.dtype)

    def reference_embed(self, x: Tensor, pos: Tensor) -> Tensor:
        _check_embed_args(x, pos, self.d_model)
        self._check_range(pos)
        table = self.table.double()
        pe = torch.stack([torch.stack([table[p] for p in row]) for row in pos.tolist()])  # (B|1, N, C)
        return x.double() + pe
