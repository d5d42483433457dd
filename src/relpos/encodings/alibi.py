"""ALiBi: attention with linear biases.

Paper: Press et al. 2022, "Train Short, Test Long: Attention with Linear Biases
Enables Input Length Extrapolation", https://arxiv.org/abs/2108.12409

Convention: ``logits[h, i, j] += -m_h * |i - j|``, added *after* the
``1/sqrt(D)`` scaling. In causal attention only ``j <= i`` is seen, where this is
the paper's ``-m_h (i - j)``; in bidirectional attention it is the symmetric
form. Slopes: :func:`relpos.distance.alibi_slopes` (fixed by default, learnable
on request).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from relpos.distance import alibi_slopes
from relpos.encodings.base import Encoding
from relpos.validation import check_bool


class ALiBi(Encoding):
    """Linear distance penalty.

    Args:
        n_heads: heads H (any count; non-powers of two use the paper's interleaving).
        learnable_slopes: train the slopes (initialised at the paper's values).

    Buffers: fixed ``slopes (H,)`` are kept in float64 (the reference uses them
    exactly; fast paths use them rounded to float32). Learned slopes are a float32
    parameter.

    Example:
        >>> ALiBi(n_heads=2).relative_bias(torch.tensor([-2, 0, 1]))
        tensor([[-0.1250, -0.0000, -0.0625],
                [-0.0078, -0.0000, -0.0039]])
    """

    name = "alibi"
    acts_on = frozenset({"bias"})
    toeplitz = True
    paper = "https://arxiv.org/abs/2108.12409"

    def __init__(self, n_heads: int = 8, *, learnable_slopes: bool = False) -> None:
        super().__init__(n_heads)
        self.learnable_slopes = check_bool("learnable_slopes", learnable_slopes)
        if learnable_slopes:
            self.slopes = nn.Parameter(alibi_slopes(n_heads))  # float32, like every learned parameter
        else:
            # float64: the reference uses the exact slopes; fast paths round them to float32
            self.register_buffer("slopes", alibi_slopes(n_heads, dtype=torch.float64), persistent=False)

    def relative_bias(self, delta: Tensor) -> Tensor:
        m = self.slopes.float().view(-1, *([1] * delta.dim()))  # (H, 1, ...)
        return -m * delta.abs().float()  # (H, *S)

    def reference_bias(self, qpos: Tensor, kpos: Tensor) -> Tensor:
        m = self.slopes.double()
        B = max(qpos.shape[0], kpos.shape[0])
        qp, kp = qpos.expand(B, -1).tolist(), kpos.expand(B, -1).tolist()
        dist = torch.tensor([[[abs(i - j) for j in kp[b]] for i in qp[b]] for b in range(B)],
                            dtype=torch.float64, device=m.device)  # (B, Nq, Nk)
        return -m[None, :, None, None] * dist[:, None]  # (B, H, Nq, Nk)
