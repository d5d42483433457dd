"""View 0, "compose": content score + position term = logit -> softmax, on one short sentence.

For the tokens of a typed text (seeded random vectors and projections, as the
content views use, :func:`relpos.explorer.content.content_qk`), one head of one
scheme:

* ``content[i][j] = scale * q_i . k_j`` -- the score without positions;
* ``logits[i][j]`` -- the scheme's logit, formed as relpos's dense attention forms
  it (rotation, then the bias and score terms);
* ``position = logits - content`` -- the whole position term: the bias ``B(i, j)``
  of a bias scheme, ``scale * q_i . a^K[clip(j - i)]`` for a clipped table, the
  effect of a rotation;
* ``probs`` -- softmax of each row of the logits (causal mask applied), and
  ``probs_content`` -- the same without the position term, for the on/off toggle.

For a clicked cell the page walks ``d = j - i`` -> clip or bucket -> the table row
-> ``B(i, j)`` from ``offsets``, ``steps`` and ``rows``. A scheme with a value
site (Shaw's value table) also gets ``value_norms``: ``|| sum_j p_ij a^V[clip(j - i)] ||``
per query. ``params`` compares the sizes of a learned absolute table, a clipped
relative table and a bucketed table for the sizes asked (``p.*`` parameters).
"""

from __future__ import annotations

import torch

from relpos.encodings import get_scheme, make_encoding, scheme_names
from relpos.explorer.adapters import hints_for, option_specs, view_kind
from relpos.explorer.content import content_qk, qk_logits
from relpos.explorer.errors import ApiError
from relpos.explorer.params import get_bool, get_choice, get_int, sig, tolist
from relpos.explorer.views.offsets import tokens_of
from relpos.validation import MAX_TABLE

ROUTE = "compose"

#: Heads and head dimension of the composed example (small enough to print every number).
HEADS = 2
HEAD_DIM = 16
#: At most this many tokens (every cell value is printed).
MAX_TOKENS = 16


def _position_kind(cls) -> str:
    kind = view_kind(cls)
    if kind in ("bias", "bucketed"):
        return kind
    if kind == "table":
        return "table"
    if kind == "content":
        return "score"
    if "qk" in cls.acts_on:
        return "rotation"
    if "embedding" in cls.acts_on:
        return "embedding"
    return "none"


def schemes() -> list[dict]:
    """Every scheme the compose view can show, with the kind of its position term."""
    out = []
    for name in scheme_names():
        cls, _ = get_scheme(name)
        out.append({"name": name, "position": _position_kind(cls), "causal_only": bool(cls.causal_only),
                    "value": "value" in cls.acts_on})
    return out


def _softmax_rows(x: torch.Tensor, causal: bool) -> torch.Tensor:
    if causal:
        n = x.shape[-1]
        x = x.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(x.double(), dim=-1)


def param_panel(ex, params: dict) -> dict:
    """Learned absolute ``L_max x d_model`` against a clipped relative table and a bucketed table,
    counted by relpos (each scheme built on the meta device)."""
    L = get_int(params, "p.max_len", 512, 1, MAX_TABLE, cap=True, unit="positions")
    C = get_int(params, "p.d_model", 512, 1, 1 << 16, cap=True, unit="dims")
    k = get_int(params, "p.k", 8, 0, MAX_TABLE, cap=True)
    d = get_int(params, "p.head_dim", 64, 1, 1 << 16, cap=True, unit="dims")
    H = get_int(params, "p.n_heads", 8, 1, 1024, cap=True, unit="heads")
    b = get_int(params, "p.buckets", 32, 2, MAX_TABLE, cap=True)
    rows = []
    wanted = (("absolute", {"max_len": L, "d_model": C}), ("table", {"k": k, "head_dim": d, "n_heads": H}),
              ("bucketed", {"num_buckets": b, "n_heads": H}))
    for role, kw in wanted:
        for name in scheme_names():
            cls, _ = get_scheme(name)
            fits = (role == "absolute" and not cls.relative and "embedding" in cls.acts_on) or view_kind(cls) == role
            if not fits:
                continue
            try:
                with torch.device("meta"):
                    enc = make_encoding(name, **kw)
            except (TypeError, ValueError):
                continue
            n = enc.num_params()
            if role == "absolute" and n == 0:
                continue  # a fixed (sinusoidal) table: look for the learned one
            rows.append({"role": role, "scheme": name, "params": n, "sizes": kw})
            break
    return {"max_len": L, "d_model": C, "k": k, "head_dim": d, "n_heads": H, "buckets": b, "rows": rows}


