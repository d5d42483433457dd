"""What the explorer's bias view needs to know about each scheme, from capabilities.

Nothing here compares scheme names. A scheme enters the bias view through
what it declares and exposes:

* ``"bias"`` in ``acts_on`` -- a position-only term, drawn from ``bias()``;
  with a public ``buckets(delta)`` method it is a *bucketed* bias (bucket ids
  can be shown, with their boundaries);
* ``"score"`` in ``acts_on`` with a public ``rel_index`` (and ``clipped_tables()``) --
  a clipped relative *table* (the norms of the rows each pair uses);
* any other ``"score"`` term -- *content*-dependent, shown for a typed text.

Extra panels come from public methods too: ``positions()`` (contextual
positions), ``log_forget_gates()`` (per-token gates) and ``position_index()``
(rows of a relative table). Display hints that no capability can say (options
that mean nothing on this page, starting values that make a term visible,
per-head numbers the page may set) are data: a scheme may declare them as a
class attribute ``explorer_hints`` (a dict with the fields of :class:`Hints`),
and :data:`HINTS` holds them for the built-in schemes. A new scheme needs
neither: it is shown with its own options and defaults, and the page needs no
edit, because the API serves its label, summary and kind.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import torch

from relpos.encodings import SCHEMES, get_scheme, scheme_names
from relpos.explorer.errors import ApiError

__all__ = ["Scalar", "Hints", "HINTS", "BiasEntry", "bias_entries", "hints_for", "option_specs", "uses_head_dim",
           "set_head_scalar", "view_kind"]


@dataclasses.dataclass(frozen=True)
class Scalar:
    """A per-head number the page may set: request ``set.<name>`` writes ``attribute[head]``.

    ``attribute`` is a public ``(H,)`` tensor attribute or property of the scheme
    (e.g. ALiBi's ``slopes``, KERPLE's ``r1``); :func:`set_head_scalar` finds the
    parameter behind it.
    """

    name: str
    attribute: str
    lo: float
    hi: float


@dataclasses.dataclass(frozen=True)
class Hints:
    """Display hints for one scheme (see the module docstring)."""

    hidden: tuple[str, ...] = ()
    defaults: tuple[tuple[str, Any], ...] = ()
    scalars: tuple[Scalar, ...] = ()


#: Hints of the built-in schemes, keyed by registry name (data, not code paths).
HINTS: dict[str, Hints] = {
    "alibi": Hints(hidden=("learnable_slopes",), scalars=(Scalar("slope", "slopes", 1e-6, 100.0),)),
    "kerple-log": Hints(scalars=(Scalar("r1", "r1", 1e-4, 100.0), Scalar("r2", "r2", 1e-4, 100.0))),
    "kerple-power": Hints(scalars=(Scalar("r1", "r1", 1e-4, 100.0), Scalar("r2", "r2", 1e-4, 1.999))),
    "shaw": Hints(hidden=("value",)),
    "shaw-kv": Hints(hidden=("value",)),
    "deberta": Hints(hidden=("share_att_key", "layer_norm_eps")),
    # CoPE's table starts at zero in the paper (the term would be 0 everywhere) and FoX's gate
    # weights at std 0.02 (gates all near 1/2): start them larger so the term is visible
    "cope": Hints(defaults=(("init_std", 0.1),)),
    "fox": Hints(defaults=(("init_std", 0.25),)),
}


def hints_for(name: str) -> Hints:
    """The scheme's own ``explorer_hints`` if it declares them, else :data:`HINTS`, else none."""
    cls, _ = get_scheme(name)
    own = getattr(cls, "explorer_hints", None)
    if isinstance(own, Hints):
        return own
    if isinstance(own, dict):
        return Hints(hidden=tuple(own.get("hidden", ())), defaults=tuple(dict(own.get("defaults", {})).items()),
                     scalars=tuple(Scalar(*s) if not isinstance(s, Scalar) else s for s in own.get("scalars", ())))
    return HINTS.get(name, Hints())


def view_kind(cls) -> str | None:
    """``"bucketed"``, ``"bias"``, ``"table"``, ``"content"``, or None (not shown in the bias view)."""
    acts = cls.acts_on
    if "score" in acts:
        if callable(getattr(cls, "rel_index", None)):  # the clipped-table protocol: rel_index + clipped_tables()
            return "table"
        return "content"
    if "bias" in acts:
        return "bucketed" if callable(getattr(cls, "buckets", None)) else "bias"
    return None


@dataclasses.dataclass(frozen=True)
class BiasEntry:
    """A choice in the bias-matrix view.

    Attributes:
        key: the name the page sends (the registry name; ``"log2"`` for the plain log2 buckets).
        registry: registry name of the scheme (None for the plain log2 buckets).
        kind: :func:`view_kind`, or ``"log2"``.
        hidden: constructor options not shown as controls.
        overrides: per-head scalars the page may set (name, lo, hi).
        defaults: options whose starting value in this view differs from the library's.
        scalars: the full :class:`Scalar` hints behind ``overrides``.
    """

    key: str
    registry: str | None
    kind: str = "bias"
    hidden: tuple[str, ...] = ()
    overrides: tuple[tuple[str, float, float], ...] = ()
    defaults: tuple[tuple[str, Any], ...] = ()
    scalars: tuple[Scalar, ...] = ()


