"""Learning-rate schedules of :func:`relpos.training.loop.train`.

* ``"cosine"`` (the default): linear warm-up, then a cosine from ``lr`` to
  ``lr * min_lr_ratio`` at the last step of the budget.
* ``"constant"``: linear warm-up, then ``lr`` until a training callback asks for a
  :class:`Cooldown`; the rate then falls linearly to ``lr * min_lr_ratio`` over the
  cooldown's steps, and training stops at its end (warmup-stable-decay: Hu et al.
  2024, MiniCPM, https://arxiv.org/abs/2404.06395; Hägele et al. 2024,
  https://arxiv.org/abs/2405.18392). ``relpos compare`` trains language models this
  way: constant until the validation loss has flattened, then the cooldown.

A :class:`Cooldown` returned under ``"cosine"`` decays linearly from the current rate.

Example:
    >>> from relpos.training.loop import TrainConfig
    >>> c = TrainConfig(steps=100, lr=1.0, warmup=0, min_lr_ratio=0.0, schedule="constant")
    >>> lr_at(50, c), round(lr_at(50, c, (40, 20)), 6), lr_at(59, c, (40, 20))
    (1.0, 0.45, 0.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["SCHEDULES", "Cooldown", "lr_at"]

#: Schedule names (``TrainConfig.schedule``).
SCHEDULES = ("cosine", "constant")


@dataclass(frozen=True)
class Cooldown:
    """A training callback's answer: decay the learning rate linearly to ``lr * min_lr_ratio`` over
    ``steps`` more optimizer steps (at most to the step budget), then stop."""

    steps: int

    def __post_init__(self) -> None:
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"Cooldown.steps must be an int >= 1, got {self.steps!r}")


def lr_at(step: int, cfg, cooldown: tuple[int, int] | None = None) -> float:
    """Learning rate of optimizer step ``step`` (0-based).

    Args:
        step: the step.
        cfg: a :class:`relpos.training.loop.TrainConfig` (``lr``, ``warmup``, ``steps``, ``min_lr_ratio``,
            ``schedule``).
        cooldown: ``(first step, length)`` of a cooldown that has begun, or None.
    """
    if cooldown is not None and step >= cooldown[0]:
        start, length = cooldown
        top = lr_at(start - 1, cfg) if start > 0 else cfg.lr
        t = min(1.0, (step - start + 1) / max(1, length))
        return top + (cfg.lr * cfg.min_lr_ratio - top) * t
    if cfg.warmup and step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    if cfg.schedule == "constant":
        return cfg.lr
    span = max(1, cfg.steps - cfg.warmup)
    t = min(1.0, (step - cfg.warmup) / span)
    return cfg.lr * (cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * t)))
