"""Multi-query associative recall (MQAR), the recall task of the Zoology benchmark.

Arora et al. 2023, "Zoology: Measuring and Improving Recall in Efficient Language
Models", https://arxiv.org/abs/2312.04927.

Format (``n`` key-value pairs, every key queried once, in a random order)::

    BOS k1 v1 k2 v2 .. kn vn SEP | q1 a1 q2 a2 .. qn an

``a_i`` is the value that followed key ``q_i``. Only the values ``a_i`` are
trained and scored; the queries are inputs. The model sees the true earlier
answers (teacher forcing), as in Zoology, so each answer is one content lookup:
find ``q_i`` among the keys and copy the token after it. Exact match counts an
example as solved when all ``n`` answers are right.

The key alphabet ``n_keys`` is a fixed option (default 64), not derived from the
evaluation lengths, so changing the lengths evaluated never changes the training
task; it must be at least the longest length so that keys can be distinct.
Past the training length the key-value section is longer, so queries reach
farther back than in training.

Solving it takes a two-step lookup (a previous-token head that writes each key's
neighbour into it, then a query-key match); ``order="value-key"`` puts the value
first, so the query matches a key token directly and reads the value written
into it. Without positions (NoPE) the previous token must first be found through
the causal mask, a third step. The lookup forms after a plateau whose length
varies by seed. The compare presets train at 4 pairs, value first, queries drawn
with replacement, with a 3-layer model (``n_layers=3``, ``init="fan_in"``) at
batch 256; with 2 layers NoPE never left the plateau, and at 8 pairs or in the
Zoology order RoPE rarely did within the budgets (see ``docs/results.md``).
"""

from __future__ import annotations

import numpy as np

from relpos.tasks.algorithmic import AlgorithmicTask, _check_int

__all__ = ["MQAR", "QUERY_MODES", "PAIR_ORDERS"]

#: ``"each-once"``: every key is queried exactly once, in a random order (the default, as in Zoology);
#: ``"random"``: each query is a key of the prompt drawn with replacement (no answer can be
#: guessed by elimination of the values already asked for).
QUERY_MODES = ("each-once", "random")

#: ``"key-value"``: ``k v`` pairs in the prompt, as in Zoology; ``"value-key"``: ``v k`` pairs (the value
#: comes first), so the query matches a key token directly and the value is one position before it.
PAIR_ORDERS = ("key-value", "value-key")


class MQAR(AlgorithmicTask):
    """Multi-query associative recall.

    Args:
        train_len: most key-value pairs in training.
        eval_lengths: pair counts to evaluate.
        n_keys: key alphabet (fixed; >= the longest length).
        n_values: value alphabet.
        queries: ``"each-once"`` or ``"random"`` (see :data:`QUERY_MODES`).
        order: ``"key-value"`` or ``"value-key"`` pairs in the prompt (see :data:`PAIR_ORDERS`).
        **kw: the options of :class:`~relpos.tasks.algorithmic.AlgorithmicTask`.

    Example:
        >>> t = MQAR(train_len=2, eval_lengths=[2], n_keys=4, n_values=3)
        >>> t.solve([t.BOS, 0, 5, 3, 4, t.SEP, 3, 4, 0, 5], 2)
        [3, 4, 0, 5]
        >>> t.answer_mask(2)
        [False, True, False, True]
    """

    name = "mqar"
    teacher_forced = True

    def __init__(self, train_len: int = 16, eval_lengths=None, *, n_keys: int = 64, n_values: int = 16,
                 queries: str = "each-once", order: str = "key-value", **kw):
        super().__init__(train_len, eval_lengths, **kw)
        if queries not in QUERY_MODES:
            raise ValueError(f"queries must be one of {', '.join(QUERY_MODES)}, got {queries!r}")
        if order not in PAIR_ORDERS:
            raise ValueError(f"order must be one of {', '.join(PAIR_ORDERS)}, got {order!r}")
        self.queries, self.order = queries, order
        longest = max(max(self.eval_lengths), self.train_len)
        self.n_keys = _check_int("n_keys", n_keys, 1)
        if self.n_keys < longest:
            raise ValueError(
                f"n_keys ({self.n_keys}) must be >= the longest length ({longest}) so that keys can be distinct"
            )
        self.n_values = _check_int("n_values", n_values, 2)

    @property
    def n_symbols(self) -> int:
        return self.n_keys + self.n_values

    def prompt_len(self, n: int) -> int:
        return 2 * n + 2

    def answer_len(self, n: int) -> int:
        return 2 * n

    def answer_mask(self, n: int) -> list[bool]:
        return [False, True] * n

    def chance(self, n: int) -> float:
        return (1.0 / self.n_values) ** n

    def sample(self, rng: np.random.Generator, n: int, *, evaluation: bool = False):
        keys = rng.choice(self.n_keys, size=n, replace=False)
        vals = rng.integers(0, self.n_values, size=n) + self.n_keys
        keys, vals = keys.tolist(), vals.tolist()  # Python ints: the pairs are interleaved without numpy
        first, second = (keys, vals) if self.order == "key-value" else (vals, keys)
        p = [self.BOS, *(t for pair in zip(first, second) for t in pair), self.SEP]
        order = rng.permutation(n) if self.queries == "each-once" else rng.integers(0, n, size=n)
        queries = [keys[i] for i in order.tolist()]
        return p, self._answers(p, n, queries)

    def _answers(self, prompt: list[int], n: int, queries: list[int]) -> list[int]:
        k, v = (1, 2) if self.order == "key-value" else (2, 1)
        table = {prompt[k + 2 * i]: prompt[v + 2 * i] for i in range(n)}
        out = []
        for q in queries:
            if q not in table:
                raise ValueError(f"query key {q} does not occur in the prompt")
            out += [q, table[q]]
        return out

    def solve(self, prompt: list[int], n: int) -> list[int]:
        """Answers for a prompt that carries its queries after SEP (``prompt + queries``)."""
        queries = list(prompt[2 * n + 2 :: 2])
        return self._answers(list(prompt[: 2 * n + 2]), n, queries)

    def check(self, prompt: list[int], n: int, answer: list[int]) -> bool:
        answer = list(answer)
        return answer == self._answers(list(prompt), n, answer[0::2])

    def options(self) -> dict:
        out = {**super().options(), "n_keys": self.n_keys, "n_values": self.n_values}
        if self.queries != "each-once":  # the defaults stay out, so earlier fingerprints stay valid
            out["queries"] = self.queries
        if self.order != "key-value":
            out["order"] = self.order
        return out
