"""Removing evaluation text that also occurs in training (relpos.dedup)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relpos.dedup import count_leaked, gram_hashes, leaked_starts, remove_leaks


def _naive_leaked(target: bytes, train: bytes, w: int) -> list[bool]:
    grams = {train[i:i + w] for i in range(len(train) - w + 1)}
    return [target[i:i + w] in grams for i in range(len(target) - w + 1)]


def test_gram_hashes_equal_for_equal_substrings():
    a = np.frombuffer(b"abcdefghij-abcdefg", dtype=np.uint8)
    for w in (1, 2, 3, 5, 7):
        h = gram_hashes(a, w)
        assert len(h) == len(a) - w + 1
        assert h[0] == h[11]  # "abc..." occurs twice
        assert len(set(h[:11].tolist())) == 11
    assert len(gram_hashes(a[:3], 5)) == 0
    with pytest.raises(ValueError, match="window"):
        gram_hashes(a, 0)


@settings(max_examples=40, deadline=None)
@given(st.binary(min_size=0, max_size=300), st.binary(min_size=0, max_size=120), st.integers(1, 9),
       st.integers(1, 50))
def test_leaked_starts_match_a_naive_search_streamed_in_pieces(train, target, w, piece):
    tr = np.frombuffer(train, dtype=np.uint8)
    got = leaked_starts([np.frombuffer(target, dtype=np.uint8)], lambda: (tr[i:i + piece] for i in range(0, len(tr), piece)), w)[0]
    assert got.tolist() == _naive_leaked(target, train, w)


def test_a_planted_duplicate_is_removed_and_nothing_else():
    rng = np.random.default_rng(0)
    train = rng.integers(0, 256, 20_000, dtype=np.uint8)
    clean = rng.integers(0, 256, 5_000, dtype=np.uint8)
    planted = train[7_000:7_100]  # 100 bytes of training text inside the evaluation text
    target = np.concatenate([clean[:2_000], planted, clean[2_000:]])
    assert count_leaked(target, train, 64, stride=1) == (100 - 63, len(target) - 63)
    (out,), (stats,) = remove_leaks([target], train, 64)
    assert out.tobytes() == clean.tobytes()  # exactly the planted span is gone
    assert stats["leaked_windows"] == 37 and stats["removed"] == 100 and stats["kept"] == 5_000
    assert count_leaked(out, train, 64, stride=1)[0] == 0


def test_new_junctions_are_checked_again():
    """Cutting a span joins its neighbours; a join that itself occurs in training is cut in a second pass."""
    w = 4
    train = np.frombuffer(b"WXYZ....ABCDEFGH", dtype=np.uint8)
    # "ABCD" leaks; after cutting it, "WX" + "YZ" meet and "WXYZ" occurs in training
    target = np.frombuffer(b"qqqqWXABCDYZrrrr", dtype=np.uint8)
    (out,), (stats,) = remove_leaks([target], train, w)
    assert stats["rounds"] == 2
    assert count_leaked(out, train, w, stride=1)[0] == 0
    assert out.tobytes() == b"qqqqrrrr"
