"""The copy family and reverse: copy, copy-distinct, copy-hints, reverse (see :mod:`relpos.tasks.algorithmic`).

Copy and reverse test whether a model can find the i-th symbol of a string by its position; copy-distinct
and copy-hints (Zhou et al. 2024, https://arxiv.org/abs/2402.09371) make that lookup possible by content.

>>> t = Copy(train_len=8, alphabet=8)
>>> p, a = t.sample(np.random.default_rng(0), 3)
>>> a == p[1:4]
True
"""

from __future__ import annotations

import math

import numpy as np

from relpos.tasks.algorithmic import AlgorithmicTask, _check_int

__all__ = ["Copy", "CopyDistinct", "CopyHints", "Reverse"]


class _StringTask(AlgorithmicTask):
    """Copy-like tasks over an alphabet of ``alphabet`` symbols.

    Args:
        alphabet: number of symbols.
        distinct: draw each string without repeated symbols (then a token's
            successor identifies the next one, so content-based "induction"
            copying works at any length; needs ``alphabet >= longest length``).
    """

    def __init__(self, train_len: int = 16, eval_lengths=None, *, alphabet: int = 16, distinct: bool = False,
                 **kw) -> None:
        self.alphabet = _check_int("alphabet", alphabet, 2)
        if not isinstance(distinct, bool):
            raise TypeError(f"distinct must be a bool, got {distinct!r}")
        self.distinct = distinct
        super().__init__(train_len, eval_lengths, **kw)
        longest = max(max(self.eval_lengths), self.train_len)
        if distinct and self.alphabet < longest:
            raise ValueError(f"with distinct=True, alphabet ({self.alphabet}) must be >= the longest length ({longest})")

    @property
    def n_symbols(self) -> int:
        return self.alphabet

    def prompt_len(self, n: int) -> int:
        return n + 2

    def answer_len(self, n: int) -> int:
        return n

    def sample(self, rng, n, *, evaluation=False):
        if self.distinct:
            s = rng.choice(self.alphabet, size=n, replace=False).tolist()
        else:
            s = rng.integers(0, self.alphabet, size=n).tolist()
        p = [self.BOS] + s + [self.SEP]
        return p, self.solve(p, n)

    def options(self) -> dict:
        return {**super().options(), "alphabet": self.alphabet, "distinct": self.distinct}


class Copy(_StringTask):
    """Repeat the string."""

    name = "copy"

    def solve(self, prompt, n):
        return list(prompt[1 : 1 + n])


class Reverse(_StringTask):
    """Write the string backwards."""

    name = "reverse"

    def solve(self, prompt, n):
        return list(prompt[1 : 1 + n])[::-1]


class CopyDistinct(Copy):
    """Copy a string of distinct symbols from a larger alphabet (default 64).

    Each symbol occurs once, so the next answer token is the prompt token that
    follows the one just written: copying can be solved by content (an
    "induction" lookup) at any length, with no need to count positions.
    """

    name = "copy-distinct"

    def __init__(self, train_len: int = 16, eval_lengths=None, *, alphabet: int = 64, distinct: bool = True, **kw):
        if distinct is not True:
            raise ValueError("copy-distinct always draws distinct symbols (distinct must be True)")
        super().__init__(train_len, eval_lengths, alphabet=alphabet, distinct=True, **kw)


class CopyHints(AlgorithmicTask):
    """Copy with index hints (Zhou et al. 2024, https://arxiv.org/abs/2402.09371).

    Every symbol is preceded by a hint token; the hints of an example are a
    sorted random subset of ``n_hints`` hint tokens (so every hint is seen in
    training, whatever the length). The answer repeats hints and symbols, so
    each answer token is found by content: the symbol after a hint, or the hint
    two tokens after the previous one.

    Args:
        alphabet: symbols to copy.
        n_hints: hint tokens (>= the longest length).
    """

    name = "copy-hints"

    def __init__(self, train_len: int = 16, eval_lengths=None, *, alphabet: int = 8, n_hints: int = 64, **kw):
        self.alphabet = _check_int("alphabet", alphabet, 2)
        self.n_hints = _check_int("n_hints", n_hints, 1)
        super().__init__(train_len, eval_lengths, **kw)
        longest = max(max(self.eval_lengths), self.train_len)
        if self.n_hints < longest:
            raise ValueError(f"n_hints ({self.n_hints}) must be >= the longest length ({longest})")

    @property
    def n_symbols(self) -> int:
        return self.alphabet + self.n_hints

    def prompt_len(self, n):
        return 2 * n + 2

    def answer_len(self, n):
        return 2 * n

    def sample(self, rng, n, *, evaluation=False):
        hints = np.sort(rng.choice(self.n_hints, size=n, replace=False)) + self.alphabet
        syms = rng.integers(0, self.alphabet, size=n)
        body = np.stack([hints, syms], axis=1).reshape(-1).tolist()
        p = [self.BOS] + body + [self.SEP]
        return p, self.solve(p, n)

    def solve(self, prompt, n):
        return list(prompt[1 : 1 + 2 * n])

    def chance(self, n: int) -> float:
        return math.pow(1.0 / self.alphabet, n)

    def options(self) -> dict:
        return {**super().options(), "alphabet": self.alphabet, "n_hints": self.n_hints}
