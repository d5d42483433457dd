"""Algorithmic tasks checked by greedy decoding: copy, reverse, associative recall, parity.

Every example is a prompt followed by an answer, as one token sequence::

    copy     BOS x1 .. xn SEP | x1 .. xn
    reverse  BOS x1 .. xn SEP | xn .. x1
    recall   BOS k1 v1 .. kn vn SEP kq | vq        (keys distinct; vq is the value after kq)
    parity   BOS b1 .. bn SEP | (b1 + .. + bn) mod 2

The *length* of an example is ``n`` (symbols, pairs or bits). Training draws
``n`` uniformly from ``[min_len, train_len]`` and puts the loss on the answer
tokens only (prompt targets are ``-100``). Evaluation draws a fixed set of
examples of exactly length ``n`` for each evaluation length, the same set for
every scheme and seed, and decodes the answer greedily with the full forward
pass (no teacher forcing): an example counts as solved only when every answer
token is right.

For recall, evaluation at a length ``n > train_len`` always queries a key from
one of the first ``n - train_len`` pairs, which puts the key farther back from
the query than any key was in training. Parity is a control: Transformers are
not expected to solve it out of distribution with any position scheme
(Deletang et al. 2023, https://arxiv.org/abs/2207.02098).
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from relpos.tasks.base import IGNORE, Measurement, ModelFor, Task, greedy_decode, stable_seed

__all__ = ["AlgorithmicTask", "Copy", "Reverse", "Recall", "Parity", "AlgorithmicSource"]


def _check_int(name: str, v, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
    return int(v)


class AlgorithmicTask(Task):
    """Common machinery: sampling, batching, greedy evaluation.

    Args:
        train_len: longest problem length ``L`` seen in training.
        eval_lengths: problem lengths to evaluate (default ``L, 2L, 3L, 4L``).
        min_len: shortest training length.
        n_eval: examples per evaluation length.
        eval_seed: seed of the evaluation examples (shared by every scheme).
        max_eval_tokens: decoding batch budget (rows x tokens).
    """

    kind = "algorithmic"
    #: number of special tokens after the task's own symbols: BOS, SEP, PAD.
    N_SPECIAL: ClassVar[int] = 3

    def __init__(
        self,
        train_len: int = 16,
        eval_lengths: tuple[int, ...] | list[int] | None = None,
        *,
        min_len: int = 1,
        n_eval: int = 128,
        eval_seed: int = 1234,
        max_eval_tokens: int = 32768,
    ) -> None:
        self.train_len = _check_int("train_len", train_len, 1)
        self.min_len = _check_int("min_len", min_len, 1)
        if self.min_len > self.train_len:
            raise ValueError(f"min_len ({min_len}) must be <= train_len ({train_len})")
        if eval_lengths is None:
            eval_lengths = tuple(self.train_len * k for k in (1, 2, 3, 4))
        if isinstance(eval_lengths, (str, bytes)) or not hasattr(eval_lengths, "__iter__"):
            raise TypeError(f"eval_lengths must be a sequence of ints, got {eval_lengths!r}")
        lens = [_check_int("eval_lengths entries", n, 1) for n in eval_lengths]
        if not lens:
            raise ValueError("eval_lengths must not be empty")
        self.eval_lengths = tuple(sorted(set(lens)))
        self.n_eval = _check_int("n_eval", n_eval, 1)
        self.eval_seed = int(eval_seed)
        self.max_eval_tokens = _check_int("max_eval_tokens", max_eval_tokens, 1)

    # ----------------------------------------------------------- vocabulary
    @property
    def n_symbols(self) -> int:
        """Tokens ``0 .. n_symbols-1`` are the task's own symbols."""
        raise NotImplementedError

    @property
    def BOS(self) -> int:
        return self.n_symbols

    @property
    def SEP(self) -> int:
        return self.n_symbols + 1

    @property
    def PAD(self) -> int:
        return self.n_symbols + 2

    @property
    def vocab_size(self) -> int:  # type: ignore[override]
        return self.n_symbols + self.N_SPECIAL

    # -------------------------------------------------------------- shapes
    def prompt_len(self, n: int) -> int:
        raise NotImplementedError

    def answer_len(self, n: int) -> int:
        raise NotImplementedError

    def seq_len(self, eval_len: int) -> int:
        return self.prompt_len(eval_len) + self.answer_len(eval_len) - 1

    def train_seq_len(self) -> int:
        return max(self.seq_len(n) for n in range(self.min_len, self.train_len + 1))

    # ------------------------------------------------------------ examples
    def sample(self, rng: np.random.Generator, n: int, *, evaluation: bool = False) -> tuple[list[int], list[int]]:
        """One example of length ``n``: ``(prompt tokens, answer tokens)``."""
        raise NotImplementedError

    def solve(self, prompt: list[int], n: int) -> list[int]:
        """The correct answer for a prompt (the checker's oracle)."""
        raise NotImplementedError

    def check(self, prompt: list[int], n: int, answer: list[int]) -> bool:
        """Whether ``answer`` is the exact answer to ``prompt``."""
        return list(answer) == self.solve(list(prompt), n)

    def examples(self, n: int, count: int | None = None) -> tuple[Tensor, Tensor]:
        """The fixed evaluation set at length ``n``: ``prompts (E, P)``, ``answers (E, A)``."""
        n = _check_int("n", n, 1)
        count = self.n_eval if count is None else _check_int("count", count, 1)
        rng = np.random.default_rng(stable_seed(self.name, "eval", self.eval_seed, n, self._key()))
        ps, ans = zip(*(self.sample(rng, n, evaluation=True) for _ in range(count)))
        return torch.tensor(ps, dtype=torch.long), torch.tensor(ans, dtype=torch.long)

    def _key(self) -> str:
        return repr(sorted(self.options().items()))

    def train_source(self, batch_size: int, seed: int) -> "AlgorithmicSource":
        return AlgorithmicSource(self, batch_size, seed)

    # ---------------------------------------------------------- evaluation
    def evaluate(self, model_for: ModelFor, *, lengths: tuple[int, ...] | None = None) -> list[Measurement]:
        out = []
        for n in lengths or self.eval_lengths:
            prompts, answers = self.examples(n)
            model = model_for(self.seq_len(n))
            pred = greedy_decode(model, prompts, answers.shape[1], max_tokens=self.max_eval_tokens)
            ok = pred == answers  # (E, A)
            out.append(
                Measurement(
                    "accuracy",
                    n,
                    accuracy=float(ok.all(dim=1).double().mean()),
                    token_accuracy=float(ok.double().mean()),
                    count=int(prompts.shape[0]),
                )
            )
        return out

    def options(self) -> dict:
        return {
            "train_len": self.train_len,
            "eval_lengths": list(self.eval_lengths),
            "min_len": self.min_len,
            "n_eval": self.n_eval,
            "eval_seed": self.eval_seed,
        }


