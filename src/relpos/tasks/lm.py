"""Byte-level language modelling of Python's own standard library.

The text is :func:`relpos.data.stdlib_splits`: every non-test ``*.py`` file of the
running Python's standard library, split by document into train, validation and
test by a stable hash of the file path (:func:`relpos.data.split_of_key`), with
every span of validation and test text that also occurs in training (a 64-byte
substring, :mod:`relpos.dedup`) cut out. Early stopping, the fit gate and the
learning-rate choice read **validation** (:meth:`LanguageModelling.validation_batch`);
every reported number reads **test**. :meth:`LanguageModelling.corpus_identity`
names the text (content hash, sizes, leak counts, Python version).

Three evaluation protocols, all on the test split:

* ``window``: ``eval_tokens`` bytes of test text, taken as
  ``eval_tokens / max(eval_lengths)`` chunks spread evenly over the whole
  split, each chunk cut into non-overlapping windows of ``eval_len``
  bytes; mean loss over every predicted byte (the first bytes of a window have
  little context, as in the non-overlapping evaluation of Press et al. 2022).
  The same bytes are scored at every length. With ``eval_stride = S`` the window
  number is instead the *sliding-window* evaluation of Press et al. (2022,
  https://arxiv.org/abs/2108.12409): windows of ``eval_len`` bytes advance by
  ``S`` and score only their last ``S`` bytes, so every scored byte has at least
  ``eval_len - S`` bytes of context (cost: about ``eval_len / S`` times the
  non-overlapping pass at each length longer than ``S``). ``per_example`` holds
  the mean loss of each window of ``eval_len`` scored bytes, in a fixed order.
* ``position``: the non-overlapping windows, loss averaged inside
  ``position_buckets`` equal-width ranges of positions, which shows *where* in a
  long window a scheme breaks down. :func:`far_loss` reads the last quarter of a
  window from them: the far-position ratio compares that quarter at the longest
  length with the same relative positions at the training length.
* ``fixed_target``: the loss on the same ``target_len`` final bytes of each of
  ``blocks`` text blocks (spread evenly over the test split), given
  contexts of each evaluation length that end at those bytes. The targets never change, only how much (and how far back) the
  model may look: if loss falls as the context grows, the scheme uses the extra
  context; if it rises, the new positions hurt more than the context helps.

Losses are in nats; ``bpb`` is bits per byte.
"""

from __future__ import annotations

import functools

import torch

from relpos.tasks.base import IGNORE, Measurement, ModelFor, Task, token_losses

__all__ = ["LanguageModelling", "corpus", "corpus_mismatch", "far_loss", "FAR_FRACTION"]

#: the far positions of a window: its last quarter (the far-position ratio, :func:`far_loss`)
FAR_FRACTION = 0.25


