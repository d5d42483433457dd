"""One-line checks of :class:`relpos.compare.config.ExperimentConfig`'s fields: each names the field and the
accepted range."""

from __future__ import annotations

import math
from typing import Any


def _positive_int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    return v


def _check_task_lr_grid(task: str, grid: Any) -> None:
    """``task_train[task]["lr_grid"]``: a non-empty list of finite learning rates > 0."""
    name = f"task_train[{task!r}]['lr_grid']"
    if isinstance(grid, (str, bytes)) or not isinstance(grid, (list, tuple)) or not grid:
        raise ValueError(f"{name} must be a non-empty list of learning rates > 0, got {grid!r}")
    for v in grid:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
            raise ValueError(f"{name} entries must be finite numbers > 0, got {v!r}")


def _int_list(name: str, v: Any, *, lo: int = 1, what: str = "evaluation lengths must be above zero") -> list[int]:
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise TypeError(f"{name} must be a list of ints, got {v!r}")
    out = []
    for x in v:
        if isinstance(x, bool) or not isinstance(x, int):
            raise TypeError(f"{name} must contain ints, got {x!r}")
        if x < lo:
            raise ValueError(f"{name} must be >= {lo} ({what}), got {x}")
        out.append(x)
    if not out:
        raise ValueError(f"{name} must not be empty")
    return out
