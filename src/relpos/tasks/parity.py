"""Parity of a bit string: the control task (Deletang et al. 2023, https://arxiv.org/abs/2207.02098).

Transformers are not expected to solve it out of distribution with any position scheme. Its validation and
test sets are label-balanced at every length (:attr:`AlgorithmicTask.balanced_labels`).

>>> t = Parity(train_len=12, eval_lengths=[12, 24])
>>> t.solve([t.BOS, 1, 0, 1, t.SEP], 3)
[0]
"""

from __future__ import annotations

from relpos.tasks.algorithmic import AlgorithmicTask

__all__ = ["Parity"]


class Parity(AlgorithmicTask):
    """Parity of a bit string: the control task."""

    name = "parity"

    @property
    def n_symbols(self) -> int:
        return 2

    def prompt_len(self, n):
        return n + 2

    def answer_len(self, n):
        return 1

    balanced_labels = True

    def sample(self, rng, n, *, evaluation=False, label=None):
        """Uniform bits; with ``label``, the last bit is set so the parity is ``label`` (uniform over the
        strings of that parity)."""
        bits = rng.integers(0, 2, size=n).tolist()
        if label is not None:
            bits[-1] ^= (sum(bits) + int(label)) % 2
        p = [self.BOS] + bits + [self.SEP]
        return p, self.solve(p, n)

    def solve(self, prompt, n):
        return [int(sum(prompt[1 : 1 + n]) % 2)]

    def chance(self, n: int) -> float:
        return 0.5