#: Shaw's clip distance k in this view unless set: small enough that the default sentence clips.
DEFAULT_K = 2
#: At most this many bytes of text when a trained (byte-level) model composes the logits.
MAX_MODEL_BYTES = 32


def _model_index(ex, params: dict) -> int | None:
    """The checkpoint the logits come from (``model=<index>``), or None for the seeded initial values
    (``model=initial``); by default the shipped default model when there is one."""
    raw = params.get("model")
    if raw in (None, ""):
        return ex.default_model
    if raw == "initial":
        return None
    if not ex.checkpoints:
        raise ApiError("no trained model is loaded; choose model=initial", code="bad_value", field="model")
    return get_int(params, "model", None, 0, len(ex.checkpoints) - 1)


def used_options(enc) -> dict:
    """The options a built scheme really uses, read from it (T5's buckets and max distance, Shaw's k, ...)."""
    import inspect

    out = {}
    for name in inspect.signature(type(enc).__init__).parameters:
        if name in ("self", "n_heads", "head_dim", "d_model", "max_len", "causal"):
            continue
        v = getattr(enc, name, None)
        if isinstance(v, (bool, int, float, str)) and not isinstance(v, torch.Tensor):
            out[name] = v
    return out


def answer(ex, params: dict) -> dict:
    """The composed logits of one head for ``text``: of a trained model's layer (``model=<index>``,
    the default when one ships) or of seeded random content and initial values (``model=initial``)."""
    ci = _model_index(ex, params)
    out = _answer_model(ex, params, ci) if ci is not None else _answer_initial(ex, params)
    out["params"] = param_panel(ex, params)
    return out


def _answer_model(ex, params: dict, ci: int) -> dict:
    from relpos.explorer.cache import cached_call
    from relpos.explorer.models import layer_logits, token_labels
    from relpos.explorer.params import get_text

    ck = ex.checkpoints[ci]
    cfg = ck.config
    data = get_text(params, "text", "", ex.limits.max_text_chars).encode("utf-8")
    if not data:
        raise ApiError("type some text", code="empty", field="text")
    cap = min(MAX_MODEL_BYTES, int(getattr(cfg, "max_len", MAX_MODEL_BYTES)))
    if len(data) > cap:
        raise ApiError(f"the text is {len(data)} bytes; a trained model composes at most {cap} bytes here",
                       code="too_large", field="text", limit=cap, unit="bytes", value=len(data))
    n_layers, n_heads = int(cfg.n_layers), int(cfg.n_heads)
    layer = get_int(params, "layer", 0, 0, n_layers - 1)
    head = get_int(params, "head", 0, 0, n_heads - 1)
    terms = cached_call(ex.attention_cache, ("compose", ci, data, layer), lambda: layer_logits(ck.model, data, layer),
                        lambda t: 2 * t["content"].numel() * 4 + 2 * t["q"].numel() * 4)
    enc = terms["enc"]
    name = getattr(cfg, "scheme", None) or "nope"
    cls = get_scheme(name)[0] if name in scheme_names() else type(enc)
    causal = bool(getattr(cfg, "causal", True))
    labels, part = token_labels(data)
    opts = used_options(enc) if enc is not None else {}
    out = _compose(terms["content"][head], terms["logits"][head], enc, cls, name, labels, causal, head, n_heads,
                   int(terms["q"].shape[-1]), terms["scale"], opts)
    out.update(layer=layer, n_layers=n_layers, byte_part=part, seed=None, model={
        "index": ci, "label": ck.label, "scheme": name, "shipped": ck.shipped, "fitted": ck.extra.get("fitted"),
        "trained_on": ck.extra.get("trained_on"), "n_layers": n_layers, "n_heads": n_heads})
    out["learned_params"] = enc.num_params() if enc is not None else 0
    return out


