"""Batches drawn once, replayed: one job's learning-rate tries read the same batches without drawing them again.

``relpos compare`` trains every job at every rate of its task's grid (:func:`relpos.compare.fitting.lr_tries`), each
try from step 0 on the same data stream: a batch source is deterministic in ``(step, micro)``, so every try draws
the same batches. The algorithmic tasks draw theirs example by example (MQAR: about 9 ms of a 90 ms step at the
full preset's shapes; ``benchmarks/job_step.py``'s ``data ms``). :class:`ReplaySource` keeps each batch it has
drawn, compactly, and hands a later try a fresh copy of it, so the second try's steps skip the draw. The batches
are the same token for token, so no number changes.

>>> import torch
>>> class Counting:
...     calls = 0
...     def batch(self, step, micro=0):
...         Counting.calls += 1
...         x = torch.full((2, 3), step, dtype=torch.long)
...         return x, x - 100
>>> src = ReplaySource(Counting())
>>> a, b = src.batch(7), src.batch(7)
>>> torch.equal(a[0], b[0]) and a[0] is not b[0] and Counting.calls
1
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["ReplaySource", "REPLAY_MAX_BYTES"]

#: The most bytes one :class:`ReplaySource` keeps; batches past it are drawn each time, not kept. Every full-preset
#: task's tokens fit int8; its largest stream, MQAR's 6,000 steps of 256 x 17, takes about 50 MiB.
REPLAY_MAX_BYTES = 256 * 2**20


def _compact(t: Tensor) -> np.ndarray:
    """``t`` (integer) in the smallest signed integer dtype that holds its values (a copy)."""
    a = t.detach().cpu().numpy()
    lo, hi = (int(a.min()), int(a.max())) if a.size else (0, 0)
    for dt in (np.int8, np.int16, np.int32):
        info = np.iinfo(dt)
        if info.min <= lo and hi <= info.max:
            return a.astype(dt)
    return a.copy()


class ReplaySource:
    """A batch source that draws each ``(step, micro)`` batch from ``source`` once and replays it afterwards.

    Args:
        source: a batch source, ``batch(step, micro) -> (x, y)`` of integer tensors, deterministic in
            ``(step, micro)``.
        max_bytes: keep batches until they take this many bytes (compact integers); later ones are drawn each time.

    Each call returns new int64 tensors (a caller may change them in place without changing a replay).
    Floating-point batches are refused by name (nothing compact to keep).
    """

    def __init__(self, source, max_bytes: int = REPLAY_MAX_BYTES) -> None:
        if not callable(getattr(source, "batch", None)):
            raise TypeError("source must be a batch source with batch(step, micro) -> (x, y)")
        if not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"max_bytes must be an int >= 0, got {max_bytes!r}")
        self.source, self.max_bytes = source, max_bytes
        self._kept: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self.bytes = 0
        self.drawn = self.replayed = 0

    def batch(self, step: int, micro: int = 0) -> tuple[Tensor, Tensor]:
        hit = self._kept.get((step, micro))
        if hit is not None:
            self.replayed += 1
            return torch.from_numpy(hit[0].astype(np.int64)), torch.from_numpy(hit[1].astype(np.int64))
        x, y = self.source.batch(step, micro)
        self.drawn += 1
        if x.is_floating_point() or y.is_floating_point():
            raise TypeError("ReplaySource keeps integer token batches only; this source gave floating-point tensors")
        cx, cy = _compact(x), _compact(y)
        size = cx.nbytes + cy.nbytes
        if self.bytes + size <= self.max_bytes:
            self._kept[(step, micro)] = (cx, cy)
            self.bytes += size
        return x, y

    def __getattr__(self, name: str):  # the wrapped source's other attributes (width, task, ...)
        if name == "source":
            raise AttributeError(name)
        return getattr(self.source, name)
