"""Training data: the Python standard library as a byte-level corpus, and batch sources.

The corpus needs no download: it is the ``*.py`` source of the standard library of
the running Python (found through :func:`sysconfig.get_paths`), without its test
folders, split into ``"train"``, ``"val"`` and ``"test"`` by a stable hash of each
file's path relative to the standard-library root (:func:`split_of_key`: about 10%
of files go to ``"test"``, 5% to ``"val"``). The same Python always gives the same
bytes. :func:`stdlib_splits` is what the benchmark reads: the same splits with every
span of validation and test text that also occurs in training cut out
(:mod:`relpos.dedup`), and the corpus's identity (content hash, sizes, Python
version).

Batch sources
-------------
:func:`relpos.training.loop.train` reads batches from any object with a method
``batch(step: int, micro: int) -> (x, y)`` returning the *global* micro-batch:
``x (B, N) int64`` token ids and ``y (B, N) int64`` targets, where ``-100`` marks
targets that do not count in the loss. It must be a pure function of
``(step, micro)`` (this is what makes ``--resume`` and multi-process training
exact). Under data-parallel training rank ``r`` of ``W`` takes rows ``r::W``.
:class:`ByteLMSource` is the one for next-byte language modelling.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sysconfig
from pathlib import Path

import torch
from torch import Tensor

__all__ = ["VOCAB_SIZE", "IGNORE_INDEX", "SPLITS", "split_of_key", "is_val_key", "stdlib_root", "stdlib_files",
           "stdlib_corpus", "stdlib_splits", "ByteLMSource", "encode", "decode"]

#: byte-level vocabulary size
VOCAB_SIZE = 256
#: target value that does not count in the loss (as in ``torch.nn.functional.cross_entropy``)
IGNORE_INDEX = -100

_EXCLUDED_PARTS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}
#: the three splits of every relpos corpus: training, validation (early stopping, the fit gate,
#: the learning-rate choice) and test (every reported number)
SPLITS = ("train", "val", "test")
_SPLITS = SPLITS


def _check_split(split: str) -> None:
    if split not in _SPLITS:
        raise ValueError(f"split must be 'train', 'val' or 'test', got {split!r}")


def stdlib_root() -> Path:
    """The standard-library folder of the running Python."""
    return Path(sysconfig.get_paths()["stdlib"])


def split_of_key(key: bytes) -> str:
    """The split rule of every relpos corpus: ``"test"``, ``"val"`` or ``"train"`` for a document's key.

    With ``b`` the first byte of the SHA-1 of the key: ``b < 26`` test (26/256 =
    10.2%), ``26 <= b < 39`` validation (13/256 = 5.1%), the rest training. The key
    is a file's path relative to the corpus root (the built-in corpus, folder
    corpora) or the document's own bytes (:mod:`relpos.corpus` for other forms).
    The test split holds the files of the former validation split (``b < 26``).
    """
    return split_of_sha1(hashlib.sha1(key).digest())


def split_of_sha1(digest: bytes) -> str:
    """:func:`split_of_key` from the key's SHA-1 digest (for a key hashed piece by piece)."""
    b = digest[0]
    return "test" if b < 26 else "val" if b < 39 else "train"


def is_val_key(key: bytes) -> bool:
    """True when a key's document is held out of training (validation or test)."""
    return split_of_key(key) != "train"


def _split_of(rel_posix: str) -> str:
    return split_of_key(rel_posix.encode("utf-8"))


@functools.lru_cache(maxsize=4)
def _files(split: str) -> tuple[Path, ...]:
    root = stdlib_root()
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _EXCLUDED_PARTS]  # prune, do not descend
        for fn in filenames:
            if not fn.endswith(".py"):
                continue
            p = Path(dirpath) / fn
            if not p.is_file():
                continue
            if _split_of(p.relative_to(root).as_posix()) == split:
                out.append(p)
    out.sort(key=lambda q: q.relative_to(root).as_posix())
    return tuple(out)


def stdlib_files(split: str) -> list[Path]:
    """Standard-library source files of one split, sorted by relative path.

    Args:
        split: ``"train"``, ``"val"`` or ``"test"``.

    Returns:
        Absolute paths of ``*.py`` files, excluding any folder named ``test``,
        ``tests``, ``idle_test`` (``idlelib/idle_test``) or ``site-packages``.

    Raises:
        ValueError: unknown split.
    """
    _check_split(split)
    return list(_files(split))


def stdlib_corpus(split: str, max_bytes: int | None = None) -> bytes:
    """The files of :func:`stdlib_files` joined with ``b"\\n\\n"``, truncated to ``max_bytes``.

    Only as many files as needed are read.

    Args:
        split: ``"train"``, ``"val"`` or ``"test"``.
        max_bytes: optional upper bound on the length (>= 1).

    Raises:
        ValueError: unknown split or ``max_bytes < 1``.
    """
    _check_split(split)
    if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1):
        raise ValueError(f"max_bytes must be an int >= 1 or None, got {max_bytes!r}")
    parts: list[bytes] = []
    total = 0
    for p in _files(split):
        if parts:
            parts.append(b"\n\n")
            total += 2
        b = p.read_bytes()
        parts.append(b)
        total += len(b)
        if max_bytes is not None and total >= max_bytes:
            break
    data = b"".join(parts)
    return data if max_bytes is None else data[:max_bytes]


