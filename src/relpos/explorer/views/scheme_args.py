"""The request fields every one-scheme view shares: heads, the head shown, head dimension, seed and the
scheme's constructor options (``opt.<name>``), validated against the explorer's limits."""

from __future__ import annotations

from typing import Any

from relpos.explorer.adapters import option_specs
from relpos.explorer.errors import ApiError
from relpos.explorer.params import get_bool, get_float, get_int

__all__ = ["scheme_args"]


def scheme_args(ex, entry, params: dict) -> tuple[int, int, int, int, list, list[str]]:
    """Heads, shown head, head dimension, seed, constructor options and the request fields that
    changed an option from its default (named in a cost refusal)."""
    L = ex.limits
    n_heads = get_int(params, "n_heads", 4, 1, L.max_heads, cap=True, unit="heads")
    head = get_int(params, "head", 0, 0, n_heads - 1)
    head_dim = get_int(params, "head_dim", 64, 1, L.max_head_dim, cap=True, unit="dims")
    seed = get_int(params, "seed", 0, 0, 2**31 - 1)
    opts, changed = [], []
    for spec in option_specs(entry.registry, entry.hidden, entry.defaults):
        name = spec["name"]
        pname = "opt." + name
        if spec["type"] == "bool":
            v: Any = get_bool(params, pname, spec["default"])
        elif spec["type"] == "int":
            v = get_int(params, pname, spec["default"], -L.max_int_option, L.max_int_option, cap=True)
        else:
            v = get_float(params, pname, spec["default"])
            if abs(v) > 1e6:
                raise ApiError(f"{name} must be within +-1e6, got {v}", field=pname)
        if v != spec["default"]:
            changed.append(pname)
        opts.append((name, v))
    return n_heads, head, head_dim, seed, opts, changed
