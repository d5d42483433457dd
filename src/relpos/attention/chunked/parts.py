"""Optional timing of an engine's own steps, as the engine runs them (``benchmarks/slow_schemes.py``).

Off by default: :data:`clock` is ``None`` and :func:`now` returns ``None`` (no clock read). A benchmark
sets ``clock = {}``; the fused engines (``relkey``, ``piecewise``) then add the process CPU milliseconds of
each step to ``clock[part]``, e.g. ``"content matmuls"``, ``"position matmuls"``, ``"flash forward"``,
``"kernel passes"``, ``"exp"``. What a call spends outside the named steps is its total minus their sum.

Example:
    >>> from relpos.attention.chunked import parts
    >>> parts.clock = {}
    >>> t = parts.now(); _ = sum(range(1000)); parts.add("loop", t)
    >>> sorted(parts.clock)
    ['loop']
    >>> parts.clock = None
"""

from __future__ import annotations

import time

#: ``None`` (default: nothing is timed) or a dict of milliseconds by part that the engines add to.
clock: dict[str, float] | None = None


def now() -> float | None:
    """The process CPU time when timing is on, else ``None``."""
    return time.process_time() if clock is not None else None


def add(part: str, t0: float | None) -> None:
    """Add the process CPU milliseconds since ``t0`` (from :func:`now`) to ``clock[part]``."""
    if t0 is not None and clock is not None:
        clock[part] = clock.get(part, 0.0) + (time.process_time() - t0) * 1000.0