class AlgorithmicSource:
    """Training batches for an :class:`AlgorithmicTask`.

    ``batch(step, micro)`` returns ``x, y`` of shape ``(B, W)`` with
    ``W = task.train_seq_len()``: right-padded with PAD (inputs) and ``-100``
    (targets), the loss only on answer tokens. Deterministic in
    ``(task options, seed, step, micro)``.
    """

    def __init__(self, task: AlgorithmicTask, batch_size: int, seed: int = 0) -> None:
        self.task = task
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.seed = int(seed)
        self.width = task.train_seq_len()

    def batch(self, step: int, micro: int = 0) -> tuple[Tensor, Tensor]:
        t = self.task
        rng = np.random.default_rng(stable_seed(t.name, "train", t._key(), self.seed, step, micro))
        x = np.full((self.batch_size, self.width), t.PAD, dtype=np.int64)
        y = np.full((self.batch_size, self.width), IGNORE, dtype=np.int64)
        for b in range(self.batch_size):
            n = int(rng.integers(t.min_len, t.train_len + 1))
            p, a = t.sample(rng, n)
            seq = p + a
            x[b, : len(seq) - 1] = seq[:-1]
            y[b, len(p) - 1 : len(seq) - 1] = a
        return torch.from_numpy(x), torch.from_numpy(y)


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


class Recall(AlgorithmicTask):
    """Associative recall: after ``n`` key-value pairs and a key, answer its value.

    Args:
        n_keys: key alphabet (default: the longest evaluation length, so that
            every key in a sequence can be distinct).
        n_values: value alphabet.
    """

    name = "recall"

    def __init__(self, train_len: int = 16, eval_lengths=None, *, n_keys: int | None = None, n_values: int = 16, **kw):
        super().__init__(train_len, eval_lengths, **kw)
        longest = max(max(self.eval_lengths), self.train_len)
        self.n_keys = longest if n_keys is None else _check_int("n_keys", n_keys, 1)
        if self.n_keys < longest:
            raise ValueError(f"n_keys ({self.n_keys}) must be >= the longest length ({longest}) so keys can be distinct")
        self.n_values = _check_int("n_values", n_values, 2)

    @property
    def n_symbols(self) -> int:
        return self.n_keys + self.n_values

    def prompt_len(self, n):
        return 2 * n + 3

    def answer_len(self, n):
        return 1

    def sample(self, rng, n, *, evaluation=False):
        keys = rng.choice(self.n_keys, size=n, replace=False)
        vals = rng.integers(0, self.n_values, size=n) + self.n_keys
        if evaluation and n > self.train_len:
            q = int(rng.integers(0, n - self.train_len))
        else:
            q = int(rng.integers(0, n))
        p = [self.BOS]
        for k, v in zip(keys.tolist(), vals.tolist()):
            p += [k, v]
        p += [self.SEP, int(keys[q])]
        return p, self.solve(p, n)

    def solve(self, prompt, n):
        kq = prompt[-1]
        for i in range(n):
            if prompt[1 + 2 * i] == kq:
                return [prompt[2 + 2 * i]]
        raise ValueError("the query key does not occur in the prompt")

    def options(self):
        return {**super().options(), "n_keys": self.n_keys, "n_values": self.n_values}


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

    def sample(self, rng, n, *, evaluation=False):
        bits = rng.integers(0, 2, size=n).tolist()
        p = [self.BOS] + bits + [self.SEP]
        return p, self.solve(p, n)

    def solve(self, prompt, n):
        return [int(sum(prompt[1 : 1 + n]) % 2)]


def chance_accuracy(task: AlgorithmicTask, n: int) -> float:
    """Accuracy of uniform guessing over the answer symbols (for plots)."""
    if isinstance(task, Parity):
        return 0.5
    if isinstance(task, Recall):
        return 1.0 / task.n_values
    return math.pow(1.0 / task.n_symbols, task.answer_len(n))
