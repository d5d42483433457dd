"""xPos: rotary embeddings with an exponential decay that is relative in q.k.

Paper: Sun et al. 2022, "A Length-Extrapolatable Transformer",
https://arxiv.org/abs/2212.10554

Formula: on top of RoPE's rotation by ``n * theta_k``, pair ``k`` of the query at
position ``n`` is multiplied by ``zeta_k ** (n / scale_base)`` and pair ``k`` of
the key at position ``m`` by ``zeta_k ** (-m / scale_base)``, with::

    zeta_k = (2k / r + gamma) / (1 + gamma),   k = 0 .. r/2 - 1,  gamma = 0.4, scale_base = 512

so pair ``k`` contributes ``zeta_k ** ((n - m) / scale_base)`` times the RoPE term to
``q.k``: the score depends only on ``n - m`` (relative, ``relative = True``) and
decays with distance for ``n >= m``. For ``n < m`` it *grows*, so xPos is defined
for causal attention only (``causal_only = True``).

Centering: like the authors' implementation, the exponent uses positions shifted
by ``seq_len // 2`` (``seq_len`` = max key position + 1 of the call, the same for
q and k), i.e. ``zeta ** ((n - c) / scale_base)`` with ``c = seq_len // 2``. This
cancels exactly in ``q.k`` and keeps the factors in float32 range for lengths up
to about ``2 * 80 * scale_base / |ln zeta_min|`` (~65k positions by default,
:meth:`XPos.max_offset`); beyond it the fast paths raise a ``ValueError`` instead
of returning NaN.
The reference uses the same centering so that rotated vectors can be compared
one to one. Keys must therefore be rotated together with the queries of the
same call (relpos' attention does this; a cache stores unrotated keys).

Sign and scaling: score ``scale * <q', k'>`` with ``scale = 1/sqrt(D)``; no
bias term; shared by all heads; no parameters. The pairing and the partial
rotation (``rotary_fraction``) are those of :class:`relpos.encodings.rope.RoPE`
(pass-through channels are neither rotated nor scaled).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from relpos.encodings.rope import RoPE, _angle_dtype, _check_positive

__all__ = ["XPos", "MAX_LOG_SCALE"]

#: Largest log of an xPos decay factor that fast paths accept (float32 overflows at 88.7).
MAX_LOG_SCALE = 80.0


class XPos(RoPE):
    """Rotary embeddings with xPos decay (causal only, no parameters).

    Args:
        n_heads: heads H.
        head_dim: per-head dimension D.
        rotary_fraction: fraction of channels rotated and scaled, in ``(0, 1]``.
        base: RoPE frequency base (10000).
        pairing: ``"half"`` (default) or ``"interleaved"`` (see RoPE).
        gamma: the paper's gamma (0.4).
        scale_base: the paper's scale base (512).

    Example:
        >>> enc = XPos(n_heads=1, head_dim=4)
        >>> enc.zeta()
        tensor([0.2857, 0.6429], dtype=torch.float64)
    """

    name = "xpos"
    acts_on = frozenset({"qk"})
    relative = True
    scalings = ()
    causal_only = True
    paper = "https://arxiv.org/abs/2212.10554"

    def __init__(
        self,
        n_heads: int = 8,
        head_dim: int = 64,
        *,
        rotary_fraction: float = 1.0,
        base: float = 10000.0,
        pairing: str = "half",
        gamma: float = 0.4,
        scale_base: float = 512.0,
    ) -> None:
        super().__init__(n_heads, head_dim, rotary_fraction=rotary_fraction, base=base, pairing=pairing)
        self.gamma = _check_positive("gamma", gamma)
        self.scale_base = _check_positive("scale_base", scale_base)

    def set_scaling(self, scaling, **kwargs) -> "XPos":
        if scaling not in (None, "none", "None"):
            raise ValueError("xPos does not support RoPE context scalings; scaling must be None")
        return super().set_scaling(None, **kwargs)

    def describe(self) -> dict:
        d = super().describe()
        d.pop("scaling", None)
        return d

    def extra_repr(self) -> str:
        return (f"head_dim={self.head_dim}, rot_dim={self.rot_dim}, base={self.base}, pairing={self.pairing!r}, "
                f"gamma={self.gamma}, scale_base={self.scale_base}")

    def zeta(self) -> Tensor:
        """Per-pair decay bases ``zeta_k``, float64 ``(r/2,)``."""
        r = self.rot_dim
        k2 = torch.arange(0, r, 2, dtype=torch.float64)
        return (k2 / r + self.gamma) / (1.0 + self.gamma)

    def max_offset(self) -> int:
        """Largest ``|position - seq_len // 2|`` whose decay factors stay finite in float32.

        ``zeta_min ** (-n / scale_base)`` must stay below ``exp(MAX_LOG_SCALE)``
        (float32 overflows at ``exp(88.7)``; the margin leaves room for the size of
        q and k): about 32,700 positions on either side of the centre by default,
        i.e. sequences up to about 65,000 positions.
        """
        return int(MAX_LOG_SCALE * self.scale_base / abs(math.log(float(self.zeta()[0]))))

    def _pair_scale(self, pos: Tensor, seq_len: int, is_query: bool) -> Tensor:
        if pos.numel():
            c = seq_len // 2
            far = max(abs(int(pos.max()) - c), abs(int(pos.min()) - c))
            if far > self.max_offset():
                raise ValueError(
                    f"xPos: position {int(pos.max()) if int(pos.max()) - c >= c - int(pos.min()) else int(pos.min())} "
                    f"lies {far} from the centre seq_len // 2 = {c}; its decay factors overflow float32 beyond "
                    f"{self.max_offset()} (sequences up to about {2 * self.max_offset()} positions). "
                    f"Use a larger scale_base (now {self.scale_base}) or shorter sequences."
                )
        dt = _angle_dtype(pos.device)
        logz = torch.log(self.zeta()).to(device=pos.device, dtype=dt)  # (r/2,)
        n = (pos - seq_len // 2).to(dt)[..., None] / self.scale_base  # (B|1, N, 1)
        e = n * logz if is_query else -n * logz
        return torch.exp(e)  # (B|1, N, r/2)

    def _reference_pair_scale(self, p: int, k: int, seq_len: int, is_query: bool) -> float:
        r = self.rot_dim
        zeta = (2 * k / r + self.gamma) / (1 + self.gamma)
        expo = (p - seq_len // 2) / self.scale_base
        return math.pow(zeta, expo if is_query else -expo)
