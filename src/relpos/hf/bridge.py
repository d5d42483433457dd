"""The Hugging Face bridge (see :mod:`relpos.hf`): :func:`use_scheme` and the registered attention function."""

from __future__ import annotations

import torch
from torch import Tensor, nn

import relpos
from relpos.encodings import Encoding, get_scheme, make_encoding, normalise_name, scheme_names
from relpos.validation import check_bool, check_choice

__all__ = ["use_scheme", "rope_options", "bridge_schemes", "ATTN_NAME", "refusal"]

#: The oldest transformers with both registries the bridge uses (AttentionInterface, AttentionMaskInterface);
#: tested with 5.24.
MIN_TRANSFORMERS = "4.56"
#: The name under which the attention and mask functions are registered in transformers.
ATTN_NAME = "relpos"


def _transformers():
    try:
        import transformers
        from transformers.masking_utils import AttentionMaskInterface  # noqa: F401
    except ImportError:  # pragma: no cover - installed with the test extra
        raise ImportError(f"relpos.hf needs the hf extra with transformers >= {MIN_TRANSFORMERS} (its attention and "
                          f"mask registries): pip install 'relpos[hf]' 'transformers>={MIN_TRANSFORMERS}'") from None
    return transformers


def refusal(scheme: str, **options) -> str | None:
    """Why the bridge cannot serve ``scheme`` with ``options`` (None if it can)."""
    cls, preset = get_scheme(scheme)
    if not (cls.acts_on - {"embedding"}) and "embedding" in cls.acts_on:
        return (f"scheme {scheme!r} adds absolute positions to the token embeddings; the bridge replaces "
                f"attention only (a pretrained model's embeddings have no place for it)")
    opts = {**preset, **options}
    if opts.get("share_att_key"):
        return f"scheme {scheme!r} with share_att_key=True needs the layer's content projections bound"
    return None


def bridge_schemes() -> list[str]:
    """Registered schemes the bridge serves (with their default options)."""
    return [n for n in scheme_names() if refusal(n) is None]


def rope_options(config) -> dict:
    """relpos RoPE options reproducing a transformers config's rotary embedding.

    Reads ``rope_parameters`` (transformers 5) or ``rope_theta``/``rope_scaling``
    (older configs): ``default``, ``linear``, ``dynamic``, ``yarn`` and ``llama3``.

    Raises:
        ValueError: another ``rope_type`` (named), or a partial rotary factor.
    """
    params = dict(getattr(config, "rope_parameters", None) or {})
    if not params:
        params = dict(getattr(config, "rope_scaling", None) or {})
        params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    kind = params.get("rope_type", params.get("type", "default"))
    frac = params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0)) or 1.0
    opts: dict = {"base": float(params.get("rope_theta", 10000.0)), "rotary_fraction": float(frac)}
    orig = params.get("original_max_position_embeddings", getattr(config, "max_position_embeddings", None))
    if kind == "default":
        return opts
    if kind in ("linear", "dynamic", "yarn", "llama3"):
        opts["scaling"] = {"dynamic": "dynamic", "linear": "linear", "yarn": "yarn", "llama3": "llama3"}[kind]
        opts["factor"] = float(params["factor"])
        if kind != "linear" and orig is not None:
            opts["original_max_len"] = int(orig)
        if kind == "yarn":
            for k in ("beta_fast", "beta_slow", "attention_factor"):
                if params.get(k) is not None:
                    opts[k] = float(params[k])
        if kind == "llama3":
            opts["low_freq_factor"] = float(params["low_freq_factor"])
            opts["high_freq_factor"] = float(params["high_freq_factor"])
        return opts
    raise ValueError(f"rope_type {kind!r} has no relpos equivalent; pass the RoPE options yourself")


class _NoRotary(nn.Module):
    """Stands in for a model's ``rotary_emb``: ``cos = 1, sin = 0``, so the model's rotation is the identity."""

    def __init__(self, head_dim: int) -> None:
        super().__init__()
        self.head_dim = head_dim

    def forward(self, x: Tensor, position_ids: Tensor, *args, **kwargs) -> tuple[Tensor, Tensor]:
        shape = (position_ids.shape[0], position_ids.shape[1], self.head_dim)
        return x.new_ones(shape), x.new_zeros(shape)


def _attention_modules(model) -> list[nn.Module]:
    return [m for m in model.modules()
            if all(hasattr(m, a) for a in ("q_proj", "k_proj", "v_proj", "o_proj", "layer_idx", "config"))]


