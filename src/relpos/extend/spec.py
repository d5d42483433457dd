"""Typed settings of the ``extend`` benchmark (:class:`ExtendSpec`), validated with one-line errors.

The command line builds one at its edge (``relpos extend --from FOLDER``); nothing below it reads flags.
The fingerprinted part (:meth:`ExtendSpec.protocol`) decides the numbers: a results folder holds one
protocol, and a run with another is refused (or, with ``force``, its results are moved aside).

Example:
    >>> s = ExtendSpec(source="runs/default", out="runs/extend")
    >>> s.factor, s.eval_factors, s.k_fractions
    (4, (1, 4, 8, 16), (0.01, 0.03, 0.1))
    >>> ExtendSpec(source="a", out="b", factor=1)
    Traceback (most recent call last):
    ...
    ValueError: --factor must be an integer in [2, 64], got 1
"""

from __future__ import annotations

import dataclasses
import math

from relpos.extend.recipes import DEFAULT_RECIPES, recipe

__all__ = ["ExtendSpec", "DEFAULT_LR_GRID", "DEFAULT_K_FRACTIONS", "k_grid"]

#: The fine-tuning rates every recipe is tried at (the same grid for every recipe; the rate of each
#: (recipe, seed, K) is chosen by the validation loss at the fine-tuning length). The default preset pretrains
#: at 6e-3 (the full preset at 3e-3); Chen et al. fine-tune at about a fifteenth of the pretraining rate.
DEFAULT_LR_GRID: tuple[float, ...] = (3e-4, 1e-3, 3e-3)
#: Fine-tuning steps as fractions of the pretraining steps (K = 0 is always measured too).
DEFAULT_K_FRACTIONS: tuple[float, ...] = (0.01, 0.03, 0.1)


def k_grid(pretrain_steps: int, fractions) -> list[int]:
    """``[0, round(f * pretrain_steps) (at least 1) for f in fractions]``, sorted, without repeats.

    >>> k_grid(2500, (0.01, 0.03, 0.1))
    [0, 25, 75, 250]
    """
    return sorted({0, *(max(1, round(f * pretrain_steps)) for f in fractions)})


def _check_int(flag: str, v, lo: int = 1, hi: int = 1 << 30) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ValueError(f"{flag} must be an integer in [{lo}, {hi}], got {v!r}")
    return v


@dataclasses.dataclass
class ExtendSpec:
    """Settings of one ``extend`` benchmark run.

    Attributes:
        source: the finished ``relpos compare`` folder whose language models are fine-tuned (read only).
        out: the results folder (the ``--out`` rules of :mod:`relpos.outdir`).
        recipes: recipe names (:data:`relpos.extend.recipes.RECIPES`); recipes whose scheme the folder lacks
            are left out and said so.
        seeds: seeds of the folder to use (None: every seed with a language model).
        factor: fine-tuning length ``factor x L`` and the scaling factor of the rotary recipes.
        eval_factors: evaluation lengths as multiples of ``L`` (1 must be one of them).
        k_fractions: fine-tuning steps as fractions of the pretraining steps (K = 0 is always measured).
        lr_grid: fine-tuning rates, the same for every recipe; the rate is chosen on validation only.
        warmup: linear warm-up steps of every fine-tuning run (then a constant rate, as Chen et al.);
            None: ``min(20, max(1, smallest K // 2))``.
        batch_size: rows of ``factor x L`` tokens per step (None: the folder's language-modelling batch size).
        allow_unfitted: also use models the folder marks as not fitted (their numbers carry no conclusion;
            the report says so).
        threads: torch threads (execution only).
        force: move the results of another protocol aside instead of refusing (execution only).
    """

    source: str
    out: str
    recipes: tuple[str, ...] = DEFAULT_RECIPES
    seeds: tuple[int, ...] | None = None
    factor: int = 4
    eval_factors: tuple[int, ...] = (1, 4, 8, 16)
    k_fractions: tuple[float, ...] = DEFAULT_K_FRACTIONS
    lr_grid: tuple[float, ...] = DEFAULT_LR_GRID
    warmup: int | None = None
    batch_size: int | None = None
    allow_unfitted: bool = False
    threads: int = 1
    force: bool = False

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> "ExtendSpec":
        if not self.recipes:
            raise ValueError("--recipes must name at least one recipe")
        self.recipes = tuple(dict.fromkeys(recipe(r).name for r in self.recipes))
        if self.seeds is not None:
            if not self.seeds:
                raise ValueError("--seeds must name at least one seed")
            self.seeds = tuple(sorted({_check_int("--seeds entries", s, 0, 2**31 - 1) for s in self.seeds}))
        _check_int("--factor", self.factor, 2, 64)
        fs = tuple(sorted({_check_int("--eval-factors entries", f, 1, 64) for f in self.eval_factors}))
        if 1 not in fs or self.factor not in fs:
            raise ValueError(f"--eval-factors must include 1 and the fine-tuning factor {self.factor}, got "
                             f"{list(self.eval_factors)}")
        self.eval_factors = fs
        if not self.k_fractions:
            raise ValueError("--k-fractions must name at least one fraction")
        for f in self.k_fractions:
            if isinstance(f, bool) or not isinstance(f, (int, float)) or not (0 < f <= 1):
                raise ValueError(f"--k-fractions entries must be numbers in (0, 1], got {f!r}")
        self.k_fractions = tuple(sorted(set(float(f) for f in self.k_fractions)))
        if not self.lr_grid:
            raise ValueError("--lr-grid must name at least one rate")
        for v in self.lr_grid:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < math.inf) or v > 1:
                raise ValueError(f"--lr-grid entries must be finite numbers in (0, 1], got {v!r}")
        self.lr_grid = tuple(dict.fromkeys(float(v) for v in self.lr_grid))
        if self.warmup is not None:
            _check_int("--warmup", self.warmup, 0, 1 << 20)
        if self.batch_size is not None:
            _check_int("--batch-size", self.batch_size, 1, 1 << 16)
        _check_int("--threads", self.threads, 1, 1024)
        return self

    def warmup_for(self, grid: list[int]) -> int:
        if self.warmup is not None:
            return self.warmup
        small = min([k for k in grid if k > 0] or [2])
        return min(20, max(1, small // 2))

    def protocol(self, source_fingerprint: str, grid: list[int], batch_size: int) -> dict:
        """The fingerprinted settings (recipes and seeds are what is run, not how: they are left out)."""
        return {"source_fingerprint": source_fingerprint, "factor": self.factor,
                "eval_factors": list(self.eval_factors), "k_grid": list(grid), "lr_grid": list(self.lr_grid),
                "warmup": self.warmup_for(grid), "batch_size": batch_size, "schedule": "constant after warm-up",
                "allow_unfitted": self.allow_unfitted, "version": 1}