def _check_int(name: str, v, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
    return v


@functools.lru_cache(maxsize=4)
def corpus(split: str, max_bytes: int | None = None) -> bytes:
    """A split of the built-in corpus (:func:`relpos.data.stdlib_splits`), cut to ``max_bytes`` (cached per process)."""
    from relpos.data import _check_split, stdlib_splits

    _check_split(split)
    data = stdlib_splits()[split]
    return data if max_bytes is None else data[:max_bytes]


def far_loss(rows, eval_len: int, fraction: float = FAR_FRACTION, field: str = "loss") -> float | None:
    """Mean ``field`` over the last ``fraction`` of a window of ``eval_len`` tokens, from position-bucket rows.

    ``rows``: dicts (or :class:`Measurement` s) with ``eval_len``, ``bucket_start``,
    ``bucket_end`` and ``field``; each bucket counts with the width it shares with
    positions ``[round((1 - fraction) * eval_len), eval_len)`` (with the default 16
    buckets, exactly the last 4). None when no such bucket has a value.
    """
    lo = round((1 - fraction) * eval_len)
    num = den = 0.0
    for r in rows:
        g = r.get if isinstance(r, dict) else lambda k, d=None, r=r: getattr(r, k, d)
        if g("eval_len") != eval_len or g("bucket_start", -1) < 0 or g(field) is None:
            continue
        w = g("bucket_end") - max(g("bucket_start"), lo)
        if w <= 0:
            continue
        num += w * float(g(field))
        den += w
    return num / den if den else None


def corpus_mismatch(old_protocol: dict | None, new_protocol: dict | None) -> str | None:
    """``"made from corpus <sha> (...); this configuration reads corpus <sha> (...)"`` when two fingerprinted
    protocols (``ExperimentConfig.protocol()``) record language-modelling corpora with different content
    hashes; None otherwise (same corpus, or a protocol without a corpus hash)."""

    def ident(p):
        c = (((p or {}).get("tasks") or {}).get("lm") or {}).get("corpus") if isinstance(p, dict) else None
        return c if isinstance(c, dict) and c.get("sha256") else None

    a, b = ident(old_protocol), ident(new_protocol)
    if a is None or b is None or a["sha256"] == b["sha256"]:
        return None

    def name(c):
        return c.get("name") or c.get("kind") or "a corpus"

    return (f"made from corpus sha256 {a['sha256'][:16]} ({name(a)}); this configuration reads corpus sha256 "
            f"{b['sha256'][:16]} ({name(b)})")


class LanguageModelling(Task):
    """Byte-level LM on the standard-library corpus.

    Args:
        train_len: training window in bytes.
        eval_lengths: evaluation windows in bytes (default 1x, 2x, 4x, 8x, 16x ``train_len``).
        eval_tokens: test bytes scored by the window protocol at each length.
        train_bytes: cap on the training corpus (None: all of it).
        target_len: final bytes scored by the fixed-target protocol (default ``train_len // 2``).
        blocks: text blocks of the fixed-target protocol (default
            ``max(16, eval_tokens // max(eval_lengths))``).
        position_buckets: buckets per window in the position protocol.
        max_eval_tokens: tokens per forward pass at evaluation.
        n_val: windows of ``train_len`` bytes in the in-training validation set
            (the loss that decides early stopping), from the validation split.
        eval_stride: None for non-overlapping windows; an int ``S`` for the
            sliding-window evaluation of the window protocol at every length longer
            than ``S`` (see the module docstring).
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
        eval_stride: int | None = None,
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
        self.eval_stride = None if eval_stride is None else _check_int("eval_stride", eval_stride, 1)
        if self.eval_stride is not None and longest % self.eval_stride:
            raise ValueError(f"eval_stride ({self.eval_stride}) must divide the longest evaluation length ({longest})")
        if self.eval_stride is not None:
            for n in self.eval_lengths:
                if n > self.eval_stride and (longest // n * n) % self.eval_stride:
                    raise ValueError(f"eval_stride ({self.eval_stride}) must divide {longest // n * n}, the bytes "
                                     f"scored per chunk at evaluation length {n}")

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
            **({"eval_stride": self.eval_stride} if self.eval_stride is not None else {}),
            "corpus": self.corpus_key(),
        }

    # ----------------------------------------------------------------- corpus
    def corpus_identity(self) -> dict:
        """The text's identity: name, content ``sha256``, ``leak_window``, per-split documents, bytes
        (before and after removing leaked spans) and leaked windows, and the Python version."""
        from relpos.data import stdlib_splits

        return stdlib_splits()["identity"]

    def corpus_key(self) -> dict:
        """What of :meth:`corpus_identity` enters the configuration fingerprint: the content hash."""
        ident = self.corpus_identity()
        return {"name": ident["name"], "sha256": ident["sha256"], "leak_window": ident["leak_window"]}

    def _text(self, split: str) -> torch.Tensor:
        """A split as a 1-D uint8 tensor (``"val"``: validation, ``"test"``: reported numbers)."""
        return torch.frombuffer(bytearray(corpus(split, None)), dtype=torch.uint8)

    def validation_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``n_val`` windows of ``train_len`` bytes from the *validation* split: ``x, y`` of shape ``(n_val, L)``."""
        c = self._chunks(self.n_val, self.train_len, split="val")  # (n_val, L + 1)
        return c[:, :-1].contiguous(), c[:, 1:].contiguous()

    def train_seq_len(self) -> int:
        return self.train_len

    def seq_len(self, eval_len: int) -> int:
        return eval_len

    def train_source(self, batch_size: int, seed: int):
        from relpos.data import ByteLMSource

        return ByteLMSource(corpus("train", self.train_bytes), batch_size, self.train_len, seed)

    # ---------------------------------------------------------- evaluation
    def _chunks(self, count: int, size: int, *, split: str = "test", before: int = 0) -> torch.Tensor:
        """``count`` chunks of ``before + size + 1`` tokens at evenly spaced offsets of a split.

        Raises:
            ValueError: the split is shorter than one chunk.
        """
        d = self._text(split)
        need = before + size + 1
        if d.numel() < need:
            raise ValueError(f"the {split!r} split holds {d.numel()} tokens; the evaluation needs chunks of {need}")
        hi = d.numel() - need
        starts = [round(i * hi / max(count - 1, 1)) if count > 1 else hi // 2 for i in range(count)]
        return torch.stack([d[s: s + need] for s in starts]).long()  # (count, before + size + 1)

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
        """Window and position-bucket protocols at length ``n`` (test split)."""
        longest = max(self.eval_lengths)
        count = max(1, self.eval_tokens // longest)
        S = self.eval_stride
        sliding = S is not None and S < n and n <= longest
        pad = longest  # context before each chunk (sliding windows read it): the same bytes with or without
        per = max(1, longest // n)  # windows per chunk
        chunks = self._chunks(count, per * n, before=pad)  # (count, pad + per * n + 1)
        x = chunks[:, pad:-1].reshape(-1, n)  # (W, n): consecutive windows of each chunk
        y = chunks[:, pad + 1:].reshape(-1, n)
        loss = token_losses(model, x, y, max_tokens=self.max_eval_tokens)  # (W, n)
        win = self._sliding(model, chunks, pad, n, per * n).reshape(-1, n) if sliding else loss  # (W, n)
        per_ex = [round(v, 6) for v in win.mean(1).tolist()]
        out = [Measurement.from_loss("window", n, win.mean().item(), win.numel(), per_example=per_ex)]
        far = round((1 - FAR_FRACTION) * n)
        for a, b in self.buckets(n, self.position_buckets):
            seg = loss[:, a:b]
            # the far buckets carry each window's mean too (a paired bootstrap of the far-position ratio)
            pe = [round(v, 6) for v in seg.mean(1).tolist()] if a >= far else None
            out.append(Measurement.from_loss("position", n, seg.mean().item(), seg.numel(), bucket_start=a,
                                             bucket_end=b, per_example=pe))
        return out

    def _sliding(self, model, chunks: torch.Tensor, pad: int, n: int, span: int) -> torch.Tensor:
        """Losses ``(count, span)`` of the targets ``chunks[:, pad + 1 : pad + span + 1]``, each predicted by a
        window of ``n`` tokens that ends at it in steps of ``eval_stride`` (every target has >= ``n - S`` context)."""
        S = self.eval_stride
        xs, ys = [], []
        for k in range(span // S):
            a = pad + k * S - (n - S)  # window [a, a + n); scores its last S tokens
            xs.append(chunks[:, a: a + n])
            y = chunks[:, a + 1: a + n + 1].clone()
            y[:, : n - S] = IGNORE
            ys.append(y)
        x = torch.stack(xs, 1).reshape(-1, n)  # (count * K, n)
        y = torch.stack(ys, 1).reshape(-1, n)
        loss = token_losses(model, x, y, max_tokens=self.max_eval_tokens)[:, n - S:]  # (count * K, S)
        return loss.reshape(chunks.shape[0], span)

    def evaluate_fixed_target(self, model_for: ModelFor, lengths: tuple[int, ...]) -> list[Measurement]:
        """Loss on fixed final bytes given each context length in ``lengths``."""
        longest = max(self.eval_lengths)
        T = self.target_len
        blocks = self._chunks(self.blocks, longest)  # (K, longest + 1); targets: the last T bytes
        out = []
        for c in lengths:
            if c < T:
                continue
            x = blocks[:, longest - c: longest].clone()  # (K, c)
            y = blocks[:, longest - c + 1: longest + 1].clone()
            y[:, : c - T] = IGNORE
            loss = token_losses(model_for(c), x, y, max_tokens=self.max_eval_tokens)[:, c - T:]
            out.append(Measurement.from_loss("fixed_target", c, loss.mean().item(), loss.numel(),
                                             per_example=[round(v, 6) for v in loss.mean(1).tolist()]))
        return out
