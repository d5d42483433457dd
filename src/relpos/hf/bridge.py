"""The Hugging Face bridge (see :mod:`relpos.hf`): :func:`use_scheme` and the registered attention function."""

from __future__ import annotations

import torch
from torch import Tensor, nn

import relpos
from relpos.encodings import Encoding, get_scheme, make_encoding, normalise_name, scheme_names
from relpos.hf.packing import plan_positions, remember_cache
from relpos.hf.probe import rotary_width
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
    """Stands in for a model's ``rotary_emb``: ``cos = 1, sin = 0``, so the model's rotation is the identity.

    ``head_dim`` is the width of the model's own ``cos`` (the rotated channels, fewer than the head's for a
    partial-rotary model)."""

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
    if kwargs.get("sliding_window") is not None:
        raise ValueError("the relpos bridge does not serve sliding-window attention")
    for k in ("softcap", "s_aux", "sinks"):
        if kwargs.get(k) is not None:
            raise ValueError(f"the relpos bridge does not serve the attention argument {k!r} of this model")
    B, Nq, Nk = query.shape[0], query.shape[2], key.shape[2]
    kpm = None
    if attention_mask is not None:
        if attention_mask.dim() != 2:
            raise ValueError(f"the relpos bridge expects a 2-D padding mask, got shape {tuple(attention_mask.shape)}")
        kpm = attention_mask[:, -Nk:].bool()  # (B, Nk), True = a real token
    pos, docs = plan_positions(module, kwargs.get("position_ids"), kpm, B, Nq, Nk)
    p = float(dropout) if module.training else 0.0  # the model's own attention dropout, in training only
    if docs is None:
        out = relpos.attention(query, key, value, enc, causal=True, q_offset=Nk - Nq, key_mask=kpm,
                               positions=pos, impl=module.relpos_impl, scale=scaling, dropout_p=p)  # (B, H, Nq, D)
    else:
        # one call per document rather than one block-diagonal attn_mask: a content-dependent scheme (CoPE)
        # counts positions over every key the causal mask allows, so only a separate call keeps documents apart
        out = _per_document(query, key, value, enc, kpm, pos, docs, module.relpos_impl, scaling, p)
    return out.transpose(1, 2).contiguous(), None


def _per_document(q: Tensor, k: Tensor, v: Tensor, enc, kpm: Tensor | None, pos: Tensor, docs: Tensor, impl: str,
                  scale: float | None, dropout_p: float = 0.0) -> Tensor:
    """Packed rows without a cache (Nq = Nk): one causal :func:`relpos.attention` call per document, so no token
    attends across a document boundary. ``q (B, H, N, D)``, ``k, v (B, Hkv, N, D)``, ``pos, docs (B, N)`` ->
    ``(B, H, N, Dv)``."""
    rows = []
    for b in range(q.shape[0]):
        bounds = torch.nonzero(torch.diff(docs[b]) != 0).flatten().tolist()
        starts, ends = [0] + [i + 1 for i in bounds], [i + 1 for i in bounds] + [q.shape[2]]
        parts = []
        for s, e in zip(starts, ends):
            m = None if kpm is None else kpm[b:b + 1, s:e]
            parts.append(relpos.attention(q[b:b + 1, :, s:e], k[b:b + 1, :, s:e], v[b:b + 1, :, s:e], enc, causal=True,
                                          key_mask=m, positions=pos[b:b + 1, s:e], impl=impl, scale=scale,
                                          dropout_p=dropout_p))
        rows.append(torch.cat(parts, dim=2))
    return torch.cat(rows, dim=0)


def _check_cache(module: nn.Module, args: tuple, kwargs: dict) -> None:
    """Forward pre-hook of a bridged attention layer: refuse caches that pre-allocate keys."""
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    remember_cache(module, cache)
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


_SCALING_KEYS = ("scaling", "factor", "original_max_len", "beta_fast", "beta_slow", "attention_factor",
                 "low_freq_factor", "high_freq_factor")


