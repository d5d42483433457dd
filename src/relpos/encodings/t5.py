"""T5 relative position bias: a learned scalar per head per bucket.

Paper: Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a
Unified Text-to-Text Transformer", https://arxiv.org/abs/1910.10683 (section 2.1)

Convention: ``d = j - i`` (T5's ``memory_position - query_position``);
``logits += table[bucket(d), h]``, added *after* the ``1/sqrt(D)`` scaling (T5
itself uses no scaling; relpos keeps the usual ``1/sqrt(D)`` on ``q.k`` and adds
the bias in logit units). Bucketing: :func:`relpos.distance.t5_bucket`.
T5 shares one table across all layers (the first layer computes it); relpos
models expose that as ``share_across_layers`` (default True for T5).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor, nn

from relpos.distance import t5_bucket
from relpos.encodings.base import Encoding
from relpos.validation import check_bool, check_float


class T5Bias(Encoding):
    """Bucketed learned bias.

    Args:
        n_heads: heads H.
        causal: model direction; sets ``bidirectional`` when that is None.
        num_buckets: buckets (>= 2 causal, >= 4 bidirectional). Default 32.
        max_distance: saturation distance (> exact range). Default 128.
        bidirectional: bucket both directions separately. Default ``not causal``.
        init_std: std of the normal initialisation of the table.

    Parameters: ``table`` of shape ``(num_buckets, H)``.

    Example:
        >>> enc = T5Bias(n_heads=2, causal=False)
        >>> enc.relative_bias(torch.tensor([-1, 0, 1])).shape
        torch.Size([2, 3])
    """

    name = "t5"
    acts_on = frozenset({"bias"})
    share_across_layers = True  # models build one table for all layers (as T5 does)
    toeplitz = True
    share_across_layers = True
    paper = "https://arxiv.org/abs/1910.10683"

    def __init__(
        self,
        n_heads: int = 8,
        causal: bool = True,
        *,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool | None = None,
        init_std: float = 0.02,
    ) -> None:
        super().__init__(n_heads)
        check_bool("causal", causal)
        if bidirectional is not None:
            check_bool("bidirectional", bidirectional)
        check_float("init_std", init_std, 0)
        self.bidirectional = (not causal) if bidirectional is None else bidirectional
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        # validates num_buckets / max_distance with clear messages
        t5_bucket(torch.zeros(1, dtype=torch.long), bidirectional=self.bidirectional,
                  num_buckets=num_buckets, max_distance=max_distance)
        self.table = nn.Parameter(torch.randn(num_buckets, n_heads) * init_std)  # (NB, H)

    @classmethod
    def options_for_length(cls, train_len: int) -> dict:
        """Length-relative range (``relpos compare``'s rule): the far bucket starts at the training length,
        so every bucket, the far one included, is trained. It never falls inside the exact range of the
        default 32 buckets (distances below 16 get a bucket each anyway)."""
        return {"max_distance": max(int(train_len), 17)}

    def buckets(self, delta: Tensor) -> Tensor:
        """Bucket ids of offsets ``delta = j - i``."""
        return t5_bucket(delta, bidirectional=self.bidirectional,
                         num_buckets=self.num_buckets, max_distance=self.max_distance)

    def saturation_distance(self) -> int:
        """Buckets saturate at ``max_distance``: every ``|d| >= max_distance`` (per side) shares one row."""
        return self.max_distance

    def relative_bias(self, delta: Tensor) -> Tensor:
        b = self.buckets(delta)  # (*S)
        return self.table.float()[b].movedim(-1, 0)  # (H, *S)

    # ------------------------------------------------------------ reference

    def _ref_bucket(self, d: int) -> int:
        """T5's bucket for one offset, transcribed from the paper's code path."""
        n = self.num_buckets
        ret = 0
        if self.bidirectional:
            n //= 2
            if d > 0:
                ret += n
            dist = abs(d)
        else:
            dist = max(-d, 0)
        max_exact = n // 2
        if dist < max_exact:
            return ret + dist
        # T5 computes this in float32; do the same so boundaries agree.
        f32 = np.float32
        val = np.log(f32(dist) / f32(max_exact)) / f32(math.log(self.max_distance / max_exact)) * f32(n - max_exact)
        return ret + min(max_exact + int(f32(val)), n - 1)

    def reference_bias(self, qpos: Tensor, kpos: Tensor) -> Tensor:
        table = self.table.double()
        B = max(qpos.shape[0], kpos.shape[0])
        qp = qpos.expand(B, -1).tolist()
        kp = kpos.expand(B, -1).tolist()
        idx = [[[self._ref_bucket(j - i) for j in kp[b]] for i in qp[b]] for b in range(B)]
        idx_t = torch.tensor(idx, dtype=torch.long, device=table.device)  # (B, Nq, Nk)
        return table[idx_t].permute(0, 3, 1, 2)  # (B, H, Nq, Nk)
