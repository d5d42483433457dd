"""RoPE: rotary position embeddings, with the common context-extension scalings.

Paper: Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position
Embedding", https://arxiv.org/abs/2104.09864

Scalings:

* ``"linear"`` -- position interpolation, Chen et al. 2023,
  https://arxiv.org/abs/2306.15595: positions are divided by ``factor``
  (equivalently every frequency is).
* ``"ntk"`` -- NTK-aware base scaling (bloc97, 2023): the base becomes
  ``base * factor ** (r / (r - 2))``, for every length.
* ``"dynamic"`` -- dynamic NTK, as in Hugging Face transformers: for a total
  length ``s > original_max_len`` the base becomes
  ``base * (factor * s / original_max_len - (factor - 1)) ** (r / (r - 2))``;
  up to ``original_max_len`` it is the plain base.
* ``"yarn"`` -- YaRN, Peng et al. 2023, https://arxiv.org/abs/2309.00071:
  per-frequency ramp between interpolation (``theta / factor``) and
  extrapolation (``theta``) with ``beta_fast = 32`` and ``beta_slow = 1``, plus
  the attention temperature ``mscale = 0.1 * ln(factor) + 1`` multiplied into
  both the rotated q and k (so logits scale by ``mscale ** 2``), exactly as
  the YaRN authors' code and Hugging Face do. The ramp follows that code: the
  boundary *dimensions* ``floor(low)`` and ``ceil(high)`` come from the
  number of rotations ``beta`` that a frequency completes within
  ``original_max_len``, and the blend is linear in the pair index between them.
* ``"llama3"`` -- Llama 3.1's frequency-dependent scaling (wavelengths longer
  than ``original_max_len / low_freq_factor`` are divided by ``factor``,
  shorter than ``original_max_len / high_freq_factor`` kept, a smooth blend
  between), as in Hugging Face.

Conventions:

* Acts on q and k (site ``"qk"``); the score is ``scale * <R_i q, R_j k>`` with
  the usual ``scale = 1/sqrt(D)``, and ``<R_i q, R_j k>`` depends only on
  ``j - i`` (rotation by angle ``+n * theta_k`` at position ``n``). Shared by all
  heads; no parameters.
* Only the first ``r = 2 * floor(rotary_fraction * D / 2)`` channels of each
  head rotate; the rest pass through unchanged (GPT-NeoX ``rotary_pct``).
  Frequencies are ``theta_k = base ** (-2k / r)``, ``k = 0 .. r/2 - 1``.
* Pairing: ``pairing="half"`` (default) pairs channel ``k`` with ``k + r/2``,
  as GPT-NeoX and Hugging Face LLaMA's ``rotate_half`` do;
  ``pairing="interleaved"`` pairs ``2k`` with ``2k + 1``, as the RoFormer paper
  (and GPT-J) write it. The two are the same map up to a fixed permutation of
  channels, so they train identically but checkpoints are not interchangeable.
* Frequencies and angles are computed in float64 (float32 on devices without
  float64) and cos/sin are handed over as float32, whatever the model's dtype;
  the rotation itself runs in at least float32 and returns ``x``'s dtype.

Dynamic NTK and caching: ``rotate`` receives ``seq_len = max key position + 1``
of the current call and the base depends on it. A cached decoder that rotates
each key once, when it is written, cannot reproduce a full pass beyond
``original_max_len`` (old keys were rotated with an older base); relpos'
attention rotates the stored (unrotated) keys again on every call, which makes
it consistent with a full pass of the same total length. For the same reason a
dynamic-NTK instance is not shift-invariant (``relative`` is False for it).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from relpos.encodings.base import Encoding
from relpos.validation import MAX_POSITIONS, MAX_TABLE, check_float, check_int

__all__ = ["RoPE", "SCALINGS", "rotary_dims", "rotate_pairs"]

#: accepted values of ``scaling`` (besides None).
SCALINGS: tuple[str, ...] = ("linear", "ntk", "dynamic", "yarn", "llama3")
PAIRINGS: tuple[str, ...] = ("half", "interleaved")


def rotary_dims(head_dim: int, rotary_fraction: float) -> int:
    """Number of rotated channels ``r``: ``2 * floor(rotary_fraction * head_dim / 2)``.

    Raises:
        ValueError: ``rotary_fraction`` outside ``(0, 1]`` or fewer than 2 channels rotate.
    """
    check_float("rotary_fraction", rotary_fraction, 0.0, 1.0, lo_open=True)
    r = 2 * int(head_dim * float(rotary_fraction) // 2)
    if r < 2:
        raise ValueError(
            f"rotary_fraction={rotary_fraction} of head_dim={head_dim} rotates {r} channels; at least 2 are needed"
        )
    return r


def _angle_dtype(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "mps" else torch.float64


def rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor, r: int, pairing: str) -> Tensor:
    """Rotate the first ``r`` channels of ``x`` pairwise; pass the rest through.

    Args:
        x: ``(B, H, N, D)``.
        cos, sin: ``(B or 1, N, r/2)`` float32, already including any per-pair scale.
        r: rotated channels.
        pairing: ``"half"`` or ``"interleaved"``.
    Returns:
        ``(B, H, N, D)`` in ``x``'s dtype.

    With tables that need no gradient (every built-in scheme) this is one autograd
    node whose backward is the transposed map (the same rotation with ``-sin``):
    no slices, concatenations or zero-filled gradients of them.
    """
    cdtype = torch.promote_types(x.dtype, torch.float32)
    c = cos[:, None].to(cdtype)  # (B|1, 1, N, r/2)
    s = sin[:, None].to(cdtype)
    if not (c.requires_grad or s.requires_grad) and c.shape[0] in (1, x.shape[0]):
        return _RotatePairs.apply(x, c, s, r, pairing)
    x1, x2 = _halves(x.to(cdtype), r, pairing)  # tables with gradients: plain ops, autograd records them
    o1 = x1 * c - x2 * s
    o2 = x1 * s + x2 * c
    rot = torch.cat((o1, o2), dim=-1) if pairing == "half" else torch.stack((o1, o2), dim=-1).flatten(-2)
    rot = rot.to(x.dtype)
    return rot if r == x.shape[-1] else torch.cat((rot, x[..., r:]), dim=-1)


def _halves(t: Tensor, r: int, pairing: str) -> tuple[Tensor, Tensor]:
    h = r // 2
    if pairing == "half":
        return t[..., :h], t[..., h:r]
    return t[..., 0:r:2], t[..., 1:r:2]


class _RotatePairs(torch.autograd.Function):
    """:func:`rotate_pairs` with constant tables: forward rotates into one new tensor, backward
    rotates the gradient back (the transpose of ``[[c, -s], [s, c]]`` is the same map with ``-s``)."""

    @staticmethod
    def forward(ctx, x, c, s, r, pairing):
        ctx.save_for_backward(c, s)
        ctx.r, ctx.pairing, ctx.x_dtype = r, pairing, x.dtype
        xc = x.to(c.dtype)
        x1, x2 = _halves(xc, r, pairing)
        out = torch.empty(x.shape, dtype=c.dtype, device=x.device)
        o1, o2 = _halves(out, r, pairing)
        torch.mul(x1, c, out=o1)
        o1.addcmul_(x2, s, value=-1)
        torch.mul(x1, s, out=o2)
        o2.addcmul_(x2, c)
        if r < x.shape[-1]:
            out[..., r:] = xc[..., r:]
        return out.to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        c, s = ctx.saved_tensors
        return _RotatePairs.apply(g, c, -s, ctx.r, ctx.pairing).to(ctx.x_dtype), None, None, None, None


def _check_positive(name: str, v, *, lo_exclusive: float = 0.0) -> float:
    return check_float(name, v, lo_exclusive, lo_open=True)


class RoPE(Encoding):
    """Rotary position embeddings (no parameters), optionally scaled for longer contexts.

    Args:
        n_heads: heads H (RoPE is the same for every head).
        head_dim: per-head dimension D.
        max_len: model length; the default of ``original_max_len``.
        rotary_fraction: fraction of each head's channels that rotate, in ``(0, 1]``.
        base: frequency base (10000).
        pairing: ``"half"`` (GPT-NeoX / HF LLaMA ``rotate_half``, default) or
            ``"interleaved"`` (RoFormer paper, GPT-J).
        scaling: None or one of ``"linear"``, ``"ntk"``, ``"dynamic"``, ``"yarn"``,
            ``"llama3"`` (see the module docstring).
        factor: context-extension factor (>= 1) for the scalings. Default 4.
        original_max_len: length the model was trained at (dynamic, YaRN, llama3);
            default ``max_len``.
        beta_fast, beta_slow: YaRN ramp boundaries in rotations (32 and 1).
        attention_factor: YaRN temperature override; default ``0.1 ln(factor) + 1``.
        low_freq_factor, high_freq_factor: llama3 wavelength boundaries (1 and 4).

    Example:
        >>> enc = RoPE(n_heads=1, head_dim=4)
        >>> q = torch.tensor([[[[1.0, 0.0, 0.0, 0.0]]]])  # (B, H, N, D)
        >>> enc.rotate(q, torch.tensor([[1]]), is_query=True, seq_len=2)  # pair (0, 2) turns by 1 rad
        tensor([[[[0.5403, 0.0000, 0.8415, 0.0000]]]])
    """

    name = "rope"
    acts_on = frozenset({"qk"})
    relative = True
    scalings = SCALINGS
    paper = "https://arxiv.org/abs/2104.09864"

    def __init__(
        self,
        n_heads: int = 8,
        head_dim: int = 64,
        max_len: int = 512,
        *,
        rotary_fraction: float = 1.0,
        base: float = 10000.0,
        pairing: str = "half",
        scaling: str | None = None,
        factor: float = 4.0,
        original_max_len: int | None = None,
        beta_fast: float = 32.0,
        beta_slow: float = 1.0,
        attention_factor: float | None = None,
        low_freq_factor: float = 1.0,
        high_freq_factor: float = 4.0,
    ) -> None:
        super().__init__(n_heads)
        check_int("head_dim", head_dim, 2, MAX_TABLE)
        if head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary schemes (channels rotate in pairs), got {head_dim}")
        self.head_dim = head_dim
        self.rotary_fraction = rotary_fraction
        self.rot_dim = rotary_dims(head_dim, rotary_fraction)
        self.base = _check_positive("base", base, lo_exclusive=1.0)
        if pairing not in PAIRINGS:
            raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
        self.pairing = pairing
        self.max_len = max_len
        self._cache: dict = {}
        self.set_scaling(
            scaling,
            factor=factor,
            original_max_len=max_len if original_max_len is None else original_max_len,
            beta_fast=beta_fast,
            beta_slow=beta_slow,
            attention_factor=attention_factor,
            low_freq_factor=low_freq_factor,
            high_freq_factor=high_freq_factor,
        )

    # ----------------------------------------------------------------- options

    def set_scaling(
        self,
        scaling: str | None,
        *,
        factor: float | None = None,
        original_max_len: int | None = None,
        beta_fast: float | None = None,
        beta_slow: float | None = None,
        attention_factor: float | None = None,
        low_freq_factor: float | None = None,
        high_freq_factor: float | None = None,
    ) -> "RoPE":
        """Switch the context-extension scaling in place (e.g. at evaluation time).

        Arguments left as None keep their current value. Returns ``self``.

        Raises:
            ValueError: unknown ``scaling`` or an option out of range.
        """
        if scaling in ("none", "None"):
            scaling = None
        if scaling is not None and scaling not in SCALINGS:
            raise ValueError(f"scaling must be None or one of {SCALINGS}, got {scaling!r}")
        cur = getattr(self, "_opts", {})
        factor = cur.get("factor") if factor is None else factor
        factor = _check_positive("factor", factor)
        if factor < 1.0:
            raise ValueError(f"factor must be >= 1, got {factor}")
        oml = cur.get("original_max_len") if original_max_len is None else original_max_len
        check_int("original_max_len", oml, 1, MAX_POSITIONS)
        bf = _check_positive("beta_fast", cur.get("beta_fast") if beta_fast is None else beta_fast)
        bs = _check_positive("beta_slow", cur.get("beta_slow") if beta_slow is None else beta_slow)
        if bs >= bf:
            raise ValueError(f"beta_slow must be < beta_fast, got beta_slow={bs}, beta_fast={bf}")
        af = cur.get("attention_factor") if attention_factor is None else attention_factor
        if af is not None:
            af = _check_positive("attention_factor", af)
        lo = _check_positive("low_freq_factor", cur.get("low_freq_factor") if low_freq_factor is None else low_freq_factor)
        hi = _check_positive(
            "high_freq_factor", cur.get("high_freq_factor") if high_freq_factor is None else high_freq_factor
        )
        if hi <= lo:
            raise ValueError(f"high_freq_factor must be > low_freq_factor, got {hi} <= {lo}")
        if scaling in ("ntk", "dynamic") and self.rot_dim < 4:
            raise ValueError(f"scaling={scaling!r} needs at least 4 rotated channels (r - 2 > 0), got r={self.rot_dim}")
        self.scaling = scaling
        self._opts = {
            "factor": factor,
            "original_max_len": oml,
            "beta_fast": bf,
            "beta_slow": bs,
            "attention_factor": af,
            "low_freq_factor": lo,
            "high_freq_factor": hi,
        }
        # Dynamic NTK depends on the total length, so shifting every position changes it.
        self.relative = scaling != "dynamic"
        self._cache = {}
        return self

    @property
    def factor(self) -> float:
        return self._opts["factor"]

    @property
    def original_max_len(self) -> int:
        return self._opts["original_max_len"]

    @property
    def mscale(self) -> float:
        """Multiplier of the rotated q and k (YaRN's attention temperature; 1 otherwise)."""
        if self.scaling != "yarn":
            return 1.0
        if self._opts["attention_factor"] is not None:
            return self._opts["attention_factor"]
        f = self.factor
        return 1.0 if f <= 1.0 else 0.1 * math.log(f) + 1.0

    def describe(self) -> dict:
        d = super().describe()
        d["scaling"] = self.scaling
        return d

    def extra_repr(self) -> str:
        return (f"head_dim={self.head_dim}, rot_dim={self.rot_dim}, base={self.base}, pairing={self.pairing!r}, "
                f"scaling={self.scaling!r}, factor={self.factor}, original_max_len={self.original_max_len}")

    # ------------------------------------------------------------ frequencies

    def inv_freq(self, seq_len: int | None = None) -> Tensor:
        """The ``r/2`` rotation frequencies (radians per position), float64 on CPU.

        Args:
            seq_len: total length, used by ``"dynamic"`` only.
        """
        r = self.rot_dim
        o = self._opts
        f = o["factor"]
        L = o["original_max_len"]
        k2 = torch.arange(0, r, 2, dtype=torch.float64)  # 2k
        base = self.base
        if self.scaling == "ntk":
            base = base * f ** (r / (r - 2))
        elif self.scaling == "dynamic" and seq_len is not None and seq_len > L:
            base = base * (f * seq_len / L - (f - 1.0)) ** (r / (r - 2))
        theta = base ** (-k2 / r)  # (r/2,)
        if self.scaling == "linear":
            theta = theta / f
        elif self.scaling == "yarn":
            def dim_of(rotations: float) -> float:
                return r * math.log(L / (rotations * 2 * math.pi)) / (2 * math.log(self.base))

            low = max(math.floor(dim_of(o["beta_fast"])), 0)
            high = min(math.ceil(dim_of(o["beta_slow"])), r - 1)
            if low == high:
                high += 0.001
            ramp = ((torch.arange(r // 2, dtype=torch.float64) - low) / (high - low)).clamp(0.0, 1.0)
            theta = theta / f * ramp + theta * (1.0 - ramp)
        elif self.scaling == "llama3":
            wavelen = 2 * math.pi / theta
            lo_w = L / o["low_freq_factor"]
            hi_w = L / o["high_freq_factor"]
            smooth = (L / wavelen - o["low_freq_factor"]) / (o["high_freq_factor"] - o["low_freq_factor"])
            blended = (1 - smooth) * theta / f + smooth * theta
            theta = torch.where(wavelen > lo_w, theta / f, torch.where(wavelen < hi_w, theta, blended))
        return theta

    def _effective_len(self, seq_len: int) -> int | None:
        if self.scaling == "dynamic" and seq_len > self.original_max_len:
            return int(seq_len)
        return None

    def _freqs_on(self, device: torch.device, seq_len: int) -> Tensor:
        key = (str(device), self._effective_len(seq_len))
        t = self._cache.get(key)
        if t is None:
            t = self.inv_freq(seq_len).to(device=device, dtype=_angle_dtype(device))
            if len(self._cache) > 64:
                self._cache.clear()
            self._cache[key] = t
        return t

    def _pair_scale(self, pos: Tensor, seq_len: int, is_query: bool) -> Tensor | None:
        """Optional per-(position, pair) multiplier of cos/sin (xPos); None for RoPE."""
        return None

    def cos_sin(self, pos: Tensor, seq_len: int, *, is_query: bool = True) -> tuple[Tensor, Tensor]:
        """cos and sin of the rotation angles, float32 ``(B or 1, N, r/2)``.

        Both include the scalar :attr:`mscale` (YaRN) and any per-pair scale.
        """
        freqs = self._freqs_on(pos.device, seq_len)  # (r/2,)
        ang = pos.to(freqs.dtype)[..., None] * freqs  # (B|1, N, r/2)
        cos, sin = torch.cos(ang), torch.sin(ang)
        m = self.mscale
        if m != 1.0:
            cos, sin = cos * m, sin * m
        sc = self._pair_scale(pos, seq_len, is_query)
        if sc is not None:
            cos, sin = cos * sc, sin * sc
        return cos.float(), sin.float()

    # ------------------------------------------------------------- fast path

    def _check_x(self, x: Tensor, pos: Tensor) -> None:
        if x.dim() != 4 or x.shape[-1] != self.head_dim:
            raise ValueError(f"x must have shape (B, H, N, D={self.head_dim}), got {tuple(x.shape)}")
        if pos.dim() != 2 or pos.shape[-1] != x.shape[2] or pos.shape[0] not in (1, x.shape[0]):
            raise ValueError(f"pos must have shape (B or 1, N={x.shape[2]}), got {tuple(pos.shape)}")

    def rotate(self, x: Tensor, pos: Tensor, *, is_query: bool, seq_len: int) -> Tensor:
        """Rotate q or k. ``x (B, H, N, D)``, ``pos (B or 1, N)`` int64; returns ``(B, H, N, D)``."""
        self._check_x(x, pos)
        cos, sin = self.cos_sin(pos, seq_len, is_query=is_query)
        return rotate_pairs(x, cos, sin, self.rot_dim, self.pairing)

    # ------------------------------------------------------------ reference

    def reference_frequencies(self, seq_len: int | None = None) -> list[float]:
        """The frequencies from the formulas, one Python float per pair (float64)."""
        r = self.rot_dim
        o = self._opts
        f, L = o["factor"], o["original_max_len"]
        base = self.base
        if self.scaling == "ntk":
            base = base * math.pow(f, r / (r - 2))
        if self.scaling == "dynamic" and seq_len is not None and seq_len > L:
            base = base * math.pow(f * seq_len / L - (f - 1), r / (r - 2))
        out = []
        for k in range(r // 2):
            th = 1.0 / math.pow(base, 2 * k / r)
            if self.scaling == "linear":
                th = th / f
            elif self.scaling == "yarn":
                # dimension at which a frequency completes `beta` turns over L positions
                lo = math.floor(r * math.log(L / (o["beta_fast"] * 2 * math.pi)) / (2 * math.log(base)))
                hi = math.ceil(r * math.log(L / (o["beta_slow"] * 2 * math.pi)) / (2 * math.log(base)))
                lo, hi = max(lo, 0), min(hi, r - 1)
                if hi == lo:
                    hi = hi + 0.001
                gamma = min(max((k - lo) / (hi - lo), 0.0), 1.0)  # 0: keep, 1: interpolate
                th = gamma * th / f + (1 - gamma) * th
            elif self.scaling == "llama3":
                wl = 2 * math.pi / th
                if wl > L / o["low_freq_factor"]:
                    th = th / f
                elif wl >= L / o["high_freq_factor"]:
                    sm = (L / wl - o["low_freq_factor"]) / (o["high_freq_factor"] - o["low_freq_factor"])
                    th = (1 - sm) * th / f + sm * th
            out.append(th)
        return out

    def _reference_pair_scale(self, p: int, k: int, seq_len: int, is_query: bool) -> float:
        return 1.0

    def reference_rotate(self, x: Tensor, pos: Tensor, *, is_query: bool, seq_len: int) -> Tensor:
        """Block-diagonal 2x2 rotations, one per pair and position, built in float64 loops."""
        self._check_x(x, pos)
        B, H, N, D = x.shape
        r, h = self.rot_dim, self.rot_dim // 2
        freqs = self.reference_frequencies(seq_len)
        ms = self.mscale
        P = pos.shape[0]
        mats = []
        for b in range(P):
            per_pos = []
            for n in range(N):
                p = int(pos[b, n])
                M = [[0.0] * D for _ in range(D)]
                for c in range(r, D):
                    M[c][c] = 1.0  # pass-through channels
                for k in range(h):
                    a, c2 = (k, k + h) if self.pairing == "half" else (2 * k, 2 * k + 1)
                    g = ms * self._reference_pair_scale(p, k, seq_len, is_query)
                    cs, sn = g * math.cos(p * freqs[k]), g * math.sin(p * freqs[k])
                    # [x_a', x_c'] = [[cos, -sin], [sin, cos]] @ [x_a, x_c]
                    M[a][a], M[a][c2] = cs, -sn
                    M[c2][a], M[c2][c2] = sn, cs
                per_pos.append(M)
            mats.append(per_pos)
        R = torch.tensor(mats, dtype=torch.float64, device=x.device)  # (P, N, D, D)
        return torch.einsum("bnij,bhnj->bhni", R, x.double())