def relpos_attention_forward(module: nn.Module, query: Tensor, key: Tensor, value: Tensor,
                             attention_mask: Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                             **kwargs) -> tuple[Tensor, None]:
    """transformers attention function: ``query (B, H, Nq, D)``, ``key/value (B, Hkv, Nk, D)`` -> ``(B, Nq, H, D)``."""
    enc = getattr(module, "relpos_encoding", None)
    if enc is None:
        raise ValueError(f"attention implementation {ATTN_NAME!r} needs relpos.hf.use_scheme(model, scheme) first")
    if dropout and module.training:
        raise ValueError("the relpos bridge has no attention dropout; set config.attention_dropout = 0.0")
    if kwargs.get("sliding_window") is not None:
        raise ValueError("the relpos bridge does not serve sliding-window attention")
    Nq, Nk = query.shape[2], key.shape[2]
    kpm = None
    if attention_mask is not None:
        if attention_mask.dim() != 2:
            raise ValueError(f"the relpos bridge expects a 2-D padding mask, got shape {tuple(attention_mask.shape)}")
        kpm = attention_mask[:, -Nk:].bool()  # (B, Nk), True = a real token
    out = relpos.attention(query, key, value, enc, causal=True, q_offset=Nk - Nq, key_mask=kpm,
                           impl=module.relpos_impl, scale=scaling)  # (B, H, Nq, D)
    return out.transpose(1, 2).contiguous(), None


def _check_cache(module: nn.Module, args: tuple, kwargs: dict) -> None:
    """Forward pre-hook of a bridged attention layer: refuse caches that pre-allocate keys."""
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    if cache is not None and getattr(cache, "is_compileable", False):
        raise ValueError(
            f"the relpos bridge needs the model's dynamic cache (generate's default); {type(cache).__name__} "
            f"pre-allocates keys, whose empty slots would be attended as tokens (do not pass "
            f"cache_implementation='static')"
        )


def _register() -> None:
    tf = _transformers()
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    tf.AttentionInterface.register(ATTN_NAME, relpos_attention_forward)
    AttentionMaskInterface.register(ATTN_NAME, flash_attention_mask)  # the 2-D padding mask (or None)


def use_scheme(model, scheme: str, *, impl: str = "auto", share: bool | None = None, **options):
    """Replace the rotary embedding of a Llama-family causal LM by ``scheme``, in place.

    Args:
        model: a transformers causal LM (``LlamaForCausalLM``, ``MistralForCausalLM``,
            ``Qwen2ForCausalLM``, ...).
        scheme: a relpos scheme name (``"alibi"``, ``"t5"``, ``"fire"``, ``"rope"``, ...).
        impl: :func:`relpos.attention` implementation.
        share: one scheme module for all layers (default: the scheme's own
            default, shared for T5).
        **options: the scheme's options. For the RoPE family the model's own
            RoPE settings (:func:`rope_options`) are the defaults.

    Returns:
        ``model`` (modified in place; new scheme parameters are on its device, in float32).

    Raises:
        ValueError: a scheme, option or model the bridge cannot serve (named).
    """
    _transformers()
    name = normalise_name(scheme, "scheme")
    cls, preset = get_scheme(name)
    why = refusal(name, **options)
    if why:
        raise ValueError(why)
    from relpos.attention import IMPLS

    check_choice("impl", impl, sorted(IMPLS))
    if share is not None:
        check_bool("share", share)
    cfg = model.config
    if getattr(cfg, "sliding_window", None) is not None or any("sliding" in str(t) for t in
                                                                getattr(cfg, "layer_types", None) or []):
        raise ValueError(f"model type {cfg.model_type!r} uses sliding-window attention, which the relpos bridge "
                         f"does not serve (config.sliding_window={getattr(cfg, 'sliding_window', None)})")
    attns = _attention_modules(model)
    base = getattr(model, "base_model", model)
    if not attns or not isinstance(getattr(base, "rotary_emb", None), nn.Module):
        raise ValueError(f"model type {cfg.model_type!r} is not Llama-family: the bridge needs attention layers with "
                         f"q/k/v/o projections and a rotary_emb module to turn off")
    H = cfg.num_attention_heads
    D = getattr(cfg, "head_dim", None) or cfg.hidden_size // H
    from relpos.encodings.rope import RoPE

    if issubclass(cls, RoPE) and not options:
        options = {k: v for k, v in rope_options(cfg).items() if k not in preset or k == "base"}
    max_len = int(getattr(cfg, "max_position_embeddings", 2048) or 2048)
    device = next(model.parameters()).device

    def build() -> Encoding:
        return make_encoding(name, n_heads=H, head_dim=D, d_model=cfg.hidden_size, max_len=max_len, causal=True,
                             **options).to(device)

    if share is None:
        share = bool(getattr(cls, "share_across_layers", False))
    shared = build() if share else None
    for m in attns:
        if isinstance(getattr(m, "relpos_encoding", None), nn.Module):
            del m.relpos_encoding
        m.relpos_encoding = shared if share else build()
        m.relpos_impl = impl
        if not getattr(m, "_relpos_hooked", False):
            m.register_forward_pre_hook(_check_cache, with_kwargs=True)
            m._relpos_hooked = True
    base.rotary_emb = _NoRotary(D)
    _register()
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(ATTN_NAME)
    else:  # pragma: no cover - older transformers
        cfg._attn_implementation = ATTN_NAME
    return model
