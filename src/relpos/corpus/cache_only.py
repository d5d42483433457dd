"""Read a corpus only if it is already in the cache: for plans (``--dry-run``) that must stay cheap and write nothing.

Inside :func:`cache_only`, :func:`relpos.corpus.load_corpus` of a corpus whose
cache folder exists reads its ``meta.json`` as usual (the exact fingerprint is
known); for one not yet read it raises :class:`CorpusNotCached` instead of
reading, tokenizing and writing the cache. The caller then states what it can
without the corpus (the plan, and that the corpus's fingerprint and size are
settled when the run reads it). Outside the block nothing changes.

Example:
    >>> import tempfile, pathlib
    >>> from relpos.corpus import load_corpus
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "a.txt").write_text("some text\\n" * 100)
    >>> with cache_only():
    ...     try:
    ...         load_corpus(d / "a.txt", cache_dir=d / "cache")
    ...     except CorpusNotCached as e:
    ...         print(e.n_bytes, e.files)
    1000 1
    >>> (d / "cache").exists()
    False
"""

from __future__ import annotations

import contextlib
import contextvars
from pathlib import Path

__all__ = ["CorpusNotCached", "cache_only", "cache_only_active"]

_ACTIVE: contextvars.ContextVar[bool] = contextvars.ContextVar("relpos_corpus_cache_only", default=False)


class CorpusNotCached(Exception):
    """A corpus asked for inside :func:`cache_only` that is not in the cache yet (not a ``ValueError``: the input
    is not bad, only not read yet). ``path``, ``files``, ``n_bytes`` (raw input) and ``cache`` (the folder the
    run would build) say what reading it involves."""

    def __init__(self, path: str, files: list, cache: Path) -> None:
        self.path, self.files, self.cache = str(path), len(files), Path(cache)
        self.n_bytes = sum(int(f[1]) for f in files)
        super().__init__(f"corpus {self.path!r} is not read yet ({self.n_bytes:,} bytes in {self.files} file(s)): "
                         f"a run reads and tokenizes it into {self.cache} first, checks its size and computes its "
                         "fingerprint")


def cache_only_active() -> bool:
    """True inside :func:`cache_only`."""
    return _ACTIVE.get()


@contextlib.contextmanager
def cache_only():
    """A block in which corpora are only read from the cache (:class:`CorpusNotCached` otherwise)."""
    token = _ACTIVE.set(True)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
