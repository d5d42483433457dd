"""View 2 for content-dependent score terms (``"score"`` schemes without a clipped table):
the term ``enc.score(q, k, pos, pos, scale)`` for the tokens of a typed text.

The tokens (as view 1 splits them) get fixed random vectors, seeded random
projections make ``q`` and ``k`` (:func:`relpos.explorer.content.content_qk`).
What drives the term is shown from the scheme's public methods when it has
them: ``positions()`` (contextual positions), ``log_forget_gates()`` (gates
per token) and ``position_index()`` (the relative-table row of each pair).
"""

from __future__ import annotations

import torch

from relpos.encodings import get_scheme
from relpos.explorer.content import CONTENT_DIM, content_qk
from relpos.explorer.errors import ApiError
from relpos.explorer.params import get_bool, sig, tolist
from relpos.explorer.views.scheme_args import scheme_args
from relpos.explorer.views.offsets import tokens_of


def answer(ex, entry, params: dict) -> dict:
    """The content-dependent score term of ``entry``'s scheme for the tokens of ``params["text"]``."""
    L = ex.limits
    tokens = tokens_of(ex, params, "text")
    n_heads, head, head_dim, seed, opts, changed = scheme_args(ex, entry, params)
    if n_heads * head_dim > L.max_content_width:
        raise ApiError(f"n_heads x head_dim = {n_heads * head_dim} is too large for this scheme: the explorer "
                       f"accepts at most {L.max_content_width}", code="too_large", field="head_dim",
                       fields=["n_heads", "head_dim"], limit=L.max_content_width, unit="dims",
                       value=n_heads * head_dim)
    cls, _ = get_scheme(entry.registry)
    causal = True if cls.causal_only else get_bool(params, "causal", False)
    n = len(tokens)
    ex.encodings.check_cost(entry.registry, tuple(opts), n_heads, head_dim, causal, L.max_tokens, n, n,
                            fields=changed + ["n_heads", "head_dim"], length_field="text",
                            shown_options={k[4:]: dict(opts)[k[4:]] for k in changed})
    enc = ex.encodings.get(entry.registry, tuple(opts), n_heads, head_dim, causal, seed, L.max_tokens)
    q, k = content_qk(tokens, seed, n_heads, head_dim)  # (1, H, N, D) each
    pos = torch.arange(n)[None]  # (1, N)
    scale = float(enc.attention_scale(head_dim))
    desc = enc.describe()
    out: dict = {
        "scheme": entry.key, "kind": entry.kind, "content": True, "tokens": tokens, "n": n, "causal": causal,
        "causal_only": bool(cls.causal_only), "values": "score", "n_heads": n_heads, "head": head,
        "head_dim": head_dim, "seed": seed, "scale": sig(scale), "content_dim": CONTENT_DIM,
        "options": dict(opts), "overrides": {}, "relative": desc["relative"], "learned_params": desc["params"],
        "paper": desc["paper"], "offsets": None, "curves": None, "buckets": None,
    }
    with torch.no_grad():
        s = enc.score(q, k, pos, pos, scale)[0]  # (H, N, N)
        out["matrix"] = tolist(s[head])
        if callable(getattr(enc, "positions", None)):  # contextual positions p_ij
            p = enc.positions(q, k, pos, pos, scale)[0]  # (H, N, N)
            out["positions"] = tolist(p[head])
            out["npos_max"] = getattr(enc, "npos_max", None)
        elif callable(getattr(enc, "log_forget_gates", None)):  # gates per token
            lg = enc.log_forget_gates(k)[0]  # (H, N)
            out["gates"] = tolist(lg.exp())
            out["log_gates"] = tolist(lg)
        elif callable(getattr(enc, "position_index", None)):  # rows of a relative table
            out["rel_index"] = enc.position_index(pos, pos)[0].tolist()  # (N, N)
            out["span"] = getattr(enc, "span", None)
            out["terms"] = list(getattr(enc, "terms", ()))
    return out
