"""Keep freed memory in the process: glibc's ``mallopt`` for the processes that relpos runs its training in.

A compare job trains one small model per worker process. With glibc's default (dynamic) thresholds, many of a
training step's activation buffers, a few MB each at the full preset's shapes, go back to the kernel when they
are freed and come back as fresh zeroed pages on the next step: at the full preset's copy shapes (64 x 33) a
worker made 500-2,500 minor page faults per step, 1-4 ms of kernel time on a 30-50 ms step, most for the
schemes whose attention forms its logits (Shaw, Transformer-XL). Raising the mmap threshold to 32 MB and the
trim threshold to 512 MB keeps those buffers in the heap: the faults went to about 5 per step
(``benchmarks/malloc_faults.py``).

Where it applies: :func:`relpos.compare.job.run_job` and the ``train`` and ``extend`` commands call
:func:`keep_freed_memory` in their own processes; importing relpos changes nothing. It changes where memory comes
from, never a number: trained parameters were bitwise identical with and without it (11 schemes, 120 steps at
the full preset's MQAR and reverse shapes). A process that set its own malloc options (``GLIBC_TUNABLES`` with
a ``malloc`` tunable, or ``MALLOC_*_`` variables) keeps them, and ``RELPOS_MALLOC_DEFAULTS=1`` keeps glibc's
defaults. Other C libraries (macOS, musl) have no ``mallopt``; there it does nothing and returns why.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["keep_freed_memory", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

#: Allocations up to this size come from the heap (glibc's own ceiling for its dynamic threshold).
MMAP_THRESHOLD = 32 << 20
#: Free memory at the top of the heap up to this size is kept, not returned to the kernel.
TRIM_THRESHOLD = 512 << 20

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
_STATE: str | None = None


def _user_set() -> bool:
    if "malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return True
    return any(k.startswith("MALLOC_") and k.endswith("_") for k in os.environ)


def keep_freed_memory() -> str:
    """Set glibc's mmap and trim thresholds for this process (once); returns what was done.

    Returns:
        ``"set"`` (done, now or earlier), ``"kept: ..."`` (the user's or glibc's settings left as they are, and
        why) or ``"unavailable: ..."`` (a C library without ``mallopt``).

    >>> keep_freed_memory() in ("set", "kept: RELPOS_MALLOC_DEFAULTS=1", "kept: the process set its own malloc options",
    ...                         "unavailable: no mallopt in this C library")
    True
    """
    global _STATE
    if _STATE is not None:
        return _STATE
    if os.environ.get("RELPOS_MALLOC_DEFAULTS") == "1":
        _STATE = "kept: RELPOS_MALLOC_DEFAULTS=1"
    elif _user_set():
        _STATE = "kept: the process set its own malloc options"
    else:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
            mallopt = libc.mallopt
        except (OSError, AttributeError):
            mallopt = None
        if mallopt is None:
            _STATE = "unavailable: no mallopt in this C library"
        else:
            mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
            ok = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
            _STATE = "set" if ok else "unavailable: mallopt refused the thresholds"
    return _STATE