@functools.lru_cache(maxsize=1)
def stdlib_splits() -> dict:
    """The benchmark's built-in corpus: the three splits, leak-free, and their identity (cached per process).

    Validation and test are :func:`stdlib_corpus` of their split with every span
    covered by a :data:`relpos.dedup.WINDOW`-byte substring of the training split cut
    out (:func:`relpos.dedup.remove_leaks`); training is unchanged.

    Returns:
        ``{"train": bytes, "val": bytes, "test": bytes, "identity": dict}``; the
        identity is ``{"name", "python", "sha256", "leak_window", "splits": {split:
        {"documents", "bytes", "bytes_before", "leaked_windows", "removed_bytes"}}}``,
        ``sha256`` over the cleaned bytes of the three splits (its first 16 hex
        digits enter the configuration fingerprint).
    """
    import platform

    import numpy as np

    from relpos.dedup import WINDOW, remove_leaks

    raw = {s: stdlib_corpus(s) for s in _SPLITS}
    for s, b in raw.items():
        if not b:
            raise ValueError(f"the standard-library {s!r} split is empty on this Python ({stdlib_root()})")
    train = np.frombuffer(raw["train"], dtype=np.uint8)
    step = 1 << 22
    cleaned, stats = remove_leaks([np.frombuffer(raw[s], dtype=np.uint8) for s in ("val", "test")],
                                  lambda: (train[i: i + step] for i in range(0, len(train), step)), WINDOW)
    out = {"train": raw["train"], "val": cleaned[0].tobytes(), "test": cleaned[1].tobytes()}
    h = hashlib.sha256(f"relpos-stdlib-corpus:v3:window={WINDOW}".encode())
    for s in _SPLITS:
        h.update(f"|{s}:{len(out[s])}:".encode())
        h.update(out[s])
    per = {"train": {"leaked_windows": 0, "removed": 0}, "val": stats[0], "test": stats[1]}
    out["identity"] = {
        "name": "python-stdlib",
        "python": platform.python_version(),
        "sha256": h.hexdigest(),
        "leak_window": WINDOW,
        "unit": "bytes",
        "splits": {s: {"documents": len(_files(s)), "bytes": len(out[s]), "bytes_before": len(raw[s]),
                       "leaked_windows": int(per[s]["leaked_windows"]), "removed_bytes": int(per[s]["removed"])}
                   for s in _SPLITS},
    }
    return out


def encode(text: str) -> Tensor:
    """UTF-8 bytes of ``text`` as a ``(N,)`` int64 tensor."""
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)


def decode(ids) -> str:
    """Inverse of :func:`encode` (invalid UTF-8 is replaced, never raises)."""
    if isinstance(ids, Tensor):
        ids = ids.tolist()
    return bytes(int(i) & 0xFF for i in ids).decode("utf-8", errors="replace")


class ByteLMSource:
    """Random windows of a byte string for next-byte prediction.

    ``batch(step, micro)`` draws ``batch_size`` window offsets uniformly from a
    ``torch.Generator`` seeded from ``(seed, step, micro)``, so a batch depends on
    nothing else: restarting at any step gives the same data.

    Args:
        data: the corpus (at least ``seq_len + 1`` bytes).
        batch_size: rows per (global) micro-batch ``B``.
        seq_len: tokens per row ``N``.
        seed: data seed.

    Example:
        >>> src = ByteLMSource(b"hello world, hello relpos", batch_size=2, seq_len=4)
        >>> x, y = src.batch(0)
        >>> x.shape, bool((x[:, 1:] == y[:, :-1]).all())
        (torch.Size([2, 4]), True)
    """

    vocab_size = VOCAB_SIZE

    def __init__(self, data: bytes, batch_size: int, seq_len: int, seed: int = 0) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data must be bytes, got {type(data).__name__}")
        for name, v in (("batch_size", batch_size), ("seq_len", seq_len)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {seed!r}")
        if len(data) < seq_len + 1:
            raise ValueError(f"data must hold at least seq_len + 1 = {seq_len + 1} bytes, got {len(data)}")
        self.data = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        self.batch_size = batch_size
        self.seq_len = seq_len
        self.seed = seed

    def _generator(self, step: int, micro: int) -> torch.Generator:
        h = hashlib.sha256(f"relpos-bytes:{self.seed}:{step}:{micro}".encode()).digest()
        return torch.Generator().manual_seed(int.from_bytes(h[:8], "little") & ((1 << 63) - 1))

    def batch(self, step: int, micro: int = 0) -> tuple[Tensor, Tensor]:
        """The micro-batch ``micro`` of optimizer step ``step``.

        Returns:
            ``x, y``: ``(batch_size, seq_len)`` int64 each, ``y[:, t] = x[:, t + 1]``
            continued by the next byte of the corpus.
        """
        for name, v in (("step", step), ("micro", micro)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be an int >= 0, got {v!r}")
        n = self.seq_len
        hi = self.data.numel() - n  # offsets 0 .. len - N - 1 inclusive
        starts = torch.randint(0, hi, (self.batch_size,), generator=self._generator(step, micro))
        idx = starts[:, None] + torch.arange(n + 1)[None]  # (B, N + 1)
        win = self.data[idx].long()
        return win[:, :-1].contiguous(), win[:, 1:].contiguous()
