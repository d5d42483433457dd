"""Training batches from a token file: random windows read with ``os.pread``, never the whole file."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import torch
from torch import Tensor

from relpos.validation import check_int

__all__ = ["TokenLMSource", "FileTokens"]


class TokenLMSource:
    """Random windows of a memory-mapped token file for next-token prediction.

    The batch protocol of :mod:`relpos.data`: ``batch(step, micro)`` is a pure
    function of ``(seed, step, micro)``; offsets are drawn exactly as
    :class:`relpos.data.ByteLMSource` draws them, so on the same bytes both give
    the same batches.

    Args:
        tokens: 1-D integer array or :class:`FileTokens` (anything with ``len`` and contiguous slices).
        batch_size, seq_len, seed: as for ``ByteLMSource``.
        limit: use only the first ``limit`` tokens (None: all).
    """

    def __init__(self, tokens: np.ndarray, batch_size: int, seq_len: int, seed: int = 0, *,
                 vocab_size: int = 256, limit: int | None = None) -> None:
        check_int("batch_size", batch_size, lo=1)
        check_int("seq_len", seq_len, lo=1)
        check_int("seed", seed, lo=0)
        n = len(tokens) if limit is None else min(len(tokens), check_int("limit", limit, lo=1))
        if n < seq_len + 1:
            raise ValueError(f"the training split must hold at least seq_len + 1 = {seq_len + 1} tokens, got {n}")
        self.tokens, self.n = tokens, n
        self.batch_size, self.seq_len, self.seed, self.vocab_size = batch_size, seq_len, seed, vocab_size

    def _generator(self, step: int, micro: int) -> torch.Generator:
        h = hashlib.sha256(f"relpos-bytes:{self.seed}:{step}:{micro}".encode()).digest()
        return torch.Generator().manual_seed(int.from_bytes(h[:8], "little") & ((1 << 63) - 1))

    def batch(self, step: int, micro: int = 0) -> tuple[Tensor, Tensor]:
        """``x, y``: ``(batch_size, seq_len)`` int64 each, ``y[:, t] = x[:, t + 1]``."""
        check_int("step", step, lo=0)
        check_int("micro", micro, lo=0)
        n = self.seq_len
        starts = torch.randint(0, self.n - n, (self.batch_size,), generator=self._generator(step, micro))
        win = np.stack([np.asarray(self.tokens[s: s + n + 1], dtype=np.int64) for s in starts.tolist()])
        win = torch.from_numpy(win)  # (B, N + 1)
        return win[:, :-1].contiguous(), win[:, 1:].contiguous()


class FileTokens:
    """A 1-D token file read with ``os.pread`` per slice: nothing is mapped, so reading random
    windows of a huge file keeps the process's memory flat (a memory map would pull the
    kernel's read-ahead pages into the resident set). Picklable; the file opens lazily."""

    def __init__(self, path: str | os.PathLike, dtype) -> None:
        self.path, self.dtype = str(path), np.dtype(dtype)
        self._n = os.path.getsize(self.path) // self.dtype.itemsize
        self._fd: int | None = None

    def __len__(self) -> int:
        return self._n

    def __getstate__(self) -> dict:
        return {"path": self.path, "dtype": self.dtype, "_n": self._n, "_fd": None}

    def __getitem__(self, sl: slice) -> np.ndarray:
        if not isinstance(sl, slice) or sl.step not in (None, 1):
            raise TypeError("FileTokens supports contiguous slices only")
        a, b, _ = sl.indices(self._n)
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
        k = self.dtype.itemsize
        return np.frombuffer(os.pread(self._fd, max(b - a, 0) * k, a * k), dtype=self.dtype)

    def __del__(self, _close=os.close) -> None:  # os may be gone at interpreter exit: keep a reference
        if getattr(self, "_fd", None) is not None:
            try:
                _close(self._fd)
            except OSError:  # pragma: no cover
                pass