_ORDER = {"bucketed": 0, "log2": 1, "bias": 2, "table": 3, "content": 4}


def bias_entries() -> tuple[BiasEntry, ...]:
    """Every scheme the bias view can show, in a teaching order (bucketed, log2, bias, table, content).

    A preset that only changes options the view hides (e.g. a value-side table)
    would show the same picture as its base scheme and is left out.
    """
    entries = [BiasEntry("log2", None, "log2")]
    seen: set = set()
    for name in scheme_names():
        cls, preset = get_scheme(name)
        kind = view_kind(cls)
        if kind is None:
            continue
        h = hints_for(name)
        sig = (cls, tuple(sorted((k, repr(v)) for k, v in preset.items() if k not in h.hidden)))
        if sig in seen:
            continue
        seen.add(sig)
        entries.append(BiasEntry(name, name, kind, h.hidden, tuple((s.name, s.lo, s.hi) for s in h.scalars),
                                 h.defaults, h.scalars))
    entries.sort(key=lambda e: _ORDER[e.kind])  # stable: registry order within a kind
    return tuple(entries)


def label_of(name: str) -> str:
    return SCHEMES[name].summary if name in SCHEMES else name


_DIM_OPTIONS = {"self", "n_heads", "head_dim", "d_model", "max_len", "causal"}


def option_specs(registry: str, hidden: tuple[str, ...] = (), defaults=()) -> list[dict]:
    """Numeric/boolean constructor options of a scheme, read from its signature.

    ``defaults`` (pairs or a dict) replaces the starting value of some options;
    such an option reports the library's own default as ``library_default``.
    """
    cls, preset = get_scheme(registry)
    defaults = dict(defaults)
    out = []
    for p in inspect.signature(cls.__init__).parameters.values():
        if p.name in _DIM_OPTIONS or p.name in preset or p.name in hidden:
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is inspect.Parameter.empty:
            continue
        d = p.default
        if isinstance(d, bool):
            typ = "bool"
        elif isinstance(d, int):
            typ = "int"
        elif isinstance(d, float):
            typ = "float"
        else:
            continue
        spec = {"name": p.name, "type": typ, "default": d}
        if p.name in defaults:
            spec["default"] = type(d)(defaults[p.name])
            spec["library_default"] = d
        out.append(spec)
    return out


def uses_head_dim(registry: str) -> bool:
    """Whether the scheme's size depends on the head dimension (the page shows the control)."""
    cls, _ = get_scheme(registry)
    params = inspect.signature(cls.__init__).parameters
    return "head_dim" in params or "d_model" in params


def set_head_scalar(enc: torch.nn.Module, scalar: Scalar, head: int, value: float) -> None:
    """Make ``getattr(enc, scalar.attribute)[head] == value`` by editing the parameter behind it.

    The attribute may be a parameter or buffer itself (ALiBi's slopes) or a
    property computed from one by an increasing or decreasing elementwise map
    (KERPLE's ``r1 = softplus(raw)``); the parameter is found by which one
    moves the attribute, and the value is solved for by bisection, so no
    scheme's private parametrisation is needed here.

    Raises:
        ApiError: the attribute cannot reach ``value``.
    """
    field = "set." + scalar.name
    attr = scalar.attribute
    with torch.no_grad():
        target = getattr(enc, attr)
        for _, t in (*enc.named_parameters(), *enc.named_buffers()):
            if t is target:
                t[head] = value
                return
        before = target.detach().clone()
        for _, t in (*enc.named_parameters(), *enc.named_buffers()):
            if t.dim() != 1 or t.shape != before.shape or not t.is_floating_point():
                continue
            old = t[head].item()
            t[head] = old + 0.5
            moved = getattr(enc, attr)[head].item() != before[head].item()
            t[head] = old
            if not moved:
                continue

            def f(x: float) -> float:
                t[head] = x
                return float(getattr(enc, attr)[head])

            lo, hi = old - 1.0, old + 1.0
            increasing = f(hi) >= f(lo)
            for _ in range(200):  # widen until the bracket holds the value
                flo, fhi = f(lo), f(hi)
                if min(flo, fhi) <= value <= max(flo, fhi):
                    break
                lo, hi = lo - 2 * (hi - lo), hi + 2 * (hi - lo)
            else:  # pragma: no cover - guarded by the scalar's range
                t[head] = old
                raise ApiError(f"{scalar.name} cannot be set to {value:g}", field=field)
            for _ in range(200):
                mid = 0.5 * (lo + hi)
                if (f(mid) < value) == increasing:
                    lo = mid
                else:
                    hi = mid
            t[head] = 0.5 * (lo + hi)
            return
    raise ApiError(f"{scalar.name} cannot be set for this scheme", field=field)  # pragma: no cover
