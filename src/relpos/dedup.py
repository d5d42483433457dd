"""Evaluation text that also occurs in the training text: find it and cut it out (exact W-gram overlap).

Splitting a corpus by document does not keep the evaluation text out of the
training text: licence headers, boilerplate and copied code recur across files
(63 of 400 validation windows of 64 bytes of the standard-library corpus occurred
verbatim in its training split). Following the exact-substring deduplication of
Lee et al. 2022 ("Deduplicating Training Data Makes Language Models Better",
https://arxiv.org/abs/2107.06499), :func:`remove_leaks` cuts out of an evaluation
split every span covered by a ``window``-token substring that occurs anywhere in
the training split, then checks the new junctions again until none is left: after
it, **no ``window`` consecutive tokens of the cleaned split occur in training**, so
no evaluation window of ``window`` tokens or more can have been memorised.

Substrings are compared by a 64-bit polynomial hash: two equal substrings always
hash alike, so nothing is missed; a collision can only cut a span that did not need
cutting. The training split is streamed in pieces (:func:`leaked_starts`), so its
size costs time, not memory: memory is about 16 bytes per evaluation token.
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

__all__ = ["WINDOW", "gram_hashes", "leaked_starts", "remove_leaks", "count_leaked"]

#: default window (tokens; bytes for byte-level text): the benchmark's training length
WINDOW = 64

_MIX = np.uint64(0x9E3779B97F4A7C15)
_P = np.uint64(0x100000001B3)
_FILTER_BITS = 24  # a 16 MiB bitmap of the query hashes screens the training hashes before the exact lookup


def gram_hashes(a: np.ndarray, w: int) -> np.ndarray:
    """Hashes of every ``w``-token substring of ``a``: ``(len(a) - w + 1,)`` uint64 (empty if shorter)."""
    a = np.asarray(a)
    n = len(a)
    if w < 1:
        raise ValueError(f"window must be >= 1, got {w}")
    if n < w:
        return np.zeros(0, dtype=np.uint64)
    with np.errstate(over="ignore"):
        cur = a.astype(np.uint64) * _MIX + np.uint64(1)  # hashes of length c = 1
        c, pc = 1, _P
        res, r = None, 0
        k = w
        while True:
            if k & 1:
                if res is None:
                    res, r = cur, c
                else:  # H_{r+c}[i] = H_r[i] * P^c + H_c[i + r]
                    m = n - r - c + 1
                    res, r = res[:m] * pc + cur[r:r + m], r + c
            k >>= 1
            if not k:
                break
            m = n - 2 * c + 1  # H_{2c}[i] = H_c[i] * P^c + H_c[i + c]
            cur, c, pc = cur[:m] * pc + cur[c:c + m], 2 * c, pc * pc
    return np.ascontiguousarray(res)


def _pieces(train) -> Callable[[], Iterable[np.ndarray]]:
    if callable(train):
        return train
    return lambda: [np.asarray(train)]


def leaked_starts(targets: list[np.ndarray], train, w: int = WINDOW) -> list[np.ndarray]:
    """For each target array, a bool mask over its ``w``-gram starts: True where that substring occurs in train.

    Args:
        targets: token arrays (e.g. validation and test splits), each checked on its own.
        train: an array, or a callable returning an iterable of consecutive pieces of it
            (streamed; substrings across piece boundaries are covered).
        w: window in tokens.
    """
    hashes = [gram_hashes(t, w) for t in targets]
    allh = np.concatenate(hashes) if hashes else np.zeros(0, np.uint64)
    found = np.zeros(len(allh), dtype=bool)
    if len(allh):
        q = np.sort(allh)
        q = q[np.concatenate([[True], q[1:] != q[:-1]])]  # unique query hashes, sorted
        shift = np.uint64(64 - _FILTER_BITS)
        bitmap = np.zeros(1 << _FILTER_BITS, dtype=bool)
        bitmap[q >> shift] = True
        cand, carry = [], None
        for piece in _pieces(train)():
            piece = np.asarray(piece)
            seg = piece if carry is None or not len(carry) else np.concatenate([carry, piece.astype(carry.dtype)])
            h = gram_hashes(seg, w)
            h = h[bitmap[h >> shift]]  # cheap screen: most training hashes are no query's
            cand.append(h)
            carry = seg[-(w - 1):] if w > 1 else seg[:0]
        seen = np.isin(q, np.concatenate(cand), kind="sort") if cand else np.zeros(len(q), dtype=bool)
        found = np.isin(allh, q[seen], kind="sort")
    out, at = [], 0
    for h in hashes:
        out.append(found[at: at + len(h)])
        at += len(h)
    return out


def _covered(n: int, starts: np.ndarray, w: int) -> np.ndarray:
    """Bool mask of the ``n`` tokens covered by a window of ``w`` starting at each True of ``starts``."""
    d = np.zeros(n + 1, dtype=np.int32)
    idx = np.flatnonzero(starts)
    np.add.at(d, idx, 1)
    np.add.at(d, idx + w, -1)
    return np.cumsum(d[:n]) > 0


def remove_leaks(targets: list[np.ndarray], train, w: int = WINDOW, *, max_rounds: int = 16):
    """Cut out of each target every span covered by a ``w``-gram of ``train``; repeat on the new junctions.

    Returns:
        ``(cleaned, stats)``: the cleaned arrays, and per target ``{"leaked_windows": number of
        w-gram starts found in train in the first pass, "removed": tokens cut in all,
        "kept": tokens left, "rounds": passes}``.

    Raises:
        RuntimeError: junctions still leak after ``max_rounds`` passes (never seen in practice).
    """
    cur = [np.asarray(t) for t in targets]
    stats = [{"leaked_windows": 0, "removed": 0, "kept": len(t), "rounds": 0} for t in cur]
    for rnd in range(max_rounds):
        masks = leaked_starts(cur, train, w)
        if not any(m.any() for m in masks):
            return cur, stats
        for k, m in enumerate(masks):
            if rnd == 0:
                stats[k]["leaked_windows"] = int(m.sum())
            if m.any():
                cut = _covered(len(cur[k]), m, w)
                cur[k] = cur[k][~cut]
                stats[k]["removed"] += int(cut.sum())
                stats[k]["kept"] = len(cur[k])
                stats[k]["rounds"] = rnd + 1
    raise RuntimeError(f"evaluation text still overlaps the training text after {max_rounds} passes")


def count_leaked(target: np.ndarray, train, w: int = WINDOW, *, stride: int | None = None) -> tuple[int, int]:
    """``(leaked, total)``: windows of ``w`` tokens of ``target`` taken every ``stride`` tokens
    (default ``w``: non-overlapping) that occur verbatim in ``train``."""
    stride = w if stride is None else stride
    m = leaked_starts([target], train, w)[0]
    picked = m[::stride]
    return int(picked.sum()), len(picked)
