"""Training steps with subnormal floats flushed to zero (x86 FTZ/DAZ, ``torch.set_flush_denormal``).

An attention probability or gradient below float32's smallest normal number (about 1.2e-38: a logit gap
of more than about 87 nats) is a *subnormal*; a matrix multiply that meets many of them runs a slow path
of the CPU. At the scale preset's ``4 x 256`` shapes, DeBERTa's and CoPE's training steps took about 4x
as long with subnormals as with them flushed (``benchmarks/results/flush_denormal.json``); the other
schemes, at initialisation and as trained to fit the full preset's copy task, were unchanged (0.95-1.03x).
Flushing changes a value only where it is below 1.2e-38, far under float32's rounding of the numbers it
is added to.

The setting belongs to the calling thread's floating-point state; :func:`flushed` sets it for a block and
puts the caller's setting back (read by a probe: a subnormal times one is zero exactly when flushing).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["flushing", "flushed"]

_SUBNORMAL = 1e-39  # below float32's smallest normal (1.1754944e-38), above its smallest subnormal


def flushing() -> bool:
    """Whether this thread flushes subnormal floats to zero now.

    >>> with flushed():
    ...     flushing()
    True
    """
    return float(torch.tensor(_SUBNORMAL, dtype=torch.float32) * 1.0) == 0.0


@contextlib.contextmanager
def flushed() -> Iterator[bool]:
    """Flush subnormals to zero inside the block (where the CPU supports it); yields whether it does."""
    before = flushing()
    on = torch.set_flush_denormal(True)
    try:
        yield on
    finally:
        if not before:
            torch.set_flush_denormal(False)
