"""RoPE scalings of a Hugging Face checkpoint: its own (``native``) and those relpos applies at ``L / L0``.

Papers: position interpolation (Chen et al. 2023, https://arxiv.org/abs/2306.15595), dynamic NTK
(https://github.com/huggingface/transformers/pull/24653), YaRN (Peng et al. 2023,
https://arxiv.org/abs/2309.00071), Llama 3.1 (https://arxiv.org/abs/2407.21783), LongRoPE
(Ding et al. 2024, https://arxiv.org/abs/2402.13753).

Scalings (the rows of an evaluation):

* ``native``: the checkpoint exactly as its ``config.json`` says, whatever its
  ``rope_type`` (``default``, ``linear``, ``dynamic``, ``yarn``, ``longrope``,
  ``llama3``, ``proportional``, ...): transformers' own rotary embedding, fresh
  for every length (transformers' dynamic and LongRoPE embeddings keep state
  between calls; a fresh one is what ``model(input_ids)`` of a newly loaded
  checkpoint computes).
* ``none``, ``linear``, ``dynamic``, ``yarn``, ``llama3``: the checkpoint's
  *base* RoPE (its ``rope_theta`` and ``partial_rotary_factor``) with that
  scaling at ``factor = max(1, L / L0)``, replacing whatever scaling the
  checkpoint ships (the report says which). ``L0`` is the checkpoint's original
  context: ``--hf-context`` if given, else ``original_max_position_embeddings``
  (in ``rope_parameters`` or at the top of the config, as Phi-3 keeps it), else
  ``max_position_embeddings``.

``longrope`` and ``proportional`` cannot be applied to another checkpoint
(LongRoPE's per-dimension factors are searched for one model; proportional RoPE
has no length factor): they are evaluated as a checkpoint's ``native`` scaling
and refused by name as applied scalings. A ``rope_type`` that the installed
transformers does not implement is refused by name (:func:`check_rope`).
"""

from __future__ import annotations

import math

__all__ = ["HF_SCALINGS", "APPLIED_SCALINGS", "NATIVE_ONLY", "installed_rope_types", "rope_params",
           "native_rope_type", "check_rope", "original_context", "hf_rope_parameters", "relpos_rope_options",
           "head_dim"]

#: every scaling an evaluation can have; ``native`` is the checkpoint as shipped
HF_SCALINGS: tuple[str, ...] = ("native", "none", "linear", "dynamic", "yarn", "llama3")
#: scalings relpos applies to any checkpoint at ``factor = L / L0``
APPLIED_SCALINGS: tuple[str, ...] = HF_SCALINGS[1:]
#: rope types that are evaluated only as a checkpoint's own scaling, and why
NATIVE_ONLY: dict[str, str] = {
    "longrope": "LongRoPE's per-dimension factors are searched for one model; it is evaluated only as a "
                "checkpoint's native scaling",
    "proportional": "proportional RoPE has no length factor; it is evaluated only as a checkpoint's native scaling",
}


def installed_rope_types() -> set[str]:
    """The ``rope_type`` values the installed transformers implements (``default`` included)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    return {"default", *ROPE_INIT_FUNCTIONS}


def _nested(rp: dict) -> bool:
    return bool(rp) and all(isinstance(v, dict) or v is None for v in rp.values())


def rope_params(config) -> dict:
    """The config's ``rope_parameters`` with ``rope_theta`` filled in (a copy; per-layer dicts stay nested)."""
    rp = dict(getattr(config, "rope_parameters", None) or {})
    if not _nested(rp) and "rope_theta" not in rp and getattr(config, "rope_theta", None) is not None:
        rp["rope_theta"] = config.rope_theta
    return rp


def native_rope_type(config) -> str:
    """The checkpoint's own ``rope_type`` (``"per-layer"`` when layers differ)."""
    rp = rope_params(config)
    if _nested(rp):
        return "per-layer"
    return str(rp.get("rope_type", rp.get("type", "default")))


def _finite_positive(name: str, v, *, integer: bool = False, where: str = "config.json") -> None:
    ok = (not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v > 0
          and (not integer or float(v).is_integer()))
    if not ok:
        kind = "a positive integer" if integer else "a finite number > 0"
        raise ValueError(f"{where}: {name} must be {kind}, got {v!r}")