def _answer_initial(ex, params: dict) -> dict:
    tokens = tokens_of(ex, params, "text")
    if len(tokens) > MAX_TOKENS:
        raise ApiError(f"the text has {len(tokens)} tokens; the compose view prints every number and takes at most "
                       f"{MAX_TOKENS}", code="too_large", field="text", limit=MAX_TOKENS, unit="tokens",
                       value=len(tokens))
    names = scheme_names()
    first = next((s["name"] for s in schemes() if s["position"] == "bucketed"), names[0])
    name = get_choice(params, "scheme", first, names)
    cls, _ = get_scheme(name)
    head = get_int(params, "head", 0, 0, HEADS - 1)
    seed = get_int(params, "seed", 0, 0, 2**31 - 1)
    causal = True if cls.causal_only else get_bool(params, "causal", False)
    n = len(tokens)
    # the view's starting values where a scheme's own would hide its term (CoPE's zero table)
    accepted = {o["name"] for o in option_specs(name)}
    opts = dict((k, v) for k, v in hints_for(name).defaults if k in accepted)
    if _position_kind(cls) == "table" and "k" in accepted:  # Shaw's clip distance: settable, small by default
        opts["k"] = get_int(params, "k", DEFAULT_K, 0, 64, cap=True)
    opts = tuple(sorted(opts.items()))
    ex.encodings.check_cost(name, opts, HEADS, HEAD_DIM, causal, max(n, 64), n, n, fields=["scheme"])
    enc = ex.encodings.get(name, opts, HEADS, HEAD_DIM, causal, seed, max(n, 64))
    q, k = content_qk(tokens, seed, HEADS, HEAD_DIM)  # (1, H, N, D)
    pos = torch.arange(n)[None]  # (1, N)
    scale = float(enc.attention_scale(HEAD_DIM))
    with torch.no_grad():
        content = (scale * (q @ k.transpose(-1, -2)))[0, head]  # (N, N)
        if "embedding" in enc.acts_on:  # an absolute scheme: its term enters through x, not the logit
            logits = content.clone()
        else:
            logits = qk_logits(enc, q, k, pos, scale)[0, head]  # (N, N)
    out = _compose(content, logits, enc, cls, name, tokens, causal, head, HEADS, HEAD_DIM, scale, dict(opts))
    out.update(seed=seed, model=None, layer=None, n_layers=None)
    return out


def _compose(content, logits, enc, cls, name, tokens, causal, head, n_heads, head_dim, scale, opts) -> dict:
    """The view's answer from one head's content ``(N, N)`` and logits ``(N, N)`` (unmasked)."""
    n = len(tokens)
    pos = torch.arange(n)[None]  # (1, N)
    with torch.no_grad():
        position = logits - content
        probs = _softmax_rows(logits, causal)
        probs_content = _softmax_rows(content, causal)
        delta = pos[0][None, :] - pos[0][:, None]  # (N, N): d = j - i
        kind = _position_kind(cls) if enc is not None else "none"
        out = {
            "scheme": name, "position_kind": kind, "tokens": tokens, "n": n, "causal": causal,
            "n_heads": n_heads, "head": head, "head_dim": head_dim, "scale": sig(scale),
            "content": tolist(content), "position": tolist(position), "logits": tolist(logits),
            "probs": tolist(probs), "probs_content": tolist(probs_content), "offsets": delta.tolist(),
            "steps": [], "rows": None, "k": None, "learned_params": enc.num_params() if enc is not None else 0,
            "paper": cls.paper, "options": opts,
        }
        if kind == "table":
            out["k"] = int(enc.k)
            out["steps"] = [{"name": "clip", "matrix": delta.clamp(-enc.k, enc.k).tolist()}]
            out["rows"] = enc.rel_index(pos, pos)[0].tolist()
        elif kind == "bucketed":
            out["steps"] = [{"name": "bucket", "matrix": enc.buckets(delta).tolist()}]
            out["rows"] = out["steps"][0]["matrix"]
        if enc is not None and "value" in enc.acts_on:  # Shaw's value side: sum_j p_ij aV[clip(j - i)]
            p = probs.float()[None, None].expand(1, n_heads, n, n)
            v = enc.value(p, pos, pos)[0, head]  # (N, D)
            out["value_norms"] = tolist(v.norm(dim=-1))
        # the rows whose most likely key moves when the position term is taken away (the lesson of the view)
        out["argmax_moves"] = [i for i in range(n) if int(probs[i].argmax()) != int(probs_content[i].argmax())]
    return out
