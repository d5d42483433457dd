"""Algorithmic tasks checked by exact match: copy (three forms), reverse, multi-query recall, parity.

Every example is a prompt followed by an answer, as one token sequence::

    copy           BOS x1 .. xn SEP | x1 .. xn
    copy-distinct  BOS x1 .. xn SEP | x1 .. xn          (no symbol repeats; a larger alphabet)
    copy-hints     BOS h1 x1 .. hn xn SEP | h1 x1 .. hn xn   (index hints, Zhou et al. 2024)
    reverse        BOS x1 .. xn SEP | xn .. x1
    mqar           BOS k1 v1 .. kn vn SEP | q1 a1 .. qn an   (multi-query associative recall)
    parity         BOS b1 .. bn SEP | (b1 + .. + bn) mod 2

The *length* of an example is ``n`` (symbols, pairs or bits). Training draws
``n`` uniformly from ``[min_len, train_len]`` and puts the loss on the answer
tokens only (prompt targets are ``-100``; in ``mqar`` only the values ``a_i``
count, the queries ``q_i`` are inputs).

**Three disjoint splits.** A stable hash of the prompt assigns every possible example to one split:
a fraction ``holdout`` is held out and never trained on, and the held-out examples are halved again
into a **validation** split (early stopping, the fit gate, the learning-rate choice) and a **test**
split (every reported number). In-distribution evaluation (lengths ``n <= train_len``) draws only from
the test split and the validation set only from the validation split, so no test prompt is a
validation or a training prompt (before protocol 3 both drew from one held-out set: at parity ``n = 12``,
55 of the 256 evaluation prompts were validation prompts). Evaluation at lengths past ``train_len`` uses
any example: training and validation only hold lengths up to ``train_len``. An evaluation set holds
distinct prompts where the split has enough of them.

**Balanced labels.** A task with one answer symbol per example (parity) draws its validation and test
examples with alternating labels, so exactly half of each set (of even size) has each label at every
length: a model that always answers one label scores 0.5, not the label frequency of the draw.

**Scoring.** Copy, reverse and parity are decoded greedily (no teacher forcing):
an example counts as solved only when every answer token is right. ``mqar`` is
scored under teacher forcing at its value positions (its queries are inputs, as
in the Zoology benchmark). For every task, teacher-forced exact match equals
greedy exact match, which is what the fast in-training validation uses.

The tasks themselves: :mod:`relpos.tasks.strings` (copy, copy-distinct, copy-hints, reverse),
:mod:`relpos.tasks.parity` and :mod:`relpos.tasks.mqar`. Parity is a control: Transformers are not expected to solve it out of
distribution with any position scheme (Deletang et al. 2023,
https://arxiv.org/abs/2207.02098).
"""

from __future__ import annotations

import array
import math
import zlib
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from relpos.tasks.base import IGNORE, VALIDATION_TOKENS, Measurement, ModelFor, Task, greedy_decode, stable_seed

__all__ = ["AlgorithmicTask", "AlgorithmicSource", "chance_accuracy", "teacher_forced_correct", "validation_score"]


#: Longest training problem length: the training width is a maximum over every length up to it.
MAX_TRAIN_LEN = 1 << 16