def check_rope(config, where: str = "config.json") -> str:
    """Refuse, with a one-line ``ValueError`` naming the field, what the evaluation cannot run as stated.

    Checked: ``rope_type`` implemented by the installed transformers;
    ``rope_theta`` finite and > 0; ``factor`` finite and >= 1;
    ``original_max_position_embeddings`` a positive integer; LongRoPE's factor
    lists of ``rot_dim / 2`` finite positive numbers. Returns the native rope type.
    """
    rp = rope_params(config)
    layers = [v for v in rp.values() if isinstance(v, dict)] if _nested(rp) else [rp]
    known = installed_rope_types()
    for p in layers:
        rt = p.get("rope_type", p.get("type", "default"))
        if rt not in known:
            raise ValueError(f"{where}: rope_type {rt!r} is not implemented by the installed transformers "
                             f"(it has {', '.join(sorted(known))}); relpos does not replace it with another")
        _finite_positive("rope_theta", p.get("rope_theta", getattr(config, "rope_theta", None)), where=where)
        if "factor" in p and p["factor"] is not None:
            _finite_positive("rope_parameters.factor", p["factor"], where=where)
            if p["factor"] < 1 and rt != "proportional":
                raise ValueError(f"{where}: rope_parameters.factor must be >= 1, got {p['factor']!r}")
        if rt in ("yarn", "llama3", "longrope") or "original_max_position_embeddings" in p:
            o = p.get("original_max_position_embeddings", getattr(config, "original_max_position_embeddings", None))
            if o is not None or rt != "longrope":
                _finite_positive("original_max_position_embeddings",
                                 o if o is not None else config.max_position_embeddings, integer=True, where=where)
        if rt == "longrope":
            half = int(head_dim(config) * float(p.get("partial_rotary_factor", 1.0))) // 2
            for key in ("short_factor", "long_factor"):
                f = p.get(key)
                if not isinstance(f, list) or len(f) != half:
                    raise ValueError(f"{where}: rope_parameters.{key} must be a list of {half} numbers")
                for v in f:
                    _finite_positive(f"rope_parameters.{key} entries", v, where=where)
    return native_rope_type(config)


def original_context(config, override: int | None = None) -> int:
    """``L0``: ``override`` (``--hf-context``), else the config's original context (see the module docstring)."""
    if override is not None:
        if isinstance(override, bool) or not isinstance(override, int) or override < 2:
            raise ValueError(f"--hf-context must be an integer >= 2, got {override!r}")
        return override
    rp = rope_params(config)
    if not _nested(rp) and rp.get("original_max_position_embeddings"):
        o = rp["original_max_position_embeddings"]
    elif getattr(config, "original_max_position_embeddings", None):
        o = config.original_max_position_embeddings
    else:
        o = config.max_position_embeddings
    _finite_positive("original context (original_max_position_embeddings or max_position_embeddings)", o,
                     integer=True)
    return int(o)


def head_dim(config) -> int:
    return int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)


def hf_rope_parameters(config, scaling: str, factor: float, original: int | None = None) -> dict:
    """The transformers ``rope_parameters`` of ``scaling`` at ``factor`` for a model with context ``original``.

    ``native`` returns the checkpoint's own parameters unchanged.
    """
    if scaling == "native":
        return rope_params(config)
    if scaling in NATIVE_ONLY:
        raise ValueError(f"scaling {scaling!r} cannot be applied: {NATIVE_ONLY[scaling]}")
    if scaling not in APPLIED_SCALINGS:
        raise ValueError(f"scaling must be one of {', '.join(HF_SCALINGS)}, got {scaling!r}")
    rp = rope_params(config)
    if _nested(rp):
        raise ValueError(f"scaling {scaling!r} cannot be applied: the checkpoint has per-layer rope parameters; "
                         "only its native scaling is evaluated")
    L0 = original or original_context(config)
    out = {"rope_type": "default" if scaling == "none" else scaling, "rope_theta": float(rp["rope_theta"])}
    if "partial_rotary_factor" in rp:
        out["partial_rotary_factor"] = rp["partial_rotary_factor"]
    if scaling != "none":
        out["factor"] = float(factor)
    if scaling in ("yarn", "llama3"):
        out["original_max_position_embeddings"] = int(L0)
    if scaling == "yarn":
        out.update(beta_fast=32.0, beta_slow=1.0)
    if scaling == "llama3":
        own = rp.get("rope_type") == "llama3"
        out["low_freq_factor"] = float(rp.get("low_freq_factor", 1.0)) if own else 1.0
        out["high_freq_factor"] = float(rp.get("high_freq_factor", 4.0)) if own else 4.0
    return out


def relpos_rope_options(config, scaling: str, factor: float, original: int | None = None) -> dict:
    """Keyword arguments of :class:`relpos.encodings.rope.RoPE` for the same scaling as :func:`hf_rope_parameters`."""
    if scaling == "native":
        raise ValueError("relpos_rope_options describes an applied scaling, not 'native'")
    hp = hf_rope_parameters(config, scaling, factor, original)
    L0 = original or original_context(config)
    opts = {"n_heads": int(config.num_attention_heads), "head_dim": head_dim(config), "base": hp["rope_theta"],
            "rotary_fraction": float(hp.get("partial_rotary_factor", 1.0)), "max_len": int(L0),
            "scaling": None if scaling == "none" else scaling, "factor": float(factor), "original_max_len": int(L0)}
    if scaling == "llama3":
        opts.update(low_freq_factor=hp["low_freq_factor"], high_freq_factor=hp["high_freq_factor"])
    return opts
