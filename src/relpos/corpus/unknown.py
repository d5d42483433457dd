"""Refuse a tokenizer that maps much of a corpus to its unknown token.

A tokenizer whose vocabulary misses the corpus (say a two-word ``WordLevel``
vocabulary) turns most text into ``[UNK]``; a model then predicts ``[UNK]``
easily and reports a tiny, meaningless bits-per-byte. :func:`check_unknown_fraction`
counts the unknown tokens of the tokenized splits and raises when more than
:data:`MAX_UNKNOWN_FRACTION` of them are unknown, naming the fraction.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

__all__ = ["MAX_UNKNOWN_FRACTION", "unknown_token_id", "check_unknown_fraction"]

#: Largest accepted share of unknown tokens in a tokenized corpus.
MAX_UNKNOWN_FRACTION = 0.05


def unknown_token_id(tok) -> int | None:
    """The id of a ``tokenizers.Tokenizer``'s unknown token (None if its model has none)."""
    try:
        model = json.loads(tok.to_str()).get("model") or {}
    except (AttributeError, ValueError, TypeError):
        model = {}
    unk = model.get("unk_token")
    if isinstance(unk, str):
        i = tok.token_to_id(unk)
        if i is not None:
            return int(i)
    uid = model.get("unk_id")
    return int(uid) if isinstance(uid, int) and not isinstance(uid, bool) else None


def check_unknown_fraction(tok, files: list[Path], dtype, *, what: str, limit: float = MAX_UNKNOWN_FRACTION) -> float:
    """The share of unknown tokens over ``files`` (token files of ``dtype``), read 4 Mi tokens at a time.

    Raises:
        ValueError: more than ``limit`` of the tokens are the unknown token.
    """
    uid = unknown_token_id(tok)
    if uid is None:
        return 0.0
    total = unknown = 0
    step = 1 << 22
    for f in files:
        mm = np.memmap(f, dtype=dtype, mode="r") if Path(f).stat().st_size else np.zeros(0, dtype)
        for i in range(0, len(mm), step):
            a = np.asarray(mm[i: i + step])
            total += len(a)
            unknown += int(np.count_nonzero(a == uid))
        del mm
    frac = unknown / total if total else 0.0
    if frac > limit:
        raise ValueError(
            f"--tokenizer {what}: {frac:.1%} of the corpus's {total:,} tokens are its unknown token "
            f"(id {uid}); relpos accepts at most {limit:.0%} -- the tokenizer does not cover this text, and "
            f"the scores would measure how well a model predicts 'unknown'. Use a tokenizer trained on this "
            f"kind of text, or none (bytes)."
        )
    return frac
