"""FIRE: functional interpolation for relative positions (a learned bias).

Paper: Li et al. 2023, "Functional Interpolation for Relative Positions Improves
Long Context Transformers", https://arxiv.org/abs/2310.04418

Formula (query position ``i``, key position ``j``, causal ``i >= j``)::

    b_h(i, j) = f_theta( psi(i - j) / psi(max(L, i)) )_h,    psi(x) = log(c * x + 1)

``f_theta`` is an MLP ``1 -> 32 -> H`` with ReLU (one output per head), ``c > 0``
and the threshold ``L`` are learned. The normaliser ``psi(max(L, i))`` maps every
distance seen by query ``i`` into ``[0, 1]`` ("progressive interpolation"); the
threshold keeps short contexts from being stretched. As in the authors' code a
small ``eps = 1e-6`` is added to the normaliser. Parameterisation (ours, to keep both
positive): ``c = softplus(c_raw)``, initialised at ``c = 0.1``, and
``L = init_L * softplus(l_raw) / ln 2``, with ``l_raw = 0`` at init so that
``L = init_L = 512`` (the paper's initial values).

Bidirectional attention uses ``|i - j|`` in ``psi`` (the authors' code takes the
absolute value), i.e. a symmetric bias; causal attention only ever sees ``i >= j``.

Conventions: the bias is in logit units, added *after* the ``1/sqrt(D)``
scaling; per head (the MLP has H outputs); one module per layer by default.
FIRE is **not** shift-invariant: the normaliser depends on the absolute query
position ``i`` once ``i > L``, so ``relative = False`` and the bias is not
Toeplitz in general (``toeplitz = False``). Below the threshold it is: every query
``i < L`` has the normaliser ``psi(L)``, so ``toeplitz_below()`` returns ``L`` and
attention calls whose queries all sit below it (training at lengths up to ``L``)
take the Toeplitz fast paths through :meth:`FIRE.relative_bias`; in other calls the
rows below the threshold still do, and the rows at or past it take the piecewise form
in one compiled walk each way (:func:`relpos.kernels.fire.rows`; a causal call gets
the -inf of future keys written by that walk, :meth:`FIRE.bias_past`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from relpos.kernels import fire as fire_kernels
from relpos.offsets import contiguous_offsets, toeplitz
from relpos.encodings.base import Encoding, PiecewiseBias
from relpos.first_order import first_order
from relpos.validation import MAX_TABLE, check_float, check_int

__all__ = ["FIRE"]

_LOG2 = math.log(2.0)


#: Most (query, key) pairs whose bias :meth:`FIRE._per_pair` evaluates in one C++ call; beyond it the piecewise
#: form (a cost per pair of a few lookups, against the MLP's ``W (H + 1)`` multiply-adds) is cheaper: measured at
#: ``N = 64``, ``H = 4``, forward and backward, the one call took 0.42 ms at 256 pairs (the piecewise form 1.15 ms),
#: and broke even near 2,000.
ONE_CALL_PAIRS = 1024


def _one_call(delta: Tensor, params: tuple[Tensor, ...]) -> bool:
    """Whether :meth:`FIRE.relative_bias` can take the compiled kernel: built, eager (not under
    ``torch.compile``), int64 offsets and float32 contiguous parameters on the CPU."""
    return (delta.dtype == torch.int64 and delta.device.type == "cpu" and not torch.compiler.is_compiling()
            and all(p.dtype == torch.float32 and p.is_contiguous() for p in params)
            and fire_kernels.usable(*params))


def _softplus_inv(y: float) -> float:
    return y + math.log(-math.expm1(-y))


class _PiecewiseLinear(torch.autograd.Function):
    """``out[b, h, t, j] = alpha[h, seg] * x + beta[h, seg]`` with ``seg = seg[b, t, j]``.

    The backward sums the gradient per segment with one weighted ``bincount`` per
    head (the autograd of ``gather`` would scatter into an expanded
    ``(B, H, Nq, K + 1)`` buffer, which is several times slower).
    """

    @staticmethod
    def forward(ctx, alpha, beta, seg, x):
        B1, Nq, Nk = seg.shape
        H, K1 = alpha.shape
        idx = seg[:, None].expand(B1, H, Nq, Nk)
        al = torch.gather(alpha.view(1, H, 1, K1).expand(B1, H, Nq, K1), -1, idx)  # (B|1, H, Nq, Nk)
        be = torch.gather(beta.view(1, H, 1, K1).expand(B1, H, Nq, K1), -1, idx)
        ctx.save_for_backward(alpha, seg, x)
        return al.mul_(x[:, None]).add_(be)

    @staticmethod
    @first_order
    def backward(ctx, g):
        alpha, seg, x = ctx.saved_tensors
        H, K1 = alpha.shape
        flat = seg.reshape(-1)  # (P,) over (B|1, Nq, Nk)
        gh = g.transpose(0, 1).reshape(H, -1) if g.shape[0] > 1 else g.reshape(H, -1)  # (H, P)
        gx = gh * x.reshape(1, -1)
        d_alpha = torch.stack([torch.bincount(flat, gx[h], minlength=K1) for h in range(H)]).to(alpha.dtype)
        d_beta = torch.stack([torch.bincount(flat, gh[h], minlength=K1) for h in range(H)]).to(alpha.dtype)
        dx = None
        if ctx.needs_input_grad[3]:
            B1, Nq, Nk = seg.shape
            idx = seg[:, None].expand(B1, H, Nq, Nk)
            al = torch.gather(alpha.view(1, H, 1, K1).expand(B1, H, Nq, K1), -1, idx)
            dx = (g * al).sum(1)  # (B|1, Nq, Nk)
        return d_alpha, d_beta, None, dx


class FIRE(Encoding):
    """Learned FIRE bias.

    Args:
        n_heads: heads H (MLP outputs).
        mlp_width: hidden width of ``f_theta`` (32).
        init_c: initial ``c`` (0.1), kept > 0 through a softplus.
        init_L: initial threshold ``L`` (512), kept > 0 through a softplus.
        eps: added to the normaliser (1e-6).

    Parameters: ``c_raw`` and ``l_raw`` (scalars), ``mlp`` (``1*W + W + W*H + H``).

    Example:
        >>> enc = FIRE(n_heads=2)
        >>> enc.bias(torch.tensor([[0, 1, 2]]), torch.tensor([[0, 1, 2]])).shape
        torch.Size([1, 2, 3, 3])
    """

    name = "fire"
    acts_on = frozenset({"bias"})
    relative = False
    toeplitz = False
    paper = "https://arxiv.org/abs/2310.04418"

    def __init__(
        self,
        n_heads: int = 8,
        *,
        mlp_width: int = 32,
        init_c: float = 0.1,
        init_L: float = 512.0,
        eps: float = 1e-6,
    ) -> None:
        super().__init__(n_heads)
        check_int("mlp_width", mlp_width, 1, MAX_TABLE)
        check_float("init_c", init_c, 0, lo_open=True)
        check_float("init_L", init_L, 0, lo_open=True)
        check_float("eps", eps, 0, 1, hi_open=True)
        self.mlp_width = mlp_width
        self.init_L = float(init_L)
        self.eps = float(eps)
        self.c_raw = nn.Parameter(torch.tensor(_softplus_inv(float(init_c))))
        self.l_raw = nn.Parameter(torch.tensor(0.0))
        self.mlp = nn.Sequential(nn.Linear(1, mlp_width), nn.ReLU(), nn.Linear(mlp_width, n_heads))

    @classmethod
    def options_for_length(cls, train_len: int) -> dict:
        """Length-relative range (``relpos compare``'s rule): the learned threshold ``L`` starts at the
        training length instead of the paper's 512."""
        return {"init_L": float(max(int(train_len), 1))}

    @property
    def c(self) -> Tensor:
        """The log-transform scale ``c`` (> 0)."""
        return F.softplus(self.c_raw.float())

    @property
    def threshold(self) -> Tensor:
        """The learned threshold ``L`` (> 0)."""
        return self.init_L * F.softplus(self.l_raw.float()) / _LOG2

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, mlp_width={self.mlp_width}, init_L={self.init_L}, eps={self.eps}"

    def normalized_distance(self, qpos: Tensor, kpos: Tensor) -> Tensor:
        """``psi(|i - j|) / psi(max(L, i))``, float32 ``(B or 1, Nq, Nk)``."""
        i = qpos.float()[:, :, None]  # (B|1, Nq, 1)
        j = kpos.float()[:, None, :]  # (B|1, 1, Nk)
        c = self.c
        num = torch.log1p(c * (i - j).abs())  # (B|1, Nq, Nk)
        den = torch.log1p(c * torch.maximum(i, self.threshold)) + self.eps  # (B|1, Nq, 1)
        return num / den

    def bias(self, qpos: Tensor, kpos: Tensor) -> Tensor:
        """FIRE bias, float32 ``(B or 1, H, Nq, Nk)``, without forming the MLP's hidden layer per pair.

        ``f(x) = W2 relu(W1 x + b1) + b2`` acts on a *scalar* ``x``, so it is an
        exactly piecewise-linear function of ``x`` with at most ``W`` breakpoints
        ``-b1/W1``: per head, ``f(x) = alpha[m] x + beta[m]`` on segment ``m``. The
        per-segment slopes and intercepts are formed from the parameters (with
        autograd), each pair looks up its segment (``bucketize``), and no ``W``-wide
        hidden layer is formed per pair. Values and gradients equal the MLP's up to
        float rounding (at an exact breakpoint the subgradient may differ).

        Rows of queries below the threshold (``i < L``) all have the normaliser
        ``psi(L)``, so there the bias depends on ``j - i`` only: for positions shared
        by the batch and contiguous, the MLP itself is evaluated on those rows'
        ``Nq' + Nk - 1`` distinct offsets and expanded (:func:`relpos.offsets.toeplitz`);
        the rows at or past ``L`` take the piecewise form in one compiled walk each way
        (:func:`relpos.kernels.fire.rows`; the per-pair form of :meth:`_per_pair` without the kernels or
        on positions with gaps).
        """
        offs = contiguous_offsets(qpos, kpos)
        return self._per_pair(qpos, kpos) if offs is None else self._rows_split(qpos, kpos, offs, causal=False)

    def bias_past(self, qpos: Tensor, kpos: Tensor) -> Tensor | None:
        """:meth:`bias` with -inf at keys after their query, for a causal call on default positions: the
        Toeplitz rows mask their ``Nq + Nk - 1`` offsets before the expansion and the kernel writes the -inf
        of the rows past the threshold, so no separate ``(Nq, Nk)`` mask is applied (None without the
        kernels: the engine masks)."""
        offs = contiguous_offsets(qpos, kpos)
        if offs is None or not self._kernel_ok(qpos) or int(qpos[0, 0]) < int(kpos[0, 0]):
            return None  # every row past the threshold must reach the kernel, which writes their -inf
        return self._rows_split(qpos, kpos, offs, causal=True)

    def _rows_split(self, qpos: Tensor, kpos: Tensor, offs: Tensor, *, causal: bool) -> Tensor:
        """Shared contiguous positions (``offs``: :func:`relpos.offsets.contiguous_offsets`): the rows below the
        threshold from their offsets (Toeplitz), those at or past it from :meth:`_past`."""
        Nq, Nk = qpos.shape[-1], kpos.shape[-1]
        top = int((qpos[0].float() < self.threshold.detach()).sum())
        parts = []
        if top:
            o = offs[Nq - top:]  # (top + Nk - 1,): the offsets j - i of rows 0..top-1
            vals = self.relative_bias(o)  # (H, top + Nk - 1)
            if causal:
                vals = vals.masked_fill(o > 0, float("-inf"))
            parts.append(toeplitz(vals, top, Nk)[None])  # (1, H, top, Nk)
        if top < Nq:
            parts.append(self._past(qpos[:, top:], kpos, causal))  # (1, H, Nq - top, Nk)
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-2)  # (1, H, Nq, Nk)

    def _kernel_ok(self, qpos: Tensor) -> bool:
        """Whether :meth:`_past` can take the compiled kernel: built, eager, float32/64 parameters on the CPU."""
        return (qpos.device.type == "cpu" and not torch.compiler.is_compiling()
                and fire_kernels.usable(*self._params()))

    def _past(self, qpos: Tensor, kpos: Tensor, causal: bool = False) -> Tensor:
        """Contiguous rows at or past the threshold, ``(1, H, R, Nk)``: with the compiled kernels (keys from
        position ``kpos[0, 0] <= qpos[0, 0]``) one walk over the rows each way (:func:`relpos.kernels.fire.rows`
        on the piecewise form), or for at most :data:`ONE_CALL_PAIRS` pairs the MLP on each pair in one call
        each way; ``causal``: -inf at ``j > i``. Else :meth:`_per_pair` (then no -inf: only :meth:`bias_past`
        asks for it, and only with the kernels)."""
        i0, R, Nk = int(qpos[0, 0]) - int(kpos[0, 0]), qpos.shape[-1], kpos.shape[-1]
        if i0 < 0 or not self._kernel_ok(qpos):
            return self._per_pair(qpos, kpos)
        params = self._params()
        if R * Nk <= ONE_CALL_PAIRS and _one_call(qpos, params):
            # a few rows (FIRE's threshold just below the training length): the MLP on their pairs in one C++
            # call each way costs less than the piecewise form's segments and walk (measured at N = 64, H = 4,
            # forward and backward: 0.37-0.54 ms against 0.66-0.68 ms for 8-16 rows)
            b = self._mlp_pairs(qpos, kpos, params)  # (1, H, R, Nk)
            return b.masked_fill(kpos[0][None, :] > qpos[0][:, None], float("-inf")) if causal else b
        pw = self.piecewise_bias()
        num = pw.num(torch.arange(max(i0 + R, Nk), device=qpos.device)).float()  # (T,): every |i - j| of the rows
        inv = 1.0 / pw.den(qpos[0]).float()  # (R,); position tables are float32 (float64 parameters too)
        alpha, beta, z = pw.segments()  # (H, K + 1) twice, (K,), float32
        return fire_kernels.rows(num, inv, alpha, beta, z, i0, Nk, causal=causal)[None]

    def _params(self) -> tuple[Tensor, ...]:
        """``c_raw, l_raw, w1, b1, w2, b2``: what :func:`relpos.kernels.fire.mlp_offsets` takes, in its order."""
        lin1, lin2 = self.mlp[0], self.mlp[2]
        return self.c_raw, self.l_raw, lin1.weight, lin1.bias, lin2.weight, lin2.bias

    def _per_pair(self, qpos: Tensor, kpos: Tensor) -> Tensor:
        """The bias pair by pair, ``(B|1, H, Nq, Nk)``: the piecewise form, or, for a few pairs of positions the
        batch shares (at most :data:`ONE_CALL_PAIRS`; a randomized-position draw), the MLP on every pair in one C++
        call each way (:meth:`_mlp_pairs`)."""
        params = self._params()
        Nq, Nk = qpos.shape[-1], kpos.shape[-1]
        if qpos.shape[0] == kpos.shape[0] == 1 and Nq * Nk <= ONE_CALL_PAIRS and _one_call(qpos, params):
            return self._mlp_pairs(qpos, kpos, params)
        return self._piecewise(*self._segments(), self.normalized_distance(qpos, kpos))

    def _mlp_pairs(self, qpos: Tensor, kpos: Tensor, params: tuple[Tensor, ...]) -> Tensor:
        """The MLP on every pair of positions ``(1, Nq)`` x ``(1, Nk)`` in one C++ call each way, ``(1, H, Nq, Nk)``
        (the caller checked :func:`_one_call`)."""
        Nq, Nk = qpos.shape[-1], kpos.shape[-1]
        i = qpos[0][:, None].expand(Nq, Nk)  # (Nq, Nk)
        d = (i - kpos[0][None, :]).reshape(-1)
        vals = fire_kernels.mlp_offsets(d, *params[:2], self.init_L, self.eps, *params[2:], qpos=i.reshape(-1))
        return vals.view(self.n_heads, Nq, Nk)[None]

    def piecewise_bias(self) -> PiecewiseBias:
        """The bias in the form a fused kernel walks: ``x = num(|i - j|) / den(i)`` with
        ``num(d) = psi(d)``, ``den(i) = psi(max(L, i)) + eps``, then the MLP's segments (see :meth:`bias`)."""
        return PiecewiseBias(num=self._num, den=self._den, segments=self._segments)

    def _num(self, dist: Tensor) -> Tensor:
        """``psi(d) = log(c d + 1)`` for int64 distances ``(L,)``, float32."""
        return torch.log1p(self.c * dist.float())

    def _den(self, qpos: Tensor) -> Tensor:
        """The normaliser ``psi(max(L, i)) + eps`` for int64 query positions ``(N,)``, float32."""
        return torch.log1p(self.c * torch.maximum(qpos.float(), self.threshold)) + self.eps

    def toeplitz_below(self) -> float:
        """Queries ``i < L`` all have the normaliser ``psi(L)``: below the threshold the bias is Toeplitz."""
        return float(self.threshold.detach())

    def relative_bias(self, delta: Tensor) -> Tensor:
        """The bias as a function of ``delta = j - i`` for queries below the threshold (``i < L``),
        float32 ``(H, *delta.shape)``: the MLP itself on ``psi(|delta|) / psi(L)``. Offsets are few
        (``Nq + Nk - 1``), so no piecewise form is needed; not valid for queries at or past ``L``. With the
        compiled kernels (float32 parameters on the CPU, eager) it runs as one C++ call each way
        (:func:`relpos.kernels.fire.mlp_offsets`); the PyTorch path below is the same function."""
        params = self._params()
        if _one_call(delta, params):  # the same function in one C++ call each way (fire_mlp.cpp)
            vals = fire_kernels.mlp_offsets(delta.reshape(-1), *params[:2], self.init_L, self.eps, *params[2:])
            return vals.reshape(self.n_heads, *delta.shape)
        c, (lin1, lin2) = self.c, (self.mlp[0], self.mlp[2])
        x = torch.log1p(c * delta.abs().float()) / (torch.log1p(c * self.threshold) + self.eps)  # (*S,)
        flat = x.reshape(-1, 1)  # (P, 1)
        hidden = torch.relu(torch.addmm(lin1.bias.float(), flat, lin1.weight.float().t()))  # (P, W)
        vals = torch.addmm(lin2.bias.float()[:, None], lin2.weight.float(), hidden.t())  # (H, P)
        return vals.reshape(self.n_heads, *delta.shape)

    def _segments(self) -> tuple[Tensor, Tensor, Tensor]:
        """Per-segment slopes and intercepts ``(H, K + 1)`` (with autograd) and the sorted breakpoints ``(K,)``."""
        lin1, lin2 = self.mlp[0], self.mlp[2]
        a, c = lin1.weight[:, 0].float(), lin1.bias.float()  # (W,), (W,)
        w2, b2 = lin2.weight.float(), lin2.bias.float()  # (H, W), (H,)
        with torch.no_grad():
            nz = a != 0
            z = torch.sort(-c[nz] / a[nz]).values  # breakpoints
            if z.numel():
                reps = torch.cat([z[:1] - 1, (z[:-1] + z[1:]) / 2, z[-1:] + 1])  # one point inside each segment
            else:
                reps = torch.zeros(1, device=a.device)
            active = (a[None, :] * reps[:, None] + c[None, :] > 0).to(a.dtype)  # (K+1, W)
        wa = w2[:, None, :] * active[None]  # (H, K+1, W)
        return wa @ a, b2[:, None] + wa @ c, z

    @staticmethod
    def _piecewise(alpha: Tensor, beta: Tensor, z: Tensor, x: Tensor) -> Tensor:
        """``f(x)`` for ``x (B|1, Nq, Nk)`` -> ``(B|1, H, Nq, Nk)``."""
        return _PiecewiseLinear.apply(alpha, beta, torch.bucketize(x.detach(), z), x)

    def reference_bias(self, qpos: Tensor, kpos: Tensor) -> Tensor:
        """Row by row in float64, straight from the formula."""
        c = F.softplus(self.c_raw.double())
        L = self.init_L * F.softplus(self.l_raw.double()) / _LOG2
        W1, b1 = self.mlp[0].weight.double(), self.mlp[0].bias.double()  # (W, 1), (W,)
        W2, b2 = self.mlp[2].weight.double(), self.mlp[2].bias.double()  # (H, W), (H,)
        B = max(qpos.shape[0], kpos.shape[0])
        qp, kp = qpos.expand(B, -1).tolist(), kpos.expand(B, -1).tolist()
        batches = []
        for b in range(B):
            rows = []
            for i in qp[b]:
                dist = torch.tensor([abs(i - j) for j in kp[b]], dtype=torch.float64, device=c.device)  # (Nk,)
                psi_d = torch.log(c * dist + 1.0)
                pos_i = torch.tensor(float(i), dtype=torch.float64, device=c.device)
                norm = torch.log(c * torch.maximum(L, pos_i) + 1.0) + self.eps
                z = psi_d / norm  # (Nk,)
                hdn = torch.relu(z[:, None] * W1[:, 0][None, :] + b1)  # (Nk, W)
                rows.append(hdn @ W2.T + b2)  # (Nk, H)
            batches.append(torch.stack(rows))  # (Nq, Nk, H)
        return torch.stack(batches).permute(0, 3, 1, 2)  # (B, H, Nq, Nk)