def _check_int(name: str, v, lo: int, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo or (hi is not None and v > hi):
        accepted = f"an int >= {lo}" if hi is None else f"an int in [{lo}, {hi}]"
        raise ValueError(f"{name} must be {accepted}, got {v!r}")
    return int(v)


def _int32_bytes(values: list[int]) -> bytes:
    """``np.asarray(values, dtype=np.int32).tobytes()``, without numpy where C ints are 4 bytes (faster per
    example; the same bytes)."""
    if _C_INT32:
        return array.array("i", values).tobytes()
    return np.asarray(values, dtype=np.int32).tobytes()


_C_INT32 = array.array("i").itemsize == 4 and array.array("i", [1]).tobytes() == np.int32(1).tobytes()


class AlgorithmicTask(Task):
    """Common machinery: sampling, held-out examples, batching, evaluation.

    Args:
        train_len: longest problem length ``L`` seen in training.
        eval_lengths: problem lengths to evaluate (default ``L, 2L, 3L, 4L``).
        min_len: shortest training length.
        n_eval: examples per evaluation length.
        eval_seed: seed of the evaluation examples (shared by every scheme).
        max_eval_tokens: decoding batch budget (rows x tokens).
        holdout: fraction of all examples never trained on, halved into the
            validation and the test split (0 disables it).
        n_val: examples of the in-training validation set (lengths
            ``min_len..train_len``, held-out examples only).
    """

    kind = "algorithmic"
    #: number of special tokens after the task's own symbols: BOS, SEP, PAD.
    N_SPECIAL: ClassVar[int] = 3
    #: score by teacher forcing (the answer holds inputs, e.g. mqar's queries) instead of greedy decoding.
    teacher_forced: ClassVar[bool] = False
    #: rejection-sampling tries before a length whose every example is held out trains anyway.
    _MAX_TRIES: ClassVar[int] = 64

    def __init__(
        self,
        train_len: int = 16,
        eval_lengths: tuple[int, ...] | list[int] | None = None,
        *,
        min_len: int = 1,
        n_eval: int = 128,
        eval_seed: int = 1234,
        max_eval_tokens: int = 32768,
        holdout: float = 0.1,
        n_val: int = 256,
    ) -> None:
        self.train_len = _check_int("train_len", train_len, 1, MAX_TRAIN_LEN)  # bounded before any loop over it
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
        if isinstance(holdout, bool) or not isinstance(holdout, (int, float)) or not 0 <= holdout < 1:
            raise ValueError(f"holdout must be a fraction in [0, 1), got {holdout!r}")
        self.holdout = float(holdout)
        self.n_val = _check_int("n_val", n_val, 1)

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

    def chance(self, n: int) -> float:
        """Exact-match accuracy of guessing every scored answer token uniformly."""
        return math.pow(1.0 / self.n_symbols, sum(self.answer_mask(n)))

    def answer_mask(self, n: int) -> list[bool]:
        """Which answer tokens are scored and trained on (default: all)."""
        return [True] * self.answer_len(n)

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

    def split_of(self, prompt: list[int]) -> str:
        """``"train"``, ``"val"`` or ``"test"``: the split of an example (a stable hash of its prompt)."""
        if self.holdout <= 0:
            return "train"
        h = zlib.crc32(_int32_bytes(prompt))
        if (h % 10_000) >= self.holdout * 10_000:
            return "train"
        return "val" if (h // 10_000) % 2 == 0 else "test"

    def is_held_out(self, prompt: list[int]) -> bool:
        """Whether an example is held out of training (validation or test split)."""
        return self.split_of(prompt) != "train"

    #: answers of a single symbol whose validation and test labels are balanced (parity)
    balanced_labels: ClassVar[bool] = False

    def draw(self, rng: np.random.Generator, n: int, *, held_out: bool | str | None,
             evaluation: bool = False, label: int | None = None) -> tuple[list[int], list[int]]:
        """An example of a split: ``"train"``, ``"val"``, ``"test"``, ``True`` (either held-out split),
        ``False`` (= ``"train"``) or ``None`` (any). ``label``: the answer symbol wanted (tasks with
        :attr:`balanced_labels`).

        Rejection sampling; after ``_MAX_TRIES`` tries (a length so short that
        the wanted split is empty) the last draw is returned as it is.
        """
        kw = {"evaluation": evaluation, **({"label": label} if label is not None else {})}
        p, a = self.sample(rng, n, **kw)
        if held_out is None or self.holdout <= 0:
            return p, a
        want = "train" if held_out is False else held_out
        for _ in range(self._MAX_TRIES):
            got = self.split_of(p)
            if got == want or (want is True and got != "train"):
                break
            p, a = self.sample(rng, n, **kw)
        return p, a

    def _draw_set(self, rng: np.random.Generator, lengths: list[int], split, *, label_offset: int = 0):
        """Examples of the given lengths from one split, distinct prompts where the split allows, labels
        alternating for :attr:`balanced_labels` tasks."""
        seen, out = set(), []
        for i, n in enumerate(lengths):
            label = (i + label_offset) % 2 if self.balanced_labels else None
            first = None
            for _ in range(self._MAX_TRIES):
                p, a = self.draw(rng, n, held_out=split, evaluation=True, label=label)
                if split is not None and self.holdout > 0 and self.split_of(p) != split:
                    continue  # a length so short that the split is (nearly) empty
                first = first or (p, a)
                if tuple(p) not in seen:
                    break
            else:  # no unseen prompt of the split found: repeat its first draw (or take the last one)
                p, a = first or (p, a)
            seen.add(tuple(p))
            out.append((p, a, n))
        return out

    def examples(self, n: int, count: int | None = None) -> tuple[Tensor, Tensor]:
        """The fixed evaluation set at length ``n``: ``prompts (E, P)``, ``answers (E, A)``.

        Lengths up to ``train_len`` draw held-out examples only.
        """
        n = _check_int("n", n, 1)
        count = self.n_eval if count is None else _check_int("count", count, 1)
        rng = np.random.default_rng(stable_seed(self.name, "eval", self.eval_seed, n, self._key()))
        split = "test" if n <= self.train_len else None
        ps, ans, _ = zip(*self._draw_set(rng, [n] * count, split))
        return torch.tensor(ps, dtype=torch.long), torch.tensor(ans, dtype=torch.long)

    def validation_batch(self) -> tuple[Tensor, Tensor]:
        """The in-training validation set: ``n_val`` held-out examples, the first half of length
        ``train_len`` (the hardest in-distribution length, where the fit gate is applied), the rest
        of lengths drawn from ``min_len..train_len``.

        Returns ``x, y`` right-padded as training batches are (targets ``-100``
        except at scored answer tokens), the same for every scheme and seed.
        """
        rng = np.random.default_rng(stable_seed(self.name, "val", self.eval_seed, self._key()))
        width = self.train_seq_len()
        x = np.full((self.n_val, width), self.PAD, dtype=np.int64)
        y = np.full((self.n_val, width), IGNORE, dtype=np.int64)
        lengths = [self.train_len if b < self.n_val_at_l else int(rng.integers(self.min_len, self.train_len + 1))
                   for b in range(self.n_val)]
        for b, (p, a, n) in enumerate(self._draw_set(rng, lengths, "val")):
            self._fill(x[b], y[b], p, a, n)
        return torch.from_numpy(x), torch.from_numpy(y)

    @property
    def n_val_at_l(self) -> int:
        """Rows of :meth:`validation_batch` at exactly ``train_len``."""
        return (self.n_val + 1) // 2

    def _fill(self, xrow: np.ndarray, yrow: np.ndarray, p: list[int], a: list[int], n: int) -> None:
        seq = p + a
        xrow[: len(seq) - 1] = seq[:-1]
        yrow[len(p) - 1 : len(seq) - 1] = [t if scored else IGNORE for t, scored in zip(a, self.answer_mask(n))]

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
            mask = torch.tensor(self.answer_mask(n), dtype=torch.bool)
            if self.teacher_forced:
                ok = teacher_forced_correct(model, prompts, answers, max_tokens=self.max_eval_tokens)
            else:
                pred = greedy_decode(model, prompts, answers.shape[1], max_tokens=self.max_eval_tokens)
                ok = pred == answers  # (E, A)
            ok = ok[:, mask]
            exact = ok.all(dim=1)  # (E,)
            tok = ok.double().mean(dim=1)  # (E,) every example has the same number of scored tokens
            out.append(
                Measurement(
                    "accuracy",
                    n,
                    accuracy=float(exact.double().mean()),
                    token_accuracy=float(ok.double().mean()),
                    count=int(prompts.shape[0]),
                    per_example=[int(v) for v in exact.tolist()],
                    per_example_token=[round(float(v), 6) for v in tok.tolist()],
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
            "holdout": self.holdout,
            "n_val": self.n_val,
        }


@torch.no_grad()
def teacher_forced_correct(model, prompts: Tensor, answers: Tensor, *, max_tokens: int = 32768) -> Tensor:
    """``(E, A)`` bool: whether the model's argmax at each answer position is the answer token,
    given the true prompt and the true earlier answer tokens (one forward pass per chunk)."""
    x = torch.cat([prompts, answers[:, :-1]], dim=1)  # (E, P + A - 1)
    P = prompts.shape[1]
    rows = max(1, max_tokens // max(x.shape[1], 1))
    dev = next((p.device for p in model.parameters()), torch.device("cpu"))
    outs = []
    for s in range(0, x.shape[0], rows):
        logits = model(x[s : s + rows].to(dev))  # (b, N, V)
        outs.append(logits[:, P - 1 :].argmax(-1).cpu())
    return torch.cat(outs, 0) == answers


@torch.no_grad()
def validation_score(model, x: Tensor, y: Tensor, *, max_tokens: int = VALIDATION_TOKENS) -> tuple[float, float]:
    """``(exact match, token accuracy)`` of teacher-forced argmax predictions on a padded batch.

    ``y`` marks scored targets (``-100`` elsewhere). Teacher-forced exact match
    equals greedy exact match: when every answer token is predicted right from
    the true prefix, greedy decoding reproduces that prefix token by token.
    """
    rows = max(1, max_tokens // max(x.shape[1], 1))
    dev = next((p.device for p in model.parameters()), torch.device("cpu"))
    was = model.training
    model.eval()
    try:
        preds = torch.cat([model(x[s : s + rows].to(dev)).argmax(-1).cpu() for s in range(0, x.shape[0], rows)])
    finally:
        model.train(was)
    scored = y != IGNORE
    right = (preds == y) | ~scored
    exact = float(right.all(dim=1).double().mean())
    tok = float(((preds == y) & scored).sum()) / max(int(scored.sum()), 1)
    return exact, tok


class AlgorithmicSource:
    """Training batches for an :class:`AlgorithmicTask`.

    ``batch(step, micro)`` returns ``x, y`` of shape ``(B, W)`` with
    ``W = task.train_seq_len()``: right-padded with PAD (inputs) and ``-100``
    (targets), the loss only on scored answer tokens, never a held-out example.
    Deterministic in ``(task options, seed, step, micro)``.
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
        one_length = t.min_len == t.train_len  # then the draw of n is skipped: it takes no random bits either
        for b in range(self.batch_size):
            n = t.train_len if one_length else int(rng.integers(t.min_len, t.train_len + 1))
            p, a = t.draw(rng, n, held_out=False)
            t._fill(x[b], y[b], p, a, n)
        return torch.from_numpy(x), torch.from_numpy(y)


def chance_accuracy(task: AlgorithmicTask, n: int) -> float:
    """Exact-match accuracy of uniform guessing over the answer symbols (for plots)."""
    return task.chance(n)
