"""View 2's RoPE section: the geometry of rotary embeddings, from relpos's own ``RoPE``.

RoFormer (Su et al. 2021, https://arxiv.org/abs/2104.09864) rotates each pair of channels ``k`` of q and k
by the angle ``position * theta_k``. A rotation keeps lengths, and ``R(i theta)^T R(j theta) = R((j - i) theta)``,
so ``q_i . k_j`` depends on the positions only through ``d = j - i``. The context-extension scalings
(position interpolation, NTK-aware, YaRN) change the frequencies ``theta_k``; this route returns them side by
side, computed by ``RoPE.inv_freq`` after ``set_scaling``, and one seeded q/k pair rotated by ``RoPE.rotate``.
"""

from __future__ import annotations

import math

import torch

from relpos.encodings import get_scheme
from relpos.explorer.content import hash_seed
from relpos.explorer.params import get_choice, get_int, sig, tolist

ROUTE = "rope"

#: The scalings shown side by side (``None`` is plain RoPE), as ``RoPE.set_scaling`` names them.
SIDE_BY_SIDE = (None, "linear", "ntk", "yarn")


def _rope(head_dim: int, scaling, factor: float, original: int):
    cls, _ = get_scheme("rope")
    enc = cls(n_heads=1, head_dim=head_dim, max_len=max(original, 16))
    enc.set_scaling(scaling, factor=factor, original_max_len=original)
    return enc


def _pairs(x: torch.Tensor, pairing: str) -> torch.Tensor:
    """``(D,)`` -> ``(D/2, 2)``: the channel pairs a rotation turns together."""
    D = x.shape[-1]
    if pairing == "interleaved":
        return x.view(D // 2, 2)
    return torch.stack([x[: D // 2], x[D // 2:]], dim=-1)


def answer(ex, params: dict) -> dict:
    """Frequencies of every scaling, and a seeded q/k pair rotated at positions ``i`` and ``j``."""
    D = get_int(params, "head_dim", 16, 4, 64)
    if D % 2:
        from relpos.explorer.errors import ApiError

        raise ApiError(f"head_dim must be even (channels rotate in pairs), got {D}", field="head_dim")
    i = get_int(params, "i", 2, 0, 4096, unit="positions")
    j = get_int(params, "j", 7, 0, 4096, unit="positions")
    shift = get_int(params, "shift", 10, 0, 4096, unit="positions")
    factor = get_int(params, "factor", 4, 1, 64)
    original = get_int(params, "original", 64, 2, 4096, unit="positions")
    seed = get_int(params, "seed", 0, 0, 2**31 - 1)
    names = ["none"] + [s for s in SIDE_BY_SIDE if s]
    scaling = get_choice(params, "scaling", "none", names)
    scaling = None if scaling == "none" else scaling
    freqs = []
    for s in SIDE_BY_SIDE:
        enc = _rope(D, s, float(factor), original)
        freqs.append({"scaling": s or "none", "theta": [sig(v, 6) for v in enc.inv_freq(original * factor).tolist()]})
    enc = _rope(D, scaling, float(factor), original)
    g = torch.Generator().manual_seed(hash_seed(f"relpos-explorer/rope/{seed}"))
    q = torch.randn(D, generator=g, dtype=torch.float64)
    k = torch.randn(D, generator=g, dtype=torch.float64)
    seq = max(i, j) + shift + 1

    def rot(x, p, is_query):
        pos = torch.tensor([[p]])
        return enc.rotate(x.float()[None, None, None], pos, is_query=is_query, seq_len=seq)[0, 0, 0].double()

    qi, kj = rot(q, i, True), rot(k, j, False)
    qs, ks = rot(q, i + shift, True), rot(k, j + shift, False)
    theta = enc.inv_freq(seq)
    scale = 1.0 / math.sqrt(D)
    # the dot product against d = j - i, from query 0 and from query `shift`: the two curves coincide
    ds = list(range(-24, 25))
    curve0 = [float(rot(q, max(0, -d), True) @ rot(k, max(0, -d) + d, False)) * scale for d in ds]
    curve1 = [float(rot(q, shift + 24, True) @ rot(k, shift + 24 + d, False)) * scale for d in ds]
    qp, kp, qip, kjp = (_pairs(x, enc.pairing) for x in (q, k, qi, kj))
    return {
        "head_dim": D, "pairs": D // 2, "i": i, "j": j, "d": j - i, "shift": shift, "factor": factor,
        "original": original, "seed": seed, "scaling": scaling or "none", "base": enc.base, "pairing": enc.pairing,
        "frequencies": freqs, "theta": [sig(v, 6) for v in theta.tolist()],
        "q": tolist(qp, 5), "k": tolist(kp, 5), "q_rot": tolist(qip, 5), "k_rot": tolist(kjp, 5),
        "angle_q": [sig(i * float(t), 6) for t in theta], "angle_k": [sig(j * float(t), 6) for t in theta],
        "norm_q": sig(float(q.norm()), 6), "norm_q_rot": sig(float(qi.norm()), 6),
        "norm_k": sig(float(k.norm()), 6), "norm_k_rot": sig(float(kj.norm()), 6),
        "dot": sig(float(qi @ kj) * scale, 6), "dot_shifted": sig(float(qs @ ks) * scale, 6),
        "dot_unrotated": sig(float(q @ k) * scale, 6),
        "offsets": ds, "curve": [sig(v, 6) for v in curve0], "curve_shifted": [sig(v, 6) for v in curve1],
    }
