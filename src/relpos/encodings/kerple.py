"""KERPLE: kernelized relative positional embedding (logarithmic and power kernels).

Paper: Chi, Fan, Ramadge, Rudnicky 2022, "KERPLE: Kernelized Relative Positional
Embedding for Length Extrapolation", https://arxiv.org/abs/2205.09921 (section 4)

Formula, per head ``h``, for query position ``i`` and key position ``j``::

    log kernel:    bias_h(i, j) = -r1_h * log(1 + r2_h * |i - j|)     r1 > 0, r2 > 0
    power kernel:  bias_h(i, j) = -r1_h * |i - j| ^ r2_h              r1 > 0, 0 < r2 <= 2

Sign: only ``|i - j|`` enters, so the bias is symmetric and either sign
convention gives the same value. Scaling: the bias is in *logit units*, added
after the ``1/sqrt(D)`` scaling of ``q.k`` (as in the paper, where it is added
to the scaled dot product like ALiBi's). The term depends on ``j - i`` only, so
``toeplitz = True`` and fast paths evaluate it on the distinct offsets.

Parameterisation (positivity): ``r1`` and ``r2`` are learned per head through
unconstrained parameters,

* ``r1 = softplus(raw_r1)`` (> 0), both kernels;
* log kernel: ``r2 = softplus(raw_r2)`` (> 0);
* power kernel: ``r2 = 2 * sigmoid(raw_r2)`` (in ``(0, 2)``).

The paper's code instead clamps the raw values (``min = 0.01``, and ``max = 2``
for the power exponent) after each step; the smooth maps keep the same ranges
while giving every parameter a gradient. Initialisation follows the paper's
code: ``r1 ~ U(0.01, 2)``, ``r2 ~ U(0.01, 1)`` per head. ``|i - j| ^ r2`` at
``i = j`` is defined as 0 with a zero gradient (no ``0 * log 0``).

Sharing: one ``(r1, r2)`` pair per head; each layer has its own unless the model
shares the module (``share_encoding``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from relpos.encodings.base import Encoding
from relpos.validation import check_choice

__all__ = ["Kerple"]

KERNELS = ("log", "power")


def _inv_softplus(x: Tensor) -> Tensor:
    return x + torch.log(-torch.expm1(-x))  # log(exp(x) - 1), stable for x > 0


def _logit(x: Tensor) -> Tensor:
    return torch.log(x) - torch.log1p(-x)


class Kerple(Encoding):
    """KERPLE distance kernel bias (Chi et al. 2022).

    Args:
        n_heads: heads H.
        kernel: ``"log"`` (registry name ``"kerple-log"``) or ``"power"``
            (``"kerple-power"``).

    Parameters: ``raw_r1 (H,)`` and ``raw_r2 (H,)``, ``2 H`` in all; see the
    module docstring for the maps to ``r1, r2`` (properties :attr:`r1`, :attr:`r2`).

    Example:
        >>> enc = Kerple(n_heads=2, kernel="log")
        >>> enc.num_params()
        4
        >>> b = enc.relative_bias(torch.tensor([-2, 0, 3]))
        >>> b.shape, bool((b[:, 1] == 0).all()), bool((b <= 0).all())
        (torch.Size([2, 3]), True, True)
    """

    name = "kerple-log"
    acts_on = frozenset({"bias"})
    relative = True
    toeplitz = True
    integer_positions = True
    paper = "https://arxiv.org/abs/2205.09921"

    def __init__(self, n_heads: int = 8, *, kernel: str = "log") -> None:
        super().__init__(n_heads)
        check_choice("kernel", kernel, KERNELS)
        self.kernel = kernel
        self.name = f"kerple-{kernel}"
        r1 = torch.empty(n_heads).uniform_(0.01, 2.0)  # paper code: U(0, 2) clamped at 0.01
        r2 = torch.empty(n_heads).uniform_(0.01, 1.0)  # paper code: U(0, 1) clamped at 0.01
        self.raw_r1 = nn.Parameter(_inv_softplus(r1))
        self.raw_r2 = nn.Parameter(_inv_softplus(r2) if kernel == "log" else _logit(r2 / 2))

    # ------------------------------------------------------------ parameters

    def _params(self, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        r1 = F.softplus(self.raw_r1.to(dtype))
        if self.kernel == "log":
            r2 = F.softplus(self.raw_r2.to(dtype))
        else:
            r2 = 2.0 * torch.sigmoid(self.raw_r2.to(dtype))
        return r1, r2

    @property
    def r1(self) -> Tensor:
        """Current ``r1`` per head, ``(H,)`` float32 (> 0)."""
        return self._params(torch.float32)[0]

    @property
    def r2(self) -> Tensor:
        """Current ``r2`` per head, ``(H,)`` float32 (> 0; <= 2 for the power kernel)."""
        return self._params(torch.float32)[1]

    # ------------------------------------------------------------ fast path

    def relative_bias(self, delta: Tensor) -> Tensor:
        r1, r2 = self._params(torch.float32)
        shape = (-1, *([1] * delta.dim()))
        r1, r2 = r1.view(shape), r2.view(shape)  # (H, 1, ...)
        dist = delta.abs().to(torch.float32, copy=False)[None]  # (1, *S)
        if self.kernel == "log":
            return -r1 * torch.log1p(r2 * dist)  # (H, *S)
        powered = torch.pow(dist.clamp(min=1.0), r2)  # safe at 0: clamp, then mask
        return -r1 * torch.where(dist > 0, powered, torch.zeros_like(powered))  # (H, *S)

    # ------------------------------------------------------------ reference

    def reference_bias(self, qpos: Tensor, kpos: Tensor) -> Tensor:
        r1, r2 = self._params(torch.float64)  # (H,)
        B = max(qpos.shape[0], kpos.shape[0])
        qp, kp = qpos.expand(B, -1).tolist(), kpos.expand(B, -1).tolist()
        dist = torch.tensor(
            [[[abs(i - j) for j in kp[b]] for i in qp[b]] for b in range(B)], dtype=torch.float64, device=qpos.device
        )[:, None]  # (B, 1, Nq, Nk): |i - j|
        r1, r2 = r1[None, :, None, None], r2[None, :, None, None]  # (1, H, 1, 1)
        if self.kernel == "log":
            return -r1 * torch.log(1 + r2 * dist)  # (B, H, Nq, Nk)
        # |i - j| ^ r2 = exp(r2 log|i - j|) for |i - j| >= 1, and 0 at i = j.
        logd = torch.log(torch.where(dist > 0, dist, torch.ones_like(dist)))
        return -r1 * torch.where(dist > 0, torch.exp(r2 * logd), torch.zeros_like(dist * r2))