def _rope_settings(model, attn, rotary, width: int, H: int, D: int, preset: dict, options: dict) -> dict:
    """The model's own RoPE settings (base, scaling, rotary fraction, pairing read from the model) with
    ``options`` merged over them; a scaling in the preset or options replaces the model's whole scaling."""
    from relpos.hf.probe import rope_pairing

    cfg = model.config
    try:
        own = rope_options(cfg)
    except ValueError as e:
        if options.get("scaling") or preset.get("scaling"):
            own = {"base": float((getattr(cfg, "rope_parameters", None) or {}).get(
                "rope_theta", getattr(cfg, "rope_theta", 10000.0)))}
        else:
            raise ValueError(f"model type {cfg.model_type!r}: {e}") from None
    own["rotary_fraction"] = width / D
    own["pairing"] = rope_pairing(model, attn, rotary, _NoRotary(width), n_heads=H, head_dim=D, attn_name=ATTN_NAME,
                                  **own)
    if "scaling" in preset or "scaling" in options:
        own = {k: v for k, v in own.items() if k not in _SCALING_KEYS}
    own = {k: v for k, v in own.items() if k not in preset or k == "base"}
    return {**own, **options}


def _jsonable(options: dict) -> dict:
    """Scheme options as recorded in the model's config (``config.relpos_bridge``): plain JSON values only."""
    out = {}
    for k, v in options.items():
        if isinstance(v, (bool, int, float, str)) or v is None:
            out[k] = v
        elif isinstance(v, (list, tuple)) and all(isinstance(x, (bool, int, float, str)) for x in v):
            out[k] = list(v)
        else:
            raise ValueError(f"option {k}={v!r} cannot be recorded in the model's config (plain numbers, strings "
                             f"and lists only), so the bridged model could not be reloaded")
    return out


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
            RoPE settings are the defaults and ``options`` are merged over them
            (base and scaling from :func:`rope_options`; the rotary fraction and
            the pairing read from the model itself, see :mod:`relpos.hf.probe`);
            a scaling in ``options`` replaces the model's scaling as a whole.

    Returns:
        ``model`` (modified in place; new scheme parameters are on its device, in float32).
        The scheme, ``share``, ``impl`` and the options are recorded in
        ``model.config.relpos_bridge`` (saved by ``save_pretrained``; reload with
        :func:`relpos.hf.load_bridged`). A shared scheme module (T5's table) is
        registered once, as ``model.<base>.relpos_encoding``, so the model saves.

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

    rotary = base.rotary_emb if not isinstance(base.rotary_emb, _NoRotary) else base.relpos_original_rotary
    width = rotary_width(model, rotary, D)
    _register()
    if issubclass(cls, RoPE):
        options = _rope_settings(model, attns[0], rotary, width, H, D, preset, options)
    record = _jsonable(options)  # before the model changes: an option that cannot be saved is refused first
    max_len = int(getattr(cfg, "max_position_embeddings", 2048) or 2048)
    device = next(model.parameters()).device

    def build() -> Encoding:
        return make_encoding(name, n_heads=H, head_dim=D, d_model=cfg.hidden_size, max_len=max_len, causal=True,
                             **options).to(device)

    if share is None:
        share = bool(getattr(cls, "share_across_layers", False))
    shared = build() if share else None
    for m in attns:
        if "relpos_encoding" in m._modules or "relpos_encoding" in m.__dict__:
            delattr(m, "relpos_encoding")
        if share:  # registered once (on the base model): the state dict holds it once, so the model saves
            object.__setattr__(m, "relpos_encoding", shared)
        else:
            m.relpos_encoding = build()
        m.relpos_impl = impl
        if not getattr(m, "_relpos_hooked", False):
            m.register_forward_pre_hook(_check_cache, with_kwargs=True)
            m._relpos_hooked = True
    if "relpos_encoding" in base._modules:
        del base.relpos_encoding
    if share:
        base.relpos_encoding = shared
    if not isinstance(base.rotary_emb, _NoRotary):
        base.relpos_original_rotary = base.rotary_emb  # kept (never called by the model) to re-read on a re-bridge
    base.rotary_emb = _NoRotary(width)
    cfg.relpos_bridge = {"scheme": name, "share": bool(share), "impl": impl, "options": record}
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(ATTN_NAME)
    else:  # pragma: no cover - older transformers
        cfg._attn_implementation = ATTN_NAME
    return model
