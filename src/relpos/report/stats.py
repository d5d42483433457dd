"""Paired bootstrap intervals over seeds and evaluation examples, and the rankings built on them.

Efron & Tibshirani 1993, "An Introduction to the Bootstrap" (percentile intervals); the two-stage
(cluster) resampling follows Davison & Hinkley 1997, section 3.8. Every scheme of one seed is trained on
the same data order with the same non-position initialisation and is evaluated on the same examples in the
same order, so two schemes are compared **paired**: the difference is taken per seed and per example, and
the bootstrap resamples (1) the seeds, with replacement, then (2) within each drawn seed the evaluation
examples, with replacement, and recomputes the difference of the two schemes' scores.

What an interval covers: the variation from the training seed (initialisation and data order, as far as
the few seeds sample it) and from the finite set of evaluation examples. What it does not cover: other
model sizes, step budgets, learning-rate grids, tasks or corpora; the choice of the learning rate (made on
validation data before any test number is read); and, with three seeds, the seed-to-seed variation is
itself known only roughly (three seeds give ten distinct resamples of the seeds).

A difference whose interval contains 0, or has a bound within :data:`BORDERLINE` of 0, is a **tie**: a bound
that close to 0 moves across it when the bootstrap is reseeded (with three seeds and per-token accuracies in
steps of 1/32 the resampled differences are discrete, and 100,000 resamples did not settle the bounds that sat
within 0.002 of 0), so such a difference is never claimed. A row with fewer than :data:`MIN_SEEDS` fitted seeds
never enters a ranking.

Lattice ties are decided exactly. A mean of per-example values that lie on a lattice (per-token accuracies over
``T`` tokens: multiples of ``1/T``) has a bootstrap distribution on a lattice too, and a sampled percentile bound
then lands on one of two neighbouring lattice points by chance when the level falls between them (a 1/768 step
moved a rank with the bootstrap's seed). For such differences :func:`paired_bootstrap` computes the two-stage
bootstrap distribution exactly (:func:`_exact_interval`) instead of sampling it, so its intervals, and every
tie, rank and verdict read from them, do not depend on the bootstrap's seed. Other scores (the LM ratio, losses)
are sampled, with more resamples near a decision's edge (:func:`decided_bootstrap`).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from relpos.compare.job import per_example_key  # the record's key format, defined where runs are written

__all__ = ["per_example_key", "MIN_SEEDS", "CONFIDENCE", "N_BOOT", "paired_bootstrap", "Interval",
           "rank_against_best", "spearman", "spearman_interval", "BORDERLINE", "decided_bootstrap", "REFINE",
           "lattice_step"]

#: Fitted seeds a row needs to enter a ranking.
MIN_SEEDS = 2
#: Two-sided confidence of the intervals.
CONFIDENCE = 0.95
#: Bootstrap resamples.
N_BOOT = 2000
#: A decision is *borderline* when a bound of its interval lies within this of 0: another bootstrap draw, or a
#: few more test examples, could move it across 0, so it is decided a tie (:attr:`Interval.tie`); the page
#: marks and counts them.
BORDERLINE = 0.005


class Interval(tuple):
    """``(estimate, low, high)`` of a difference; ``tie`` when it does not clear 0 by more than
    :data:`BORDERLINE` (``low <= BORDERLINE`` and ``high >= -BORDERLINE``)."""

    def __new__(cls, est: float, lo: float, hi: float):
        return super().__new__(cls, (float(est), float(lo), float(hi)))

    est = property(lambda self: self[0])
    lo = property(lambda self: self[1])
    hi = property(lambda self: self[2])

    @property
    def tie(self) -> bool:
        """No difference claimed: the interval contains 0 or a bound is within :data:`BORDERLINE` of it.

        >>> Interval(0.1, 0.003, 0.2).tie, Interval(0.1, 0.02, 0.2).tie, Interval(0.0, -0.1, 0.1).tie
        (True, False, True)
        """
        return self.lo <= BORDERLINE and self.hi >= -BORDERLINE

    @property
    def above(self) -> bool:
        """The difference is positive beyond doubt: the interval clears 0 by more than :data:`BORDERLINE`."""
        return self.lo > BORDERLINE

    @property
    def below(self) -> bool:
        """The difference is negative beyond doubt (the mirror of :attr:`above`)."""
        return self.hi < -BORDERLINE

    @property
    def borderline(self) -> bool:
        """A bound within :data:`BORDERLINE` of 0 (the tie-or-not decision is close to its edge).

        >>> Interval(0.1, 0.003, 0.2).borderline, Interval(0.1, 0.02, 0.2).borderline
        (True, False)
        """
        return any(math.isfinite(b) and abs(b) < BORDERLINE for b in (self.lo, self.hi))

    def __repr__(self) -> str:
        return f"Interval({self.est:.4g}, [{self.lo:.4g}, {self.hi:.4g}])"


Stat = Callable[[dict], float]


def paired_bootstrap(a: Sequence[dict], b: Sequence[dict], stat: Stat | None = None, *, n_boot: int = N_BOOT,
                     confidence: float = CONFIDENCE, seed: int = 0) -> Interval:
    """Percentile interval of ``score(a) - score(b)`` from a two-stage paired bootstrap.

    Args:
        a, b: one entry per seed, paired by position (the same seed): a dict ``name -> (E,) array`` of
            per-example values (several names for a score that combines measurements, e.g. the LM ratio of
            two lengths); within a seed ``a`` and ``b`` have the same examples in the same order.
        stat: ``stat(means) -> float``: the score of one seed from the means of its (resampled) per-example
            arrays (``{name: mean}``); default: the mean of the only array. It must work elementwise on
            arrays of means too (a mean, a ratio of means): the resamples are scored at once. The score of
            a scheme is the mean of its seeds' scores.
        n_boot: resamples.
        confidence: two-sided level.
        seed: bootstrap generator seed (the interval is deterministic).

    Returns:
        :class:`Interval` (estimate on the data as they are, percentile bounds). For the default ``stat`` (a
        mean) of values on a lattice (:func:`lattice_step`) the bounds are those of the exact bootstrap
        distribution (:func:`_exact_interval`), independent of ``seed`` and ``n_boot``.

    Raises:
        ValueError: unequal seed counts or example counts, or no seeds.

    Example:
        >>> import numpy as np
        >>> a = [{"v": np.ones(50)}, {"v": np.ones(50)}]
        >>> b = [{"v": np.zeros(50)}, {"v": np.zeros(50)}]
        >>> paired_bootstrap(a, b).tie, paired_bootstrap(a, a).tie
        (False, True)
    """
    if len(a) != len(b) or not a:
        raise ValueError(f"paired_bootstrap needs the same seeds on both sides, got {len(a)} and {len(b)}")
    plain_mean = stat is None and len(a[0]) == 1
    if stat is None:
        def stat(m):
            (v,) = m.values()
            return v
    names = sorted(a[0])
    A = [{k: np.asarray(s[k], dtype=np.float64) for k in names} for s in a]
    B = [{k: np.asarray(s[k], dtype=np.float64) for k in names} for s in b]
    for sa, sb in zip(A, B):
        for k in names:
            if sa[k].shape != sb[k].shape or sa[k].ndim != 1 or not sa[k].size:
                raise ValueError(f"per-example arrays of {k!r} must be 1-D, non-empty and paired, got "
                                 f"{sa[k].shape} and {sb[k].shape}")

    S = len(A)
    est = float(np.mean([stat({k: A[s][k].mean() for k in names}) - stat({k: B[s][k].mean() for k in names})
                         for s in range(S)]))
    if plain_mean:
        exact = _exact_interval([A[s][names[0]] - B[s][names[0]] for s in range(S)], confidence)
        if exact is not None:
            return Interval(est, *exact)
    rng = np.random.default_rng(seed)
    # the first stage, enumerated: with few seeds every one of the S**S draws of seeds gets the same number of
    # resamples (at least n_boot in all), instead of a random count of them. The distribution is the same; the
    # random share of each draw moved the interval's bounds by up to 0.01 between bootstrap seeds (with three
    # seeds a bound sits inside the share of one draw, e.g. the worst seed three times: 1/27 of the resamples)
    if S ** S <= n_boot:
        every = np.array(np.meshgrid(*[np.arange(S)] * S, indexing="ij")).reshape(S, -1).T  # (S**S, S)
        seeds = np.repeat(every, -(-n_boot // len(every)), axis=0)
        n_boot = len(seeds)
    else:
        seeds = rng.integers(0, S, size=(n_boot, S))
    # vectorised: per resample, per drawn seed, per name, resampled example means for both sides
    means_a = {k: np.empty((n_boot, S)) for k in names}
    means_b = {k: np.empty((n_boot, S)) for k in names}
    for k in names:
        for j in range(S):
            for s in range(S):
                rows = np.nonzero(seeds[:, j] == s)[0]
                if not rows.size:
                    continue
                E = A[s][k].size
                ix = rng.integers(0, E, size=(rows.size, E))
                means_a[k][rows, j] = A[s][k][ix].mean(axis=1)
                means_b[k][rows, j] = B[s][k][ix].mean(axis=1)
    # ``stat`` is elementwise in its means (a mean, a ratio of means), so it runs on every resample at once
    out = np.mean([np.asarray(stat({k: means_a[k][:, j] for k in names}), dtype=np.float64)
                   - np.asarray(stat({k: means_b[k][:, j] for k in names}), dtype=np.float64)
                   for j in range(S)], axis=0)
    out = out[np.isfinite(out)]
    if not out.size:
        return Interval(est, math.nan, math.nan)
    alpha = (1.0 - confidence) / 2
    lo, hi = np.quantile(out, [alpha, 1 - alpha])
    return Interval(est, lo, hi)


#: Largest denominator of a lattice the exact bootstrap reads (per-token accuracies over up to this many tokens),
#: and the largest support (lattice points of the resampled total) it computes; beyond either it samples.
LATTICE_MAX_DEN = 4096
LATTICE_MAX_SUPPORT = 1 << 22
#: Probabilities closer than this count as equal when the exact distribution's quantiles are read.
_PROB_TOL = 1e-9


def lattice_step(values: Sequence[np.ndarray]) -> int | None:
    """``q`` such that every value is an integer multiple of ``1/q`` (``q <= LATTICE_MAX_DEN``), or None.

    Per-token accuracies over ``T`` tokens lie on multiples of ``1/T``; losses do not.

    >>> lattice_step([np.array([0.0, 0.25, -0.5])]), lattice_step([np.array([0.1234567891])])
    (4, None)
    """
    from fractions import Fraction

    q = 1
    for v in values:
        for x in np.unique(v):
            if not math.isfinite(x):
                return None
            q = math.lcm(q, Fraction(float(x)).limit_denominator(LATTICE_MAX_DEN).denominator)
            if q > LATTICE_MAX_DEN:
                return None
    if any(np.max(np.abs(np.asarray(v) * q - np.round(np.asarray(v) * q)), initial=0.0) > 1e-9 for v in values):
        return None
    return q


def _exact_interval(diffs: Sequence[np.ndarray], confidence: float) -> tuple[float, float] | None:
    """The percentile bounds of the two-stage paired bootstrap of a mean difference, computed exactly, or None.

    Args:
        diffs: per seed, the ``(E,)`` per-example differences (the same ``E`` for every seed), on a lattice
            (:func:`lattice_step`).

    The resampled score is ``(1/S) sum_j (1/E) sum_e d[s_j, e*]`` over ``S`` seeds drawn uniformly with
    replacement and ``E`` examples drawn within each: on the lattice its total ``sum_j sum_e q d`` is an
    integer, distributed as ``M^{*S}`` with ``M = (1/S) sum_s p_s^{*E}`` (``p_s``: the histogram of seed
    ``s``'s ``q d``), computed by FFT. The bounds are the smallest value whose cumulative probability reaches
    ``alpha`` and the largest whose upper tail does (``alpha = (1 - confidence) / 2``): exact, so they do not
    depend on the bootstrap's seed or its number of resamples, where a sampled bound on a lattice lands on one
    of two neighbouring points by chance. None when the values are off a lattice, the seeds differ in ``E``
    or the support is too large (the caller samples then).
    """
    S, E = len(diffs), diffs[0].size
    if any(d.size != E for d in diffs):
        return None
    q = lattice_step(diffs)
    if q is None:
        return None
    ks = [np.round(np.asarray(d) * q).astype(np.int64) for d in diffs]
    kmin, kmax = min(int(k.min()) for k in ks), max(int(k.max()) for k in ks)
    span = S * E * (kmax - kmin) + 1  # support of the total, shifted by S * E * kmin
    if span > LATTICE_MAX_SUPPORT:
        return None
    n = 1 << (span - 1).bit_length()
    m = np.zeros(n // 2 + 1, dtype=np.complex128)
    for k in ks:
        p = np.bincount(k - kmin, minlength=kmax - kmin + 1) / E
        m += np.fft.rfft(p, n) ** E
    total = np.fft.irfft((m / S) ** S, n)[:span]
    total = np.clip(total, 0.0, None)
    total /= total.sum()
    alpha = (1.0 - confidence) / 2
    cdf, sf = np.cumsum(total), np.cumsum(total[::-1])[::-1]
    lo_i = int(np.argmax(cdf >= alpha - _PROB_TOL))
    hi_i = span - 1 - int(np.argmax(sf[::-1] >= alpha - _PROB_TOL))
    scale = 1.0 / (q * S * E)
    return (lo_i + S * E * kmin) * scale, (hi_i + S * E * kmin) * scale


#: :func:`decided_bootstrap` recomputes an interval with this many times the resamples when a bound lies within
#: :data:`REFINE_NEAR` of a decision's edge (0 or +-BORDERLINE): there the Monte Carlo noise of the bounds
#: (about 0.002 at 10,000 resamples on the protocol-3 results) would decide, so it is cut about threefold.
REFINE = 10
REFINE_NEAR = 0.003


def decided_bootstrap(a: Sequence[dict], b: Sequence[dict], stat: Stat | None = None, *, n_boot: int = N_BOOT,
                      seed: int = 0) -> Interval:
    """:func:`paired_bootstrap`, with :data:`REFINE` times the resamples where a bound lies within
    :data:`REFINE_NEAR` of 0 or of +-:data:`BORDERLINE` (the edges of :attr:`Interval.tie`): the interval a
    tie, a rank or a verdict is decided on, made stable against the bootstrap's own seed."""
    iv = paired_bootstrap(a, b, stat, n_boot=n_boot, seed=seed)
    edges = (0.0, BORDERLINE, -BORDERLINE)
    if any(math.isfinite(x) and abs(x - e) < REFINE_NEAR for x in (iv.lo, iv.hi) for e in edges):
        return paired_bootstrap(a, b, stat, n_boot=REFINE * n_boot, seed=seed)
    return iv


def rank_against_best(rows: dict[str, list[dict]], stat: Stat | None = None, *, higher_is_better: bool = True,
                      n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """Each row against the best one, paired over the seeds they share.

    Args:
        rows: ``label -> [one dict per fitted seed: name -> per-example array, plus "_seed": int]``;
            two rows are paired on the seeds they share. Rows with fewer than :data:`MIN_SEEDS` seeds are
            left out (``excluded``).
        stat: as in :func:`paired_bootstrap`.
        higher_is_better: direction of the score.

    Returns:
        ``{"best": label, "scores": {label: mean score}, "vs_best": {label: Interval of label - best (sign
        such that negative is worse when higher_is_better)}, "tie": {label: bool}, "rank": {label: int},
        "excluded": [labels], "pairs": {(better, worse): Interval of better - worse}}``. The best row ties
        with itself; ``rank`` is 1 for the best and every row whose interval contains 0, else 1 + the
        number of rows whose interval against it excludes 0 in their favour (computed pairwise; every
        pairwise interval read is in ``pairs``, so a caller can tell which ranks sit near an edge).
    """
    given = stat  # None: the plain mean, which paired_bootstrap computes exactly on a lattice
    if stat is None:
        def stat(m):
            (v,) = m.values()
            return v
    ok = {lab: r for lab, r in rows.items() if len(r) >= MIN_SEEDS}
    excluded = sorted(set(rows) - set(ok))
    if not ok:
        return {"best": None, "scores": {}, "vs_best": {}, "tie": {}, "rank": {}, "excluded": excluded, "pairs": {}}

    def score(r):
        return float(np.mean([stat({k: float(np.mean(v)) for k, v in s.items() if k != "_seed"}) for s in r]))

    sign = 1.0 if higher_is_better else -1.0
    scores = {lab: score(r) for lab, r in ok.items()}
    best = max(sorted(ok), key=lambda lab: sign * scores[lab])

    def interval(x, y):
        common = sorted({s["_seed"] for s in ok[x]} & {s["_seed"] for s in ok[y]})
        if len(common) < MIN_SEEDS:
            return None
        bx = {s["_seed"]: s for s in ok[x]}
        by = {s["_seed"]: s for s in ok[y]}
        ax = [{k: v for k, v in bx[c].items() if k != "_seed"} for c in common]
        ay = [{k: v for k, v in by[c].items() if k != "_seed"} for c in common]
        return decided_bootstrap(ax, ay, given, n_boot=n_boot, seed=seed)

    vs_best, tie = {}, {}
    for lab in ok:
        iv = Interval(0.0, 0.0, 0.0) if lab == best else interval(lab, best)
        vs_best[lab] = iv
        tie[lab] = iv is None or iv.tie
    rank, pairs = {}, {}
    labs = sorted(ok)
    for lab in labs:
        if tie[lab]:
            rank[lab] = 1
            continue
        better = 0
        for o in labs:
            if o == lab or sign * (scores[o] - scores[lab]) <= 0:
                continue
            iv = interval(o, lab)
            if iv is not None:
                pairs[(o, lab)] = iv
            if iv is not None and not iv.tie:
                better += 1
        rank[lab] = 1 + better
    return {"best": best, "scores": scores, "vs_best": vs_best, "tie": tie, "rank": rank, "excluded": excluded,
            "pairs": pairs}


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties).

    Example:
        >>> spearman([1, 2, 3, 4], [10, 20, 30, 40]), spearman([1, 2, 3], [3, 2, 1])
        (1.0, -1.0)
    """
    return _spearman(np.asarray(x, float), np.asarray(y, float))


def _rank(v: np.ndarray) -> np.ndarray:
    order = np.argsort(v, kind="mergesort")
    ranks = np.empty(len(v))
    ranks[order] = np.arange(1, len(v) + 1)
    for val in np.unique(v):  # average ranks of ties
        m = v == val
        if m.sum() > 1:
            ranks[m] = ranks[m].mean()
    return ranks


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) != len(y) or len(x) < 2:
        raise ValueError(f"spearman needs two sequences of the same length >= 2, got {len(x)} and {len(y)}")
    rx, ry = _rank(x), _rank(y)
    sx, sy = rx.std(), ry.std()
    if sx == 0 or sy == 0:
        return math.nan
    return round(float(((rx - rx.mean()) * (ry - ry.mean())).mean() / (sx * sy)), 12)


def spearman_interval(a: dict[str, list[float]], b: dict[str, list[float]], *, n_boot: int = N_BOOT,
                      confidence: float = CONFIDENCE, seed: int = 0) -> Interval:
    """Spearman's rho between two settings' scheme scores, with a bootstrap over seeds.

    Args:
        a, b: ``scheme -> per-seed scores`` in each setting (the schemes both have, at least 3).

    Returns:
        :class:`Interval` of rho: the estimate from the seed means, the bounds from resampling each scheme's
        seeds with replacement in each setting.
    """
    labs = sorted(set(a) & set(b))
    labs = [s for s in labs if a[s] and b[s]]
    if len(labs) < 3:
        raise ValueError(f"spearman_interval needs at least 3 schemes scored in both settings, got {len(labs)}")
    est = _spearman(np.array([np.mean(a[s]) for s in labs]), np.array([np.mean(b[s]) for s in labs]))
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_boot):
        xa = [np.mean(rng.choice(a[s], size=len(a[s]))) for s in labs]
        xb = [np.mean(rng.choice(b[s], size=len(b[s]))) for s in labs]
        r = _spearman(np.array(xa), np.array(xb))
        if math.isfinite(r):
            out.append(r)
    if not out:
        return Interval(est, math.nan, math.nan)
    alpha = (1.0 - confidence) / 2
    lo, hi = np.quantile(out, [alpha, 1 - alpha])
    return Interval(est, lo, hi)
