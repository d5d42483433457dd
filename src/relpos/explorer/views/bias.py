"""View 2: a scheme's score term over ``(i, j)`` for one head, its curve against the
offset ``d = j - i``, and bucket boundaries. Content-dependent terms are drawn for the
tokens of a typed text (:mod:`relpos.explorer.views.content`)."""

from __future__ import annotations

import copy

import torch

from relpos import distance
from relpos.explorer.adapters import bias_entries, set_head_scalar
from relpos.explorer.errors import ApiError
from relpos.explorer.views.scheme_args import scheme_args
from relpos.explorer.params import get_bool, get_choice, get_float, get_int, tolist
from relpos.explorer import trained as trained_mod

ROUTE = "bias"


def bucket_ranges(offsets: list[int], ids: list[int]) -> list[dict]:
    """Consecutive offsets sharing a bucket id, as ``{bucket, from, to}``."""
    out: list[dict] = []
    for d, b in zip(offsets, ids):
        if out and out[-1]["bucket"] == b and out[-1]["to"] == d - 1:
            out[-1]["to"] = d
        else:
            out.append({"bucket": b, "from": d, "to": d})
    return out


def entry_for(params: dict):
    entries = bias_entries()
    keys = [e.key for e in entries]
    key = get_choice(params, "scheme", keys[0], keys)
    return entries[keys.index(key)]


def _used_options(enc) -> dict:
    from relpos.explorer.views.compose import used_options

    return used_options(enc)


