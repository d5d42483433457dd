"""View 3: logits of fixed content at positions ``0..N-1`` and ``c..c+N-1``, for an absolute
and a relative scheme: a relative scheme's logits do not change when every position moves."""

from __future__ import annotations

import inspect
import math

from relpos.encodings import get_scheme, scheme_names
from relpos.explorer.content import SHIFT_HEAD_DIM, SHIFT_HEADS, shift_logits, shift_logits_reference
from relpos.explorer.params import get_choice, get_int, sig, tolist

ROUTE = "shift"


#: What a scheme is under a shift of every position, from its capabilities (never its name):
#: "none" -- no position site at all (NoPE): nothing can move; "absolute" -- adds position vectors to
#: the tokens; "relative" -- depends on positions only through j - i (``relative`` is True);
#: "mixed" -- not purely relative without an embedding (FIRE's normaliser uses i, dynamic RoPE the length).
KINDS = ("none", "absolute", "relative", "mixed")


def kind_of(enc) -> str:
    """The :data:`KINDS` entry of a built scheme (instance attributes count: dynamic RoPE is not relative)."""
    sites = set(enc.acts_on)
    if not sites:
        return "none"
    if enc.relative:
        return "relative"
    return "absolute" if "embedding" in sites else "mixed"


#: Float64 rounding of the reference logits, relative to their magnitude: a difference below
#: ``REF_RTOL * max(1, |logit|) * (1 + log2(1 + N + c))`` is rounding, anything above is a real change.
REF_RTOL = 1e-10


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
    base = shift_logits(enc, n, 0, seed)[head]  # (N, N), float32: what the maps draw
    moved = shift_logits(enc, n, c, seed)[head]
    diff = moved - base
    max_diff = float(diff.abs().max())
    # the verdict comes from the float64 reference: float32 rounding of a fast path can be as large
    # as a small real change (FIRE past its length L), float64 rounding is ~1e-13 of the logits
    rbase = shift_logits_reference(enc, n, 0, seed)[head]  # (N, N) float64
    rmoved = shift_logits_reference(enc, n, c, seed)[head]
    ref_diff = float((rmoved - rbase).abs().max())
    scale = max(1.0, float(rbase.abs().max()), float(rmoved.abs().max()))
    tol = REF_RTOL * scale * (1.0 + math.log2(1 + n + c))
    # the float32 maps' own rounding, for the colour scale: a difference below it draws white
    tol32 = max(1e-5, 1e-6 * (n + c) * scale)
    desc = enc.describe()
    return {"scheme": name, "relative": bool(enc.relative), "kind": kind_of(enc), "acts_on": desc["acts_on"],
            "base": tolist(base), "shifted": tolist(moved), "diff": tolist(diff),
            "max_abs_diff": sig(max_diff, 4), "max_abs_diff_ref": sig(ref_diff, 4),
            "tolerance": sig(tol, 3), "tolerance_f32": sig(tol32, 3),
            "unchanged": ref_diff <= tol, "shifted_by": c}
