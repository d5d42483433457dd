"""View 3: logits of fixed content at positions ``0..N-1`` and ``c..c+N-1``, for an absolute
and a relative scheme: a relative scheme's logits do not change when every position moves."""

from __future__ import annotations

import inspect

from relpos.encodings import get_scheme, scheme_names
from relpos.explorer.content import SHIFT_HEAD_DIM, SHIFT_HEADS, shift_logits
from relpos.explorer.params import get_choice, get_int, sig, tolist

ROUTE = "shift"


def default_pair() -> tuple[str, str]:
    """The pair the page starts with: the first absolute scheme that embeds positions, and the
    first relative scheme that rotates q and k (else the first relative one), in registry order."""
    absolute, relative, fallback = None, None, None
    for name in scheme_names():
        cls, _ = get_scheme(name)
        if absolute is None and not cls.relative and "embedding" in cls.acts_on:
            absolute = name
        if cls.relative and cls.acts_on:
            fallback = fallback or name
            if relative is None and "qk" in cls.acts_on:
                relative = name
    names = scheme_names()
    return absolute or names[0], relative or fallback or names[0]


def answer(ex, params: dict) -> dict:
    """Logits of fixed random content at positions ``0..N-1`` and ``c..c+N-1``, for two schemes."""
    L = ex.limits
    names = scheme_names()
    n = get_int(params, "n", 12, 2, L.max_shift_len, cap=True, unit="tokens")
    c = get_int(params, "c", 5, 0, L.max_shift, cap=True, unit="positions")
    seed = get_int(params, "seed", 0, 0, 2**31 - 1)
    head = get_int(params, "head", 0, 0, SHIFT_HEADS - 1)
    default_abs, default_rel = default_pair()
    out = {"n": n, "c": c, "seed": seed, "head": head, "n_heads": SHIFT_HEADS, "head_dim": SHIFT_HEAD_DIM}
    for slot, default in (("absolute", default_abs), ("relative", default_rel)):
        name = get_choice(params, slot, default, names)
        out[slot] = _one(ex, name, n, c, seed, head, slot)
    return out


def _one(ex, name: str, n: int, c: int, seed: int, head: int, slot: str) -> dict:
    H, D = SHIFT_HEADS, SHIFT_HEAD_DIM
    cls, _ = get_scheme(name)
    opts = (("init_std", 1.0),) if "init_std" in inspect.signature(cls.__init__).parameters else ()
    max_len = n + ex.limits.max_shift
    ex.encodings.check_cost(name, opts, H, D, False, max_len, n, n, fields=[slot], length_field="n")
    enc = ex.encodings.get(name, opts, H, D, False, seed, max_len)
    base = shift_logits(enc, n, 0, seed)[head]  # (N, N)
    moved = shift_logits(enc, n, c, seed)[head]
    diff = moved - base
    max_diff = float(diff.abs().max())
    # float32 rounding of position terms grows with the positions and the logits' size
    scale = max(1.0, float(base.abs().max()), float(moved.abs().max()))
    tol = max(1e-5, 1e-6 * (n + c) * scale)
    desc = enc.describe()
    return {"scheme": name, "relative": desc["relative"], "acts_on": desc["acts_on"],
            "base": tolist(base), "shifted": tolist(moved), "diff": tolist(diff),
            "max_abs_diff": sig(max_diff, 4), "tolerance": sig(tol, 3), "unchanged": max_diff <= tol}