def answer(ex, params: dict) -> dict:
    """The score term of one scheme over ``(i, j)``, for one head, with its curve and buckets."""
    entry = entry_for(params)
    if entry.kind == "content":
        from relpos.explorer.views import content

        return content.answer(ex, entry, params)
    L = ex.limits
    n = get_int(params, "n", 32, 2, L.max_len, cap=True, unit="tokens")
    causal = get_bool(params, "causal", False)
    trained = trained_mod.trained_entry(entry.registry) if entry.kind != "log2" else None
    values = get_choice(params, "values", "trained" if trained else "initial", ("trained", "initial"))
    if values == "trained" and trained_mod.shown_causally(trained):
        causal = True
    offs = torch.arange(-(n - 1), 1 if causal else n)  # offsets d = j - i shown on the curve
    idx = torch.arange(n)[None]  # (1, N) positions 0..N-1
    delta = idx[0][None, :] - idx[0][:, None]  # (N, N): j - i
    out: dict = {"scheme": entry.key, "kind": entry.kind, "n": n, "causal": causal, "offsets": offs.tolist(),
                 "buckets": None}
    if entry.kind == "log2":
        return _log2(ex, params, out, delta, offs, causal)

    n_heads, head, head_dim, seed, opts, changed = scheme_args(ex, entry, params)
    if values == "trained":
        if trained is None:
            raise ApiError(f"no trained values of {entry.key} ship with this build; choose values=initial",
                           field="values", code="unavailable")
        # the trained scheme's own sizes and options, and nothing the page's (locked) controls say
        n_heads, head_dim = int(trained["n_heads"]), int(trained["head_dim"])
        if head >= n_heads:
            raise ApiError(f"head must be between 0 and {n_heads - 1} for the trained values (H = {n_heads})",
                           field="head", code="out_of_range", limit=n_heads - 1, value=head)
        opts = sorted((trained.get("options") or {}).items())
        changed = []
    overrides = {}
    for s in entry.scalars:
        v = get_float(params, "set." + s.name, None)
        if v is not None:
            if not s.lo <= v <= s.hi:
                raise ApiError(f"{s.name} must be between {s.lo:g} and {s.hi:g}, got {v:g}", field="set." + s.name)
            overrides[s.name] = v
    ex.encodings.check_cost(entry.registry, tuple(opts), n_heads, head_dim, causal, n, n, n,
                            fields=changed + ["n_heads", "head_dim"], length_field="n",
                            shown_options={k[4:]: dict(opts)[k[4:]] for k in changed})
    enc = ex.encodings.get(entry.registry, tuple(opts), n_heads, head_dim, causal, seed, n)
    if values == "trained":
        enc = copy.deepcopy(enc)
        trained_mod.load_into(enc, trained, entry.key)
    if overrides:
        enc = copy.deepcopy(enc)  # the cached module stays as built
        for s in entry.scalars:
            if s.name in overrides:
                set_head_scalar(enc, s, head, overrides[s.name])

    bucketed = entry.kind == "bucketed"
    show = get_choice(params, "show", "bias", ("bias", "bucket")) if bucketed else "bias"
    with torch.no_grad():
        if bucketed and show == "bucket":
            out["values"] = "bucket"
            out["matrix"] = enc.buckets(delta).tolist()
            curves = [enc.buckets(offs).tolist()]
        elif entry.kind == "table":
            tables = enc.clipped_tables()
            norms = tables.key.float().norm(dim=-1)  # (R,) or (H, R)
            if norms.dim() == 1:
                norms = norms[None].expand(n_heads, -1)
            rel = enc.rel_index(idx, idx)[0]  # (N, N) rows of the table
            out["values"] = "norm"
            out["matrix"] = tolist(norms[head][rel])
            curves = tolist(norms[:, offs.clamp(-tables.k, tables.k) + tables.k])
            out["k"] = enc.k
        else:
            b = enc.bias(idx, idx)[0]  # (H, N, N)
            out["values"] = "bias"
            out["matrix"] = tolist(b[head])
            if enc.toeplitz:
                curves = tolist(enc.relative_bias(offs))  # (H, len(offs))
            else:  # e.g. FIRE: the term depends on i too; show the last query's row (d <= 0)
                offs = torch.arange(-(n - 1), 1)
                out["offsets"] = offs.tolist()
                out["curve_row"] = n - 1
                curves = tolist(b[:, n - 1, :])
        if bucketed:
            ids = enc.buckets(offs).tolist()
            out["buckets"] = bucket_ranges(offs.tolist(), ids)
            out["bidirectional"] = bool(getattr(enc, "bidirectional", not causal))
    desc = enc.describe()
    out.update(n_heads=n_heads, head=head, head_dim=head_dim, seed=seed, curves=curves,
               options=dict(opts), overrides=overrides, relative=desc["relative"],
               learned_params=desc["params"], paper=desc["paper"], values_from=values,
               made_by=(trained.get("made_by") or trained_mod.trained_values()["made_by"]) if values == "trained" else None,
               fitted=trained.get("fitted") if values == "trained" else None, used_options=_used_options(enc))
    # per-head numbers the page may set are also shown (ALiBi's slopes, KERPLE's r1 and r2)
    scalars = {}
    for s in entry.scalars:
        scalars[s.attribute] = tolist(getattr(enc, s.attribute))
    out.update(scalars)
    out["scalars"] = [{"name": s.name, "attribute": s.attribute} for s in entry.scalars]
    return out


def _log2(ex, params, out, delta, offs, causal) -> dict:
    L = ex.limits
    m = get_int(params, "opt.m", 8, 1, L.max_int_option)
    mb = get_int(params, "opt.max_bucket", 0, 0, L.max_int_option)
    if mb and mb < m:
        raise ApiError(f"max_bucket must be 0 (none) or >= m = {m}, got {mb}", field="opt.max_bucket")
    kw = {"m": m, "bidirectional": not causal, "max_bucket": mb or None}
    mat = distance.log2_bucket(delta, **kw)
    ids = distance.log2_bucket(offs, **kw)
    out.update(n_heads=1, head=0, values="bucket", matrix=mat.tolist(), curves=[ids.tolist()],
               buckets=bucket_ranges(offs.tolist(), ids.tolist()),
               params={"m": m, "max_bucket": mb or None, "bidirectional": not causal})
    return out
