"""Registry of position schemes: one module per scheme, loaded lazily by name.

Use :func:`make_encoding` to build one::

    >>> from relpos import make_encoding
    >>> enc = make_encoding("t5", n_heads=8, head_dim=64, num_buckets=32)
    >>> enc.num_params()
    256
"""

from __future__ import annotations

import dataclasses
import importlib

from relpos.encodings.base import SITES, Dims, Encoding

__all__ = [
    "SCHEMES", "SchemeSpec", "Dims", "Encoding", "make_encoding", "scheme_names", "get_scheme", "normalise_name",
    "register_scheme", "unregister_scheme", "scheme_family", "SITES",
]


@dataclasses.dataclass(frozen=True)
class SchemeSpec:
    """Where a registered scheme lives and which preset options its name implies."""

    module: str
    cls: str
    options: dict = dataclasses.field(default_factory=dict)
    summary: str = ""

    def load(self) -> type[Encoding]:
        return getattr(importlib.import_module(self.module), self.cls)


_E = "relpos.encodings."

#: name -> spec. Names use hyphens; underscores are accepted as aliases.
SCHEMES: dict[str, SchemeSpec] = {
    "nope": SchemeSpec(_E + "nope", "NoPE", summary="no position information"),
    "sinusoidal": SchemeSpec(_E + "absolute", "Sinusoidal", summary="absolute sinusoidal embeddings"),
    "learned": SchemeSpec(_E + "absolute", "LearnedAbsolute", summary="absolute learned embedding table"),
    "shaw": SchemeSpec(_E + "shaw", "Shaw", summary="clipped relative key table (Shaw et al. 2018)"),
    "shaw-kv": SchemeSpec(_E + "shaw", "Shaw", {"value": True}, summary="clipped relative key and value tables"),
    "t5": SchemeSpec(_E + "t5", "T5Bias", summary="bucketed learned scalar bias (T5)"),
    "alibi": SchemeSpec(_E + "alibi", "ALiBi", summary="linear distance penalty per head"),
    "rope": SchemeSpec(_E + "rope", "RoPE", summary="rotary embeddings"),
    "rope-pi": SchemeSpec(_E + "rope", "RoPE", {"scaling": "linear"}, summary="RoPE, linear position interpolation"),
    "rope-ntk": SchemeSpec(_E + "rope", "RoPE", {"scaling": "ntk"}, summary="RoPE, NTK-aware base scaling"),
    "rope-dynamic": SchemeSpec(_E + "rope", "RoPE", {"scaling": "dynamic"}, summary="RoPE, dynamic NTK scaling"),
    "rope-yarn": SchemeSpec(_E + "rope", "RoPE", {"scaling": "yarn"}, summary="RoPE, YaRN"),
    "xpos": SchemeSpec(_E + "xpos", "XPos", summary="rotary with exponential decay (xPos)"),
    "transformer-xl": SchemeSpec(_E + "transformer_xl", "TransformerXL", summary="u, v and sinusoidal R"),
    "kerple-log": SchemeSpec(_E + "kerple", "Kerple", {"kernel": "log"}, summary="KERPLE logarithmic kernel"),
    "kerple-power": SchemeSpec(_E + "kerple", "Kerple", {"kernel": "power"}, summary="KERPLE power kernel"),
    "fire": SchemeSpec(_E + "fire", "FIRE", summary="MLP on normalised log distance"),
    "sandwich": SchemeSpec(_E + "sandwich", "Sandwich", summary="parameter-free sinusoid dot products"),
    # second wave (see docs): content-dependent and learned-function schemes
    "deberta": SchemeSpec(_E + "deberta", "DeBERTa", summary="disentangled c2p and p2c attention"),
    "cope": SchemeSpec(_E + "cope", "CoPE", summary="contextual position encoding (gated counts)"),
    "dpb": SchemeSpec(_E + "dpb", "DynamicPositionBias", summary="MLP on (log) distance per head"),
    "fox": SchemeSpec(_E + "fox", "ForgettingGate", summary="data-dependent forget-gate bias"),
}


