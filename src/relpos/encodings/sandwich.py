"""Sandwich: a parameter-free bias from the dot product of sinusoidal embeddings.

Paper: Chi et al. 2023, "Dissecting Transformer Length Extrapolation via the
Lens of Receptive Field Analysis", https://arxiv.org/abs/2212.10356

Sinusoidal embeddings ``p_n`` of dimension ``d'`` (``pos_dim``, 128 in the paper)
have the inner product::

    p_i . p_j = sum_{k=0}^{d'/2 - 1} cos((i - j) * w_k),    w_k = 10000 ** (-2k / d')

which depends only on ``i - j``, is largest at 0 and decays (log-like, with
ripples) with distance. Sandwich adds it to the logits as a bias, with the
ALiBi-style per-head compression of the paper's construction: head ``h``
(``h = 1 .. H``) divides it by ``r_h = 8h / H``. relpos subtracts the value at
distance 0 (``d'/2``) so the bias is 0 on the diagonal and <= 0 elsewhere::

    bias_h(i, j) = (sum_k cos((j - i) * w_k) - d'/2) / r_h

The subtracted constant is the same for every key of a query, so it does not
change attention at all (softmax is shift-invariant per row); it only keeps
the numbers small.

Conventions: symmetric in ``j - i`` (so the bidirectional form is the same
formula); in logit units, added *after* the ``1/sqrt(D)`` scaling; per-head
scales, shared by all layers' instances (no parameters); Toeplitz
(``toeplitz = True``). Angles are computed in float64 (float32 on devices
without it) and the bias is returned as float32.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from relpos.encodings.base import Encoding
from relpos.validation import MAX_TABLE, check_bool, check_float, check_int

__all__ = ["Sandwich"]


class Sandwich(Encoding):
    """Parameter-free Sandwich bias.

    Args:
        n_heads: heads H.
        pos_dim: dimension ``d'`` of the sinusoidal embeddings (even, >= 2; 128).
        base: sinusoid base (10000).
        compress: apply the per-head compression ``1 / r_h`` (default True);
            False gives every head the raw ``p_i . p_j - d'/2``.

    Example:
        >>> enc = Sandwich(n_heads=2, pos_dim=4)
        >>> enc.relative_bias(torch.tensor([0, 1])).shape
        torch.Size([2, 2])
    """

    name = "sandwich"
    acts_on = frozenset({"bias"})
    toeplitz = True
    paper = "https://arxiv.org/abs/2212.10356"

    def __init__(self, n_heads: int = 8, *, pos_dim: int = 128, base: float = 10000.0, compress: bool = True) -> None:
        super().__init__(n_heads)
        check_int("pos_dim", pos_dim, 2, MAX_TABLE)
        if pos_dim % 2:
            raise ValueError(f"pos_dim must be an even int >= 2, got {pos_dim!r}")
        check_float("base", base, 1, lo_open=True)
        check_bool("compress", compress)
        self.pos_dim = pos_dim
        self.base = float(base)
        self.compress = compress

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, pos_dim={self.pos_dim}, base={self.base}, compress={self.compress}"

    def head_scales(self) -> Tensor:
        """Per-head multipliers ``1 / r_h = H / (8h)``, float64 ``(H,)``."""
        H = self.n_heads
        if not self.compress:
            return torch.ones(H, dtype=torch.float64)
        return H / (8.0 * torch.arange(1, H + 1, dtype=torch.float64))

    def _profile(self, d: Tensor) -> Tensor:
        """``sum_k cos(d w_k) - d'/2`` for a 1-D tensor of offsets."""
        dt = torch.float32 if d.device.type == "mps" else torch.float64
        w = self.base ** (-torch.arange(0, self.pos_dim, 2, dtype=torch.float64) / self.pos_dim)
        ang = d.to(dt)[:, None] * w.to(device=d.device, dtype=dt)  # (U, d'/2)
        return torch.cos(ang).sum(-1) - self.pos_dim / 2

    def relative_bias(self, delta: Tensor) -> Tensor:
        """Bias for offsets ``delta = j - i`` (any shape ``S``), float32 ``(H, *S)``."""
        if delta.dtype.is_floating_point or delta.dtype == torch.bool:
            raise TypeError(f"delta must be an integer tensor, got {delta.dtype}")
        # Evaluate once per distinct offset (at most Nq + Nk - 1 on contiguous positions).
        uniq, inv = torch.unique(delta.reshape(-1), return_inverse=True)
        prof = self._profile(uniq)  # (U,)
        sc = self.head_scales().to(device=delta.device, dtype=prof.dtype)  # (H,)
        vals = (sc[:, None] * prof[None, :]).float()  # (H, U)
        return vals[:, inv].reshape(self.n_heads, *delta.shape)

    def reference_bias(self, qpos: Tensor, kpos: Tensor) -> Tensor:
        """Explicit embeddings ``p_n`` (sin/cos pairs) and their dot products, float64 loops."""
        H, dp = self.n_heads, self.pos_dim
        B = max(qpos.shape[0], kpos.shape[0])
        qp, kp = qpos.expand(B, -1).tolist(), kpos.expand(B, -1).tolist()

        def emb(n: int) -> list[float]:
            out = []
            for k in range(dp // 2):
                w = self.base ** (-2 * k / dp)
                out += [math.sin(n * w), math.cos(n * w)]
            return out

        scales = [(H / (8.0 * (h + 1)) if self.compress else 1.0) for h in range(H)]
        out = []
        for b in range(B):
            embs = {n: emb(n) for n in set(qp[b]) | set(kp[b])}
            dots = [[sum(x * y for x, y in zip(embs[i], embs[j])) - dp / 2 for j in kp[b]] for i in qp[b]]
            out.append([[[d * scales[h] for d in row] for row in dots] for h in range(H)])
        return torch.tensor(out, dtype=torch.float64, device=qpos.device)  # (B, H, Nq, Nk)
