"""The ``results.json`` document of a sweep, built from its stored runs (format: ``docs/results-format.md``).

Also the two facts every reader of it needs: a run's display label (:func:`label`) and where a learned
absolute table's trained rows end (:func:`untrained_from`; numbers read past them are ``null``, shown as
:data:`UNTRAINED`).

>>> label("rope", "yarn"), label("alibi", "randomized")
('rope-yarn', 'alibi+rand')
"""

from __future__ import annotations

import math

__all__ = ["RESULTS_VERSION", "UNTRAINED", "label", "label_order", "learned_table", "untrained_from", "results_dict",
           "first_pass_step", "val_curve"]


RESULTS_VERSION = 1


def label(scheme: str, variant: str | None) -> str:
    """Display name of a run: ``rope``, ``rope-yarn`` (scaled at evaluation), ``alibi+rand``."""
    if not variant:
        return scheme
    if variant == "randomized":
        return f"{scheme}+rand"
    if variant == "randomized-sampled":
        return f"{scheme}+rand-sampled"
    return f"{scheme}-{variant}"


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


UNTRAINED = "n/a (untrained rows)"


def learned_table(scheme: str) -> bool:
    """Whether a scheme adds a *learned absolute table* (one trained row per position) -- decided by the
    capability :func:`relpos.model.position_limit` on a small instance, not by the scheme's name."""
    if scheme not in _LEARNED:
        try:
            from relpos.encodings import make_encoding
            from relpos.model import position_limit

            _LEARNED[scheme] = position_limit(make_encoding(scheme, n_heads=1, head_dim=8, d_model=8,
                                                            max_len=8)) is not None
        except (ImportError, KeyError, TypeError, ValueError):
            _LEARNED[scheme] = False
    return _LEARNED[scheme]


_LEARNED: dict[str, bool] = {}


def untrained_from(run: dict) -> int | None:
    """First position of ``run`` whose table row was never trained (the training length), or None.

    A learned absolute table is sized for the longest evaluation, but training only reaches rows
    ``0 .. L-1``; a number read through rows ``>= L`` measures random initialisation, so the report
    shows it as :data:`UNTRAINED`. Randomized-position training (Ruoss et al.) reaches every row."""
    if run.get("variant") in ("randomized", "randomized-sampled") or not learned_table(run["scheme"]):
        return None
    return int(run["train_len"])


def results_dict(config: dict, fingerprint: str, runs: list[dict], jobs: list[dict] | None = None,
                 failures: list[dict] | None = None) -> dict:
    """The ``results.json`` document from stored runs (see docs/results-format.md).

    Numbers read through untrained rows of a learned absolute table (:func:`untrained_from`) are left out
    (``null``) and flagged ``"untrained_rows": true``. ``corpus`` is the identity of the language-modelling
    text the runs were evaluated on (content hash, sizes per split, leak window and counts)."""
    train_info = {j["job"]: j["info"].get("train", {}) for j in (jobs or [])}
    out_runs = []
    corpora: list[dict] = []
    for r in runs:
        metrics, pos, fixed, depth = [], [], [], []
        cut = untrained_from(r) if r["task"] == "lm" else None
        ident = (r.get("info") or {}).get("corpus")
        if ident and ident not in corpora:
            corpora.append(ident)
        for m in r["measurements"]:
            if m["protocol"] == "accuracy" and m.get("bucket_start", -1) >= 0:  # passkey: one row per depth (%)
                depth.append({"eval_len": m["eval_len"], "depth": m["bucket_start"], "accuracy": _clean(m["accuracy"]),
                              "count": m["count"]})
            elif m["protocol"] in ("window", "accuracy"):
                metrics.append({
                    "eval_len": m["eval_len"],
                    "loss": _clean(m["loss"]),
                    "bpb": _clean(m["bpb"]),
                    "ppl": _clean(m["ppl"]),
                    "accuracy": _clean(m["accuracy"]),
                    "token_accuracy": _clean(m["token_accuracy"]),
                    "count": m["count"],
                })
            elif m["protocol"] == "position":
                pos.append({"eval_len": m["eval_len"], "bucket_start": m["bucket_start"],
                            "bucket_end": m["bucket_end"], "bpb": _clean(m["bpb"]), "loss": _clean(m["loss"]),
                            "count": m["count"]})
            elif m["protocol"] == "fixed_target":
                fixed.append({"context_len": m["eval_len"], "bpb": _clean(m["bpb"]), "loss": _clean(m["loss"]),
                              "count": m["count"]})
        if cut is not None:  # never a number from rows that training did not reach
            for rows, end in ((metrics, "eval_len"), (pos, "bucket_end"), (fixed, "context_len")):
                for row in rows:
                    if row[end] > cut:
                        row.update({k: None for k in ("loss", "bpb", "ppl") if k in row}, untrained_rows=True)
        t = dict(train_info.get(r["job"], {}))
        t.pop("model", None)
        if isinstance(t.get("fit"), dict):
            t["fit"] = {k: v for k, v in t["fit"].items() if k != "history"}
            if "first_pass_step" not in t["fit"] and "history" in (train_info.get(r["job"], {}).get("fit") or {}):
                t["fit"]["first_pass_step"] = first_pass_step(train_info[r["job"]]["fit"])  # from the stored curve
            curve = val_curve(train_info.get(r["job"], {}).get("fit") or {})
            if curve and r["variant"] in (None, "randomized"):  # once per trained model, not on every view of it
                t["fit"]["val_curve"] = curve
        out_runs.append({
            "scheme": r["scheme"],
            "variant": r["variant"],
            "label": label(r["scheme"], r["variant"]),
            "task": r["task"],
            "seed": r["seed"],
            "train_len": r["train_len"],
            "job": r["job"],
            "metrics": sorted(metrics, key=lambda m: m["eval_len"]),
            "position_loss": sorted(pos, key=lambda m: (m["eval_len"], m["bucket_start"])),
            "fixed_target": sorted(fixed, key=lambda m: m["context_len"]),
            **({"depth_accuracy": sorted(depth, key=lambda m: (m["eval_len"], m["depth"]))} if depth else {}),
            "train": t,
            "span": (r.get("info") or {}).get("span"),
            # protocol 3: the view's validation score at L (what the gate reads) and per-example scores
            **{k: (r.get("info") or {})[k] for k in ("validation", "per_example") if (r.get("info") or {}).get(k)},
            **({"corpus_sha256": ident.get("sha256")} if ident else {}),
        })
    return {
        "version": RESULTS_VERSION,
        "fingerprint": fingerprint,
        **({"corpus": corpora[0] if len(corpora) == 1 else corpora} if corpora else {}),
        "config": config,
        "runs": out_runs,
        "failures": failures or [],
    }


