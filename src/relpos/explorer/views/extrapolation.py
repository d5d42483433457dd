"""View 4: extrapolation curves from a loaded ``relpos compare`` results folder."""

from __future__ import annotations

from relpos.explorer.errors import ApiError
from relpos.explorer.params import get_int
from relpos.explorer.results import aggregate_results

ROUTE = "results"


def answer(ex, params: dict) -> dict:
    """Extrapolation curves of one loaded results folder, one task and metric."""
    if not ex.results:
        raise ApiError("no results loaded: start the explorer with --results DIR (a relpos compare folder), "
                       "or load a results.json file", code="no_results", field="source")
    src = get_int(params, "source", 0, 0, len(ex.results) - 1)
    label, data = ex.results[src]
    out = aggregate_results(data, params.get("task") or None, params.get("metric") or None,
                            model=ex.results_model(src))
    out["source"] = label
    out["bundled"] = src == getattr(ex, "bundled_index", None)
    out["preset"] = (data.get("config") or {}).get("preset")
    return out
