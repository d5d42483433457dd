"""Byte-level language modelling of Python's own standard library.

The text is :func:`relpos.data.stdlib_corpus`: every non-test ``*.py`` file of the
running Python's standard library, split into train and validation by a stable
hash of the file path, so every machine has it and every run sees the same bytes.

Three evaluation protocols, all on the validation split:

* ``window``: ``eval_tokens`` bytes of validation text, taken as
  ``eval_tokens / max(eval_lengths)`` chunks spread evenly over the whole
  validation split, each chunk cut into non-overlapping windows of ``eval_len``
  bytes; mean loss over every predicted byte (the first bytes of a window have
  little context, as in the non-overlapping evaluation of Press et al. 2022).
  The same bytes are scored at every length.
* ``position``: the same windows, loss averaged inside ``position_buckets``
  equal-width ranges of positions, which shows *where* in a long window a scheme
  breaks down.
* ``fixed_target``: the loss on the same ``target_len`` final bytes of each of
  ``blocks`` text blocks (spread evenly over the validation split), given
  contexts of each evaluation length that end at those bytes. The targets never change, only how much (and how far back) the
  model may look: if loss falls as the context grows, the scheme uses the extra
  context; if it rises, the new positions hurt more than the context helps.

Losses are in nats; ``bpb`` is bits per byte.
"""

from __future__ import annotations

import functools

import torch

from relpos.tasks.base import IGNORE, Measurement, ModelFor, Task, token_losses

__all__ = ["LanguageModelling", "corpus"]


