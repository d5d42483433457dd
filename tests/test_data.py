"""The embedded corpus (Python standard library) and the byte-level batch source."""

from __future__ import annotations

import pytest
import torch

from relpos import data


def test_stdlib_files_split_is_disjoint_sorted_and_excludes_tests():
    root = data.stdlib_root()
    train, val, test = data.stdlib_files("train"), data.stdlib_files("val"), data.stdlib_files("test")
    assert len(train) > 100 and len(val) > 10 and len(test) > 10
    assert not set(train) & set(val) and not set(train) & set(test) and not set(val) & set(test)
    for files in (train, val, test):
        rel = [p.relative_to(root).as_posix() for p in files]
        assert rel == sorted(rel)
        for r in rel:
            parts = r.split("/")[:-1]
            assert not {"test", "tests", "idle_test", "site-packages"} & set(parts), r
            assert r.endswith(".py")
    frac = len(val) / (len(train) + len(val) + len(test))
    assert 0.02 < frac < 0.1  # ~5% by construction
    frac = len(test) / (len(train) + len(val) + len(test))
    assert 0.04 < frac < 0.2  # ~10% by construction
    assert data.stdlib_files("train") == train  # stable


def test_stdlib_corpus_join_and_truncation():
    files = data.stdlib_files("val")
    head = files[0].read_bytes() + b"\n\n" + files[1].read_bytes()
    c = data.stdlib_corpus("val", max_bytes=len(head))
    assert c == head
    assert data.stdlib_corpus("val", max_bytes=10) == head[:10]
    assert data.stdlib_corpus("val", max_bytes=5000) == data.stdlib_corpus("val", max_bytes=5000)


@pytest.mark.parametrize("bad", [{"split": "dev"}, {"split": "val", "max_bytes": 0}, {"split": "val", "max_bytes": 1.5}])
def test_corpus_bad_input(bad):
    with pytest.raises(ValueError, match="split|max_bytes"):
        data.stdlib_corpus(**bad)


def test_byte_source_shapes_shift_and_determinism():
    corpus = bytes(range(256)) * 4
    src = data.ByteLMSource(corpus, batch_size=3, seq_len=10, seed=5)
    x, y = src.batch(7, 1)
    assert x.shape == y.shape == (3, 10) and x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    buf = torch.tensor(list(corpus))
    for row_x, row_y in zip(x, y):  # each row is a real window of the corpus
        s = int(row_x[0])
        cand = [i for i in range(len(corpus) - 10) if int(buf[i]) == s and torch.equal(buf[i:i + 10], row_x)]
        assert cand and torch.equal(buf[cand[0] + 1: cand[0] + 11], row_y)
    x2, y2 = data.ByteLMSource(corpus, 3, 10, seed=5).batch(7, 1)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert not torch.equal(x, src.batch(7, 0)[0])
    assert not torch.equal(x, src.batch(8, 1)[0])
    assert not torch.equal(x, data.ByteLMSource(corpus, 3, 10, seed=6).batch(7, 1)[0])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"data": b"abc", "batch_size": 1, "seq_len": 3}, "seq_len \\+ 1"),
        ({"data": b"abcdef", "batch_size": 0, "seq_len": 2}, "batch_size"),
        ({"data": b"abcdef", "batch_size": 1, "seq_len": 0}, "seq_len"),
        ({"data": "text", "batch_size": 1, "seq_len": 2}, "bytes"),
    ],
)
def test_byte_source_bad_input(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        data.ByteLMSource(**kwargs)


def test_byte_source_bad_step():
    src = data.ByteLMSource(b"abcdefgh", 1, 2)
    with pytest.raises(ValueError, match="step"):
        src.batch(-1)


def test_encode_decode_round_trip():
    s = "def f(x):\n    return 'é' + x"
    ids = data.encode(s)
    assert ids.dtype == torch.int64 and int(ids.max()) < data.VOCAB_SIZE
    assert data.decode(ids) == s
    assert data.decode([0xFF, 0x41]) == "\ufffdA"  # invalid UTF-8 never raises


def test_split_rule_is_one_function():
    import hashlib

    keys = [f"pkg/mod{i}.py" for i in range(400)]
    test = [k for k in keys if data.split_of_key(k.encode()) == "test"]
    val = [k for k in keys if data.split_of_key(k.encode()) == "val"]
    assert test == [k for k in keys if hashlib.sha1(k.encode()).digest()[0] < 26]
    assert val == [k for k in keys if 26 <= hashlib.sha1(k.encode()).digest()[0] < 39]
    assert 0.05 < len(test) / len(keys) < 0.16 and 0.02 < len(val) / len(keys) < 0.09
    root = data.stdlib_root()
    for s in ("val", "test"):
        for p in data.stdlib_files(s)[:20]:
            assert data.split_of_key(p.relative_to(root).as_posix().encode()) == s


def test_builtin_splits_are_leak_free_and_identified():
    """No 64-byte window of validation or test text occurs in training; the identity names what was removed."""
    import numpy as np

    from relpos.dedup import WINDOW, count_leaked

    sp = data.stdlib_splits()
    ident = sp["identity"]
    train = np.frombuffer(sp["train"], dtype=np.uint8)
    for s in ("val", "test"):
        raw = data.stdlib_corpus(s)
        leaked, total = count_leaked(np.frombuffer(raw, dtype=np.uint8), train, WINDOW, stride=1)
        assert leaked > 0  # the standard library repeats licence headers and boilerplate across files
        assert count_leaked(np.frombuffer(sp[s], dtype=np.uint8), train, WINDOW, stride=1) == (0, len(sp[s]) - 63)
        st = ident["splits"][s]
        assert st["leaked_windows"] == leaked and st["bytes_before"] == len(raw)
        assert st["bytes"] == len(sp[s]) == len(raw) - st["removed_bytes"] and st["removed_bytes"] >= WINDOW
        assert st["documents"] == len(data.stdlib_files(s))
    assert ident["splits"]["train"]["bytes"] == len(sp["train"]) == len(data.stdlib_corpus("train"))
    assert ident["leak_window"] == WINDOW == 64 and len(ident["sha256"]) == 64 and ident["python"]
