"""Dynamic Position Bias: a small MLP maps relative distance to a per-head bias.

Paper: Wang et al. 2022, "CrossFormer: A Versatile Vision Transformer Hinging on
Cross-scale Attention", https://arxiv.org/abs/2108.00154 (section 3.3, dynamic
position bias), in the 1-D form used for language models by x-transformers
(``DynamicPositionBias``).

Formula, with ``d = j - i`` (key minus query, relpos' convention)::

    u = d                                 or  sign(d) * log(1 + |d|)   (log_distance=True)
    h = SiLU(LN(W_1 u + b_1)),  h = SiLU(LN(W_l h + b_l)) for l = 2..depth   (LN only with norm=True)
    logits[h, i, j] += (W_out h + b_out)[h]

The MLP is a continuous function of ``u``, so distances never seen in training
still get a (finite) bias. x-transformers feeds ``i - j`` instead; the two agree
once the first layer's weight is negated (the log map is odd), which the tests
check. The bias is added in logit units, after the ``1/sqrt(D)`` scaling, and
depends on positions only through ``j - i`` (``toeplitz = True``), so fast paths
evaluate the MLP on the ``Nq + Nk - 1`` distinct offsets only. The MLP runs in
float32 even when the model is in bfloat16.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from relpos.encodings.base import Encoding
from relpos.validation import MAX_TABLE, check_bool, check_int

__all__ = ["DynamicPositionBias"]


class DynamicPositionBias(Encoding):
    """MLP on (log) relative distance.

    Args:
        n_heads: heads H (the MLP's output width).
        hidden: hidden width (>= 1, default 32).
        depth: number of hidden layers (>= 1, default 2, as x-transformers).
        log_distance: feed ``sign(d) log(1 + |d|)`` instead of ``d`` (default
            False, as x-transformers).
        norm: LayerNorm after each hidden linear layer (default False).

    Parameters: ``layers`` (``Linear(1, hidden)``, ``depth - 1`` ``Linear(hidden,
    hidden)``), ``norms`` (LayerNorms, if ``norm``), ``out`` (``Linear(hidden, H)``),
    all with PyTorch's default initialisation.

    Example:
        >>> enc = DynamicPositionBias(n_heads=2, hidden=8)
        >>> enc.relative_bias(torch.tensor([-3, 0, 5])).shape
        torch.Size([2, 3])
    """

    name = "dpb"
    acts_on = frozenset({"bias"})
    toeplitz = True
    paper = "https://arxiv.org/abs/2108.00154"

    def __init__(self, n_heads: int = 8, *, hidden: int = 32, depth: int = 2, log_distance: bool = False,
                 norm: bool = False) -> None:
        super().__init__(n_heads)
        check_int("hidden", hidden, 1, MAX_TABLE)
        check_int("depth", depth, 1, MAX_TABLE)
        check_bool("log_distance", log_distance)
        check_bool("norm", norm)
        self.hidden = hidden
        self.depth = depth
        self.log_distance = log_distance
        self.layers = nn.ModuleList([nn.Linear(1, hidden)] + [nn.Linear(hidden, hidden) for _ in range(depth - 1)])
        self.norms = nn.ModuleList([nn.LayerNorm(hidden) for _ in range(depth)]) if norm else None
        self.out = nn.Linear(hidden, n_heads)

    def _features(self, d: Tensor) -> Tensor:
        u = d.to(torch.float32)
        if self.log_distance:
            u = torch.sign(u) * torch.log1p(u.abs())
        return u

    def mlp(self, u: Tensor) -> Tensor:
        """The MLP on inputs ``u`` of shape ``(M,)``, in float32; returns ``(M, H)``."""
        x = u.to(torch.float32)[:, None]  # (M, 1)
        for l, lin in enumerate(self.layers):
            x = F.linear(x, lin.weight.float(), lin.bias.float())
            if self.norms is not None:
                ln = self.norms[l]
                x = F.layer_norm(x, (self.hidden,), ln.weight.float(), ln.bias.float(), ln.eps)
            x = F.silu(x)
        return F.linear(x, self.out.weight.float(), self.out.bias.float())  # (M, H)

    def relative_bias(self, delta: Tensor) -> Tensor:
        if delta.dim() <= 1:  # already the distinct offsets (fast paths): no unique() sync
            vals = self.mlp(self._features(delta.reshape(-1)))  # (M, H)
            return vals.t().reshape(self.n_heads, *delta.shape)
        uniq, inv = torch.unique(delta, return_inverse=True)
        vals = self.mlp(self._features(uniq))  # (U, H)
        return vals.t()[:, inv]  # (H, *S)

    # ------------------------------------------------------------ reference

    def reference_bias(self, qpos: Tensor, kpos: Tensor) -> Tensor:
        d = (kpos[:, None, :] - qpos[:, :, None]).double()  # (B|1, Nq, Nk), j - i
        u = torch.sign(d) * torch.log(1 + d.abs()) if self.log_distance else d
        x = u[..., None]  # (B|1, Nq, Nk, 1)
        for l, lin in enumerate(self.layers):
            x = x @ lin.weight.double().t() + lin.bias.double()
            if self.norms is not None:
                ln = self.norms[l]
                mu = x.mean(-1, keepdim=True)
                var = ((x - mu) ** 2).mean(-1, keepdim=True)
                x = (x - mu) / torch.sqrt(var + ln.eps) * ln.weight.double() + ln.bias.double()
            x = x * torch.sigmoid(x)  # SiLU; sigmoid is finite for every x (1/(1+exp(-x)) overflows)
        y = x @ self.out.weight.double().t() + self.out.bias.double()  # (B|1, Nq, Nk, H)
        return y.permute(0, 3, 1, 2)  # (B|1, H, Nq, Nk)