def normalise_name(name: str, param: str = "scheme name") -> str:
    """Canonical registry spelling: stripped, lower case, hyphens (``"Rope_YaRN"`` -> ``"rope-yarn"``)."""
    if not isinstance(name, str):
        raise TypeError(f"{param} must be a str (a name from relpos.SCHEMES), got {type(name).__name__}")
    return name.strip().lower().replace("_", "-")


def register_scheme(name: str, cls: type[Encoding], *, options: dict | None = None, summary: str = "",
                    replace: bool = False) -> SchemeSpec:
    """Add a scheme defined outside relpos to the registry.

    After this, ``make_encoding(name)``, the models, every attention implementation
    and ``relpos schemes`` (in this process) know the scheme. The class must be
    importable as ``cls.__module__.cls.__qualname__`` (a module-level class).

    Args:
        name: registry name (normalised: lower case, hyphens).
        cls: an :class:`Encoding` subclass.
        options: preset options the name implies (as ``"rope-yarn"`` implies ``scaling="yarn"``).
        summary: one line for ``relpos schemes``.
        replace: allow replacing an existing entry.

    Raises:
        TypeError: ``cls`` is not an Encoding subclass.
        ValueError: the name is taken (and ``replace`` is False) or empty.
    """
    key = normalise_name(name, "name")
    if not key:
        raise ValueError("name must be a non-empty scheme name")
    if not (isinstance(cls, type) and issubclass(cls, Encoding)):
        raise TypeError(f"cls must be a subclass of relpos.Encoding, got {cls!r}")
    if key in SCHEMES and not replace:
        raise ValueError(f"scheme {key!r} is already registered; pass replace=True to replace it")
    spec = SchemeSpec(cls.__module__, cls.__qualname__, dict(options or {}), summary)
    SCHEMES[key] = spec
    return spec


def unregister_scheme(name: str) -> None:
    """Remove a scheme added with :func:`register_scheme` (unknown names raise ValueError)."""
    key = normalise_name(name, "name")
    if key not in SCHEMES:
        raise ValueError(f"unknown scheme {name!r}")
    del SCHEMES[key]


def scheme_family(name: str) -> str:
    """The registry name of the option-free entry a preset name belongs to.

    ``"rope-yarn"`` (RoPE with ``scaling="yarn"``) -> ``"rope"``; names without an
    option-free sibling of the same class (``"kerple-log"``) map to themselves.
    """
    key = normalise_name(name)
    if key not in SCHEMES:
        raise ValueError(f"unknown scheme {name!r}; known schemes: {', '.join(scheme_names())}")
    spec = SCHEMES[key]
    if spec.options:
        for other, o in SCHEMES.items():
            if not o.options and (o.module, o.cls) == (spec.module, spec.cls):
                return other
    return key


def scheme_names(*, available_only: bool = True) -> list[str]:
    """Registered scheme names, in registry order (``available_only`` is kept for compatibility)."""
    return list(SCHEMES)


def get_scheme(name: str) -> tuple[type[Encoding], dict]:
    """Return ``(class, preset options)`` for a registered name.

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    key = normalise_name(name)
    if key not in SCHEMES:
        raise ValueError(f"unknown scheme {name!r}; known schemes: {', '.join(scheme_names())}")
    spec = SCHEMES[key]
    return spec.load(), dict(spec.options)


def make_encoding(
    name: str,
    *,
    n_heads: int = 8,
    head_dim: int = 64,
    d_model: int | None = None,
    max_len: int = 512,
    causal: bool = True,
    **options,
) -> Encoding:
    """Build a scheme by registry name.

    Args:
        name: a key of :data:`SCHEMES` (``"t5"``, ``"rope-yarn"``, ...).
        n_heads, head_dim, d_model, max_len, causal: model dimensions (:class:`Dims`).
        **options: scheme options (e.g. ``num_buckets=32`` for T5); they override
            the preset options a name implies.

    Raises:
        ValueError: unknown scheme name or an option out of range.
        TypeError: an option the scheme does not take.
    """
    cls, preset = get_scheme(name)
    preset.update(options)
    return cls.build(Dims(n_heads=n_heads, head_dim=head_dim, d_model=d_model, max_len=max_len, causal=causal), **preset)