def _check_int(name: str, v, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
    return v


@functools.lru_cache(maxsize=4)
def corpus(split: str, max_bytes: int | None = None) -> bytes:
    """The standard-library corpus (cached per process)."""
    from relpos.data import stdlib_corpus

    data = stdlib_corpus(split, max_bytes)
    if not data:
        raise ValueError(f"the standard-library {split!r} corpus is empty on this Python")
    return data


class LanguageModelling(Task):
    """Byte-level LM on the standard-library corpus.

    Args:
        train_len: training window in bytes.
        eval_lengths: evaluation windows in bytes (default 1x, 2x, 4x, 8x, 16x ``train_len``).
        eval_tokens: validation bytes scored by the window protocol at each length.
        train_bytes: cap on the training corpus (None: all of it).
        target_len: final bytes scored by the fixed-target protocol (default ``train_len // 2``).
        blocks: text blocks of the fixed-target protocol (default
            ``max(16, eval_tokens // max(eval_lengths))``).
        position_buckets: buckets per window in the position protocol.
        max_eval_tokens: tokens per forward pass at evaluation.
        n_val: windows of ``train_len`` bytes in the in-training validation set
            (the loss that decides early stopping).
    """

    name = "lm"
    kind = "lm"
    vocab_size = 256

    def __init__(
        self,
        train_len: int = 64,
        eval_lengths: tuple[int, ...] | list[int] | None = None,
        *,
        eval_tokens: int = 16384,
        train_bytes: int | None = None,
        target_len: int | None = None,
        blocks: int | None = None,
        position_buckets: int = 16,
        max_eval_tokens: int = 8192,
        n_val: int = 32,
    ) -> None:
        self.train_len = _check_int("train_len", train_len, 2)
        if eval_lengths is None:
            eval_lengths = [self.train_len * f for f in (1, 2, 4, 8, 16)]
        lens = [_check_int("eval_lengths entries", n, 1) for n in eval_lengths]
        if not lens:
            raise ValueError("eval_lengths must not be empty")
        self.eval_lengths = tuple(sorted(set(lens)))
        self.eval_tokens = _check_int("eval_tokens", eval_tokens, 1)
        self.train_bytes = None if train_bytes is None else _check_int("train_bytes", train_bytes, self.train_len + 1)
        self.target_len = max(1, self.train_len // 2) if target_len is None else _check_int("target_len", target_len, 1)
        if self.target_len > min(self.eval_lengths):
            raise ValueError(
                f"target_len ({self.target_len}) must be <= the shortest evaluation length ({min(self.eval_lengths)})"
            )
        longest = max(self.eval_lengths)
        self.blocks = max(16, self.eval_tokens // longest) if blocks is None else _check_int("blocks", blocks, 1)
        self.position_buckets = _check_int("position_buckets", position_buckets, 1)
        self.max_eval_tokens = _check_int("max_eval_tokens", max_eval_tokens, 1)
        self.n_val = _check_int("n_val", n_val, 1)

    def options(self) -> dict:
        return {
            "train_len": self.train_len,
            "eval_lengths": list(self.eval_lengths),
            "eval_tokens": self.eval_tokens,
            "train_bytes": self.train_bytes,
            "target_len": self.target_len,
            "blocks": self.blocks,
            "position_buckets": self.position_buckets,
            "n_val": self.n_val,
        }

    def validation_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``n_val`` windows of ``train_len`` bytes from the validation split: ``x, y`` of shape ``(n_val, L)``."""
        c = self._chunks(self.n_val, self.train_len)  # (n_val, L + 1)
        return c[:, :-1].contiguous(), c[:, 1:].contiguous()

    def train_seq_len(self) -> int:
        return self.train_len

    def seq_len(self, eval_len: int) -> int:
        return eval_len

    def train_source(self, batch_size: int, seed: int):
        from relpos.data import ByteLMSource

        return ByteLMSource(corpus("train", self.train_bytes), batch_size, self.train_len, seed)

    # ---------------------------------------------------------- evaluation
    def _val(self) -> torch.Tensor:
        data = corpus("val", None)
        need = max(self.eval_lengths) + 1
        if len(data) < need:
            # Short corpus (an unusual Python install): repeat it rather than fail.
            data = data * (need // len(data) + 1)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8)

    def _chunks(self, count: int, size: int) -> torch.Tensor:
        """``count`` chunks of ``size + 1`` bytes at evenly spaced offsets of the validation split."""
        d = self._val()
        hi = d.numel() - (size + 1)
        starts = [round(i * hi / max(count - 1, 1)) if count > 1 else hi // 2 for i in range(count)]
        return torch.stack([d[s : s + size + 1] for s in starts]).long()  # (count, size + 1)

    @staticmethod
    def buckets(n: int, k: int) -> list[tuple[int, int]]:
        """``min(k, n)`` contiguous equal-width ranges covering ``[0, n)``."""
        k = min(k, n)
        edges = [round(i * n / k) for i in range(k + 1)]
        return [(edges[i], edges[i + 1]) for i in range(k)]

    def evaluate(self, model_for: ModelFor, *, lengths: tuple[int, ...] | None = None) -> list[Measurement]:
        lengths = tuple(lengths or self.eval_lengths)
        out: list[Measurement] = []
        for n in lengths:
            out += self.evaluate_windows(model_for(n), n)
        out += self.evaluate_fixed_target(model_for, lengths)
        return out

    def evaluate_windows(self, model, n: int) -> list[Measurement]:
        """Window and position-bucket protocols at length ``n``."""
        longest = max(self.eval_lengths)
        per = max(1, longest // n)  # windows per chunk
        chunks = self._chunks(max(1, self.eval_tokens // longest), per * n)
        x = chunks[:, :-1].reshape(-1, n)  # (W, n): consecutive windows of each chunk
        y = chunks[:, 1:].reshape(-1, n)
        loss = token_losses(model, x, y, max_tokens=self.max_eval_tokens)  # (W, n)
        out = [Measurement.from_loss("window", n, loss.mean().item(), loss.numel())]
        for a, b in self.buckets(n, self.position_buckets):
            seg = loss[:, a:b]
            out.append(Measurement.from_loss("position", n, seg.mean().item(), seg.numel(), bucket_start=a, bucket_end=b))
        return out

    def evaluate_fixed_target(self, model_for: ModelFor, lengths: tuple[int, ...]) -> list[Measurement]:
        """Loss on fixed final bytes given each context length in ``lengths``."""
        longest = max(self.eval_lengths)
        T = self.target_len
        blocks = self._chunks(self.blocks, longest)  # (K, longest + 1); targets: the last T bytes
        out = []
        for c in lengths:
            if c < T:
                continue
            x = blocks[:, longest - c : longest].clone()  # (K, c)
            y = blocks[:, longest - c + 1 : longest + 1].clone()
            y[:, : c - T] = IGNORE
            loss = token_losses(model_for(c), x, y, max_tokens=self.max_eval_tokens)[:, c - T :]
            out.append(Measurement.from_loss("fixed_target", c, loss.mean().item(), loss.numel()))
        return out
