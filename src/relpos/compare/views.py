"""Which rows of a results document count as fitted: the fit gate applied to every evaluated view of a model.

A trained model is evaluated as several *views* (as trained, under each RoPE scaling, a randomized-positions
model at positions 0..N-1 or at sampled ones); :func:`fitted_views` decides, for every row, whether the view
still passes the gate its training passed. Pure functions of the results rows (no model, no file);
:mod:`relpos.compare.fitting` re-exports them beside the gate itself.
"""

from __future__ import annotations

__all__ = ["VIEW_LM_TOLERANCE", "metric_at", "view_fitted", "fitted_views"]

#: A view of a language model passes the fit gate again when its bits per byte at the training length are at
#: most this factor above the best view of the same trained model (RoPE's scalings equal the plain model at L;
#: randomized RoPE evaluated at 0..N-1 instead of its sampled positions: 1.65x).
VIEW_LM_TOLERANCE = 1.10


def metric_at(run: dict, eval_len: int | None, field: str):
    """A results row's ``field`` measured at ``eval_len`` (None where it was not measured there)."""
    return next((m.get(field) for m in run.get("metrics") or [] if m.get("eval_len") == eval_len), None)


def view_fitted(run: dict, runs: list[dict] = ()) -> bool:
    """Whether one evaluated row of a results document counts as fitted.

    A row is one view of a trained model: as trained, with a RoPE scaling, or a randomized-positions model
    at positions 0..N-1 or at sampled ones. The fit gate was decided on the model as validated during
    training, so a view evaluated differently must also score in distribution at the training length L:
    validation exact match at L >= the gate's target (algorithmic tasks), or, for language modelling, a
    validation loss at L at most :data:`VIEW_LM_TOLERANCE` times the best of the views of the same job
    among ``runs``. Each view's validation score is in its row (``validation``); rows from before protocol 3
    have none and are gated, as they were, on their held-out score at L.

    Example:
        >>> fit = {"fitted": True, "target": 0.95, "score": 0.96}
        >>> row = {"task": "copy", "train_len": 8, "train": {"fit": fit},
        ...        "metrics": [{"eval_len": 8, "accuracy": 0.04}]}
        >>> view_fitted(row), view_fitted({**row, "metrics": [{"eval_len": 8, "accuracy": 0.97}]})
        (False, True)
        >>> view_fitted({**row, "validation": {"score": 0.97}})  # protocol 3: the view's validation decides
        True
        >>> lm = {"task": "lm", "job": "lm/rope+rand/seed0", "train_len": 64, "train": {"fit": {"fitted": True}}}
        >>> at_0_to_N = {**lm, "metrics": [{"eval_len": 64, "bpb": 3.35}]}
        >>> sampled = {**lm, "metrics": [{"eval_len": 64, "bpb": 2.03}]}
        >>> view_fitted(at_0_to_N, [sampled]), view_fitted(sampled, [at_0_to_N])
        (False, True)
    """
    return _view_passes(run, _best_lm_views([run, *runs]))


def fitted_views(runs: list[dict]) -> list[bool]:
    """:func:`view_fitted` of every row of ``runs`` against the others, in one pass over them.

    Example:
        >>> rows = [{"task": "copy", "train_len": 8, "train": {"fit": {"fitted": ok}},
        ...          "metrics": [{"eval_len": 8, "accuracy": 0.97}]} for ok in (True, False)]
        >>> fitted_views(rows)
        [True, False]
    """
    best = _best_lm_views(runs)
    return [_view_passes(r, best) for r in runs]


def _lm_view_score(run: dict):
    """The number an LM view is gated on: its validation loss at L (protocol 3), else, for results from before
    views carried a validation score, bits per byte at L."""
    val = run.get("validation")
    if isinstance(val, dict) and isinstance(val.get("score"), (int, float)):
        return val["score"]
    return metric_at(run, run.get("train_len"), "bpb")


def _best_lm_views(runs) -> dict:
    """LM job -> the lowest gated score at the training length over its views."""
    best: dict = {}
    for r in runs:
        if r.get("task") == "lm" and (b := _lm_view_score(r)) is not None:
            best[r.get("job")] = min(b, best.get(r.get("job"), b))
    return best


def _view_passes(run: dict, best_lm: dict) -> bool:
    fit = (run.get("train") or {}).get("fit") or {}
    if not fit.get("fitted"):
        return False
    if run.get("task") == "lm":
        own = _lm_view_score(run)
        return own is None or own <= VIEW_LM_TOLERANCE * best_lm.get(run.get("job"), own)
    val = run.get("validation")
    if isinstance(val, dict) and isinstance(val.get("score"), (int, float)):
        return val["score"] >= fit.get("target", 0.95)  # the view's own validation at L, never the test set
    acc = metric_at(run, run.get("train_len"), "accuracy")  # results from before protocol 3
    return acc is None or acc >= fit.get("target", 0.95)