# ------------------------------------------------------------- aggregation


def label_order(labels, results: dict) -> list[str]:
    """Labels in the configuration's scheme order; each scheme's variants after it, in config order."""
    cfg = results.get("config", {})
    schemes = list(cfg.get("schemes", []))
    variants = list(cfg.get("rope_variants", [])) + ["randomized"]
    rank = {s: i for i, s in enumerate(schemes)}

    def key(lab):
        for s in sorted(rank, key=len, reverse=True):
            if lab == s:
                return (rank[s], 0, 0, lab)
            if lab in (s + "+rand", s + "+rand-sampled"):  # randomized positions: at 0..N-1, then sampled
                return (rank[s], 1, len(variants), lab)
            if lab.startswith(s + "-") and lab[len(s) + 1:] in variants:
                return (rank[s], 1, variants.index(lab[len(s) + 1:]), lab)
        return (len(rank), 0, 0, lab)

    return sorted(labels, key=key)


def first_pass_step(fit: dict) -> int | None:
    """The step at which a run first passed its fit gate, from the kept try's validation curve (``history``)
    of a fit record made before the monitor recorded it: the first check with validation exact match at L
    >= the target (algorithmic), or the step the language model's loss was first flat (its plateau cooldown
    began then; only a fitted run's). None when the gate was never passed or no curve is stored.

    >>> first_pass_step({"target": 0.95, "history": [{"step": 100, "val_exact": 0.5, "val_exact_at_L": 0.5},
    ...                                               {"step": 200, "val_exact": 0.9, "val_exact_at_L": 0.96}]})
    200
    >>> first_pass_step({"fitted": True, "cooldown_from": 3000, "history": [{"step": 3000, "val_loss": 1.2}]})
    3000
    """
    hist = fit.get("history") or []
    if not hist:
        return None
    if "val_loss" in hist[0]:
        return fit.get("cooldown_from") if fit.get("fitted") else None
    target = fit.get("target", 0.95)
    return next((h["step"] for h in hist if h.get("val_exact_at_L", h.get("val_exact", -1)) >= target), None)


def val_curve(fit: dict) -> list[list[float]]:
    """The kept try's validation curve, small: ``[step, score]`` per check, the score the fit gate reads
    (validation exact match at L, or the LM validation loss in nats), to 4 decimals; ``[]`` without a stored
    ``history``.

    >>> val_curve({"history": [{"step": 100, "train_loss": 2.0, "val_exact": 0.1, "val_exact_at_L": 0.12346}]})
    [[100, 0.1235]]
    >>> val_curve({"history": [{"step": 50, "train_loss": 2.0, "val_loss": 1.23456}]}), val_curve({})
    ([[50, 1.2346]], [])
    """
    out = []
    for h in fit.get("history") or []:
        v = h.get("val_loss") if "val_loss" in h else h.get("val_exact_at_L", h.get("val_exact"))
        if isinstance(v, (int, float)) and math.isfinite(v):
            out.append([int(h["step"]), round(float(v), 4)])
    return out
