"""Algorithmic tasks: generators, checkers, training batches, greedy evaluation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from relpos.tasks import IGNORE, MQAR, Copy, CopyHints, Parity, Reverse, greedy_decode, make_task, validation_score

#: tasks whose answer follows from the prompt alone (mqar's answer interleaves input queries: tested below)
ALGO = ["copy", "copy-distinct", "copy-hints", "reverse", "parity"]


def _n(task, sep: int) -> int:
    """Problem length from the SEP index (prompts are BOS + per-item tokens + SEP)."""
    return (sep - 1) // (task.prompt_len(1) - 2)


def test_formats_by_hand():
    c = Copy(train_len=4, alphabet=5)
    assert (c.BOS, c.SEP, c.PAD, c.vocab_size) == (5, 6, 7, 8)
    assert c.solve([5, 1, 2, 3, 6], 3) == [1, 2, 3]
    assert Reverse(train_len=4, alphabet=5).solve([5, 1, 2, 3, 6], 3) == [3, 2, 1]
    p = Parity(train_len=4)
    assert p.solve([p.BOS, 1, 0, 1, 1, p.SEP], 4) == [1]
    assert p.solve([p.BOS, 1, 0, 1, 0, p.SEP], 4) == [0]
    h = CopyHints(train_len=2, eval_lengths=[2], alphabet=3, n_hints=4)
    assert h.solve([h.BOS, 3, 1, 5, 0, h.SEP], 2) == [3, 1, 5, 0]


@pytest.mark.parametrize("name", ALGO)
def test_examples_are_consistent_and_fixed(name):
    t = make_task(name, train_len=5, n_eval=20)
    for n in t.eval_lengths:
        P, A = t.examples(n)
        assert P.shape == (20, t.prompt_len(n)) and A.shape == (20, t.answer_len(n))
        assert P.max() < t.vocab_size and P.min() >= 0 and A.max() < t.n_symbols
        for p, a in zip(P.tolist(), A.tolist()):
            assert t.check(p, n, a)
        # the same evaluation set every time (every scheme sees the same examples)
        P2, A2 = make_task(name, train_len=5, n_eval=20).examples(n)
        assert torch.equal(P, P2) and torch.equal(A, A2)
    # different lengths draw different examples
    assert not torch.equal(t.examples(5)[0][:, :4], t.examples(10)[0][:, :4])


@pytest.mark.parametrize("name", ALGO)
def test_training_batches(name):
    t = make_task(name, train_len=6)
    src = t.train_source(batch_size=16, seed=3)
    x, y = src.batch(7)
    assert x.shape == y.shape == (16, t.train_seq_len()) and x.dtype == y.dtype == torch.int64
    assert torch.equal(x, src.batch(7)[0]) and torch.equal(y, src.batch(7)[1])
    assert not torch.equal(x, src.batch(8)[0])
    assert not torch.equal(x, t.train_source(16, seed=4).batch(7)[0])
    for b in range(16):
        row, tgt = x[b].tolist(), y[b].tolist()
        assert row[0] == t.BOS
        sep = row.index(t.SEP)
        n = _n(t, sep)
        assert 1 <= n <= 6
        counted = [i for i, v in enumerate(tgt) if v != IGNORE]
        # loss only on the answer, and the answer is the correct one
        prompt = row[: t.prompt_len(n)]
        assert counted == list(range(len(prompt) - 1, len(prompt) - 1 + t.answer_len(n)))
        assert [tgt[i] for i in counted] == t.solve(prompt, n)
        # the input continues with the answer (teacher forcing), then padding
        seq = prompt + t.solve(prompt, n)
        assert row[: len(seq) - 1] == seq[:-1]
        assert all(v == t.PAD for v in row[len(seq) - 1 :])


@pytest.mark.parametrize("order", ["key-value", "value-key"])
@pytest.mark.parametrize("queries", ["each-once", "random"])
def test_mqar_format_and_fixed_key_alphabet(queries, order):
    t = MQAR(train_len=4, eval_lengths=[4, 8], n_keys=16, n_values=5, n_eval=30, queries=queries, order=order)
    assert t.n_keys == 16 and t.vocab_size == 16 + 5 + 3
    # the key alphabet does not follow the evaluation lengths (the training task stays the same)
    assert MQAR(train_len=4, eval_lengths=[4, 12], n_keys=16).options()["n_keys"] == 16
    for n in (4, 8):
        P, A = t.examples(n)
        assert P.shape == (30, 2 * n + 2) and A.shape == (30, 2 * n)
        for p, a in zip(P.tolist(), A.tolist()):
            keys, vals = p[1 : 2 * n + 1 : 2], p[2 : 2 * n + 2 : 2]
            if order == "value-key":
                keys, vals = vals, keys
            assert len(set(keys)) == n and max(keys) < 16 and min(vals) >= 16
            qs, answers = a[0::2], a[1::2]
            if queries == "each-once":
                assert sorted(qs) == sorted(keys)  # every key queried once
            else:
                assert set(qs) <= set(keys)
            assert answers == [vals[keys.index(q)] for q in qs]
            assert t.check(p, n, a)
            bad = list(a)
            bad[1] = 16 + (bad[1] - 16 + 1) % 5
            assert not t.check(p, n, bad)
    assert t.answer_mask(3) == [False, True] * 3
    with pytest.raises(ValueError, match="queries must be one of"):
        MQAR(train_len=4, eval_lengths=[4], n_keys=16, queries="all")
    with pytest.raises(ValueError, match="order must be one of key-value, value-key"):
        MQAR(train_len=4, eval_lengths=[4], n_keys=16, order="kv")
    # a non-default order is part of the task's identity (and so of a compare fingerprint); the default is not
    assert "order" not in MQAR(train_len=4, n_keys=16).options()
    assert MQAR(train_len=4, n_keys=16, order="value-key").options()["order"] == "value-key"


def test_mqar_trains_only_on_values():
    t = MQAR(train_len=4, eval_lengths=[4], n_keys=16)
    x, y = t.train_source(8, seed=0).batch(0)
    for b in range(8):
        row, tgt = x[b].tolist(), y[b].tolist()
        sep = row.index(t.SEP)
        counted = [i for i, v in enumerate(tgt) if v != IGNORE]
        n = (sep - 1) // 2
        # targets at the query tokens (predicting the value that follows each query)
        assert counted == [sep + 1 + 2 * i for i in range(n)]
        for i in counted:
            assert row[i] < t.n_keys and tgt[i] >= t.n_keys


def test_mqar_rejects_too_few_keys():
    with pytest.raises(ValueError, match="n_keys"):
        MQAR(train_len=4, eval_lengths=[16], n_keys=8)


class _MQAROracle(nn.Module):
    def __init__(self, task, wrong: bool = False):
        super().__init__()
        self.task, self.wrong = task, wrong
        self.dummy = nn.Parameter(torch.zeros(()))

    def forward(self, idx):
        B, N = idx.shape
        out = torch.zeros(B, N, self.task.vocab_size)
        for b in range(B):
            row = idx[b].tolist()
            sep = row.index(self.task.SEP)
            table = {row[i]: row[i + 1] for i in range(1, sep, 2)}
            for t in range(sep + 1, N, 2):
                if row[t] not in table:  # padding
                    continue
                v = table[row[t]]
                out[b, t, (v + 1) if self.wrong and v + 1 < self.task.n_symbols else v] = 10.0
        return out


def test_mqar_is_scored_by_teacher_forcing():
    t = MQAR(train_len=3, eval_lengths=[3, 6], n_keys=8, n_values=4, n_eval=10)
    ms = t.evaluate(lambda n: _MQAROracle(t))
    assert all(m.accuracy == 1.0 and m.token_accuracy == 1.0 for m in ms)
    bad = t.evaluate(lambda n: _MQAROracle(t, wrong=True))
    assert all(m.accuracy < 1.0 for m in bad)
    x, y = t.validation_batch()
    assert validation_score(_MQAROracle(t), x, y) == (1.0, 1.0)


def test_copy_hints_tokens_and_sorted_hints():
    t = CopyHints(train_len=4, eval_lengths=[4, 8], alphabet=5, n_hints=10, n_eval=20)
    P, A = t.examples(8)
    for p, a in zip(P.tolist(), A.tolist()):
        hints, syms = p[1:17:2], p[2:17:2]
        assert hints == sorted(hints) and len(set(hints)) == 8 and min(hints) >= 5 and max(hints) < 15
        assert max(syms) < 5 and a == p[1:17]
    with pytest.raises(ValueError, match="n_hints"):
        CopyHints(train_len=4, eval_lengths=[12], n_hints=8)


def test_copy_distinct_has_no_repeats():
    t = make_task("copy-distinct", train_len=8, eval_lengths=[8, 32])
    assert t.alphabet == 64 and t.distinct
    for p in t.examples(32)[0].tolist():
        assert len(set(p[1:33])) == 32


def test_recall_is_an_alias_of_mqar():
    assert isinstance(make_task("recall", train_len=4), MQAR)


@pytest.mark.parametrize("name", ALGO + ["mqar"])
def test_held_out_examples_never_train_and_drive_in_distribution_evaluation(name):
    t = make_task(name, train_len=6, eval_lengths=[6, 12], holdout=0.2)
    src = t.train_source(64, seed=0)
    for step in range(3):
        x, _ = src.batch(step)
        for row in x.tolist():
            n = _n(t, row.index(t.SEP))
            assert not t.is_held_out(row[: t.prompt_len(n)])
    P, _ = t.examples(6)  # in distribution: the test split only
    assert all(t.split_of(p) == "test" for p in P.tolist())
    x, y = t.validation_batch()
    assert x.shape[0] == t.n_val
    for i, row in enumerate(x.tolist()):
        n = _n(t, row.index(t.SEP))
        if i < t.n_val_at_l:
            assert n == t.train_len  # the first half sits at L, where the fit gate applies
        if t.n_symbols ** n >= 100:  # shorter lengths may have no held-out example at all
            assert t.split_of(row[: t.prompt_len(n)]) == "val"


@pytest.mark.parametrize("name", ALGO + ["mqar"])
def test_validation_and_test_prompts_are_disjoint(name):
    """Issue 30: at parity n = 12, 55 of the 256 evaluation prompts were validation prompts."""
    t = make_task(name, train_len=12, eval_lengths=[12, 24], n_eval=256, n_val=256) if name != "copy-distinct" \
        else make_task(name, train_len=12, eval_lengths=[12, 24], n_eval=256, n_val=256, alphabet=32)
    x, _ = t.validation_batch()
    val = set()
    for row in x.tolist():
        n = _n(t, row.index(t.SEP))
        val.add(tuple(row[: t.prompt_len(n)]))
    test = {tuple(p) for p in t.examples(12)[0].tolist()}
    assert not val & test
    # distinct prompts (parity at 12 bits: its test split holds about 5 % of 4,096 strings, all of them used)
    assert len(test) == 256 if name != "parity" else len(test) > 200


def test_parity_labels_are_balanced_at_every_length():
    t = Parity(train_len=16, eval_lengths=[16, 24, 32, 48, 64], n_eval=256, n_val=256)
    for n in t.eval_lengths:
        _, A = t.examples(n)
        assert int(A.sum()) == 128, n  # exactly half odd
    x, y = t.validation_batch()
    labels = y[y != IGNORE]
    assert labels.shape[0] == 256 and int((labels == 1).sum()) == 128
    # an odd count differs by one at most, and the strings of each parity are still uniform: both bits vary
    _, A = Parity(train_len=4, eval_lengths=[9], n_eval=33).examples(9)
    assert abs(int(A.sum()) - 16.5) <= 0.5


def test_parity_held_out_strings_exist_at_the_training_length():
    t = Parity(train_len=12, eval_lengths=[12], holdout=0.1)
    P, _ = t.examples(12)
    assert len({tuple(p) for p in P.tolist()}) == t.n_eval  # distinct unseen strings
    seen = set()
    src = t.train_source(256, seed=0)
    for step in range(4):
        seen |= {tuple(r[:14]) for r in src.batch(step)[0].tolist() if len(r) >= 14 and r[13] == t.SEP}
    assert not seen & {tuple(p) for p in P.tolist()}


@given(st.sampled_from(ALGO), st.integers(1, 12), st.integers(0, 2**31))
def test_checker_accepts_truth_rejects_corruption(name, n, seed):
    t = make_task(name, train_len=4, eval_lengths=[12])
    rng = np.random.default_rng(seed)
    p, a = t.sample(rng, n, evaluation=True)
    assert t.check(p, n, a)
    bad = list(a)
    bad[0] = (bad[0] + 1) % t.n_symbols
    assert not t.check(p, n, bad)


def test_bad_options():
    with pytest.raises(ValueError, match="unknown task 'sort'"):
        make_task("sort")
    with pytest.raises(ValueError, match="eval_lengths"):
        Copy(train_len=4, eval_lengths=[4, 0])
    with pytest.raises(ValueError, match="eval_lengths"):
        Copy(train_len=4, eval_lengths=[])
    with pytest.raises(ValueError, match="train_len"):
        Copy(train_len=0)
    with pytest.raises(TypeError):
        make_task("copy", bogus=1)


class Oracle(nn.Module):
    """Predicts the task's answer by reading the prompt: logits one-hot on the right token.

    ``shift`` makes it answer wrongly (for the negative check).
    """

    def __init__(self, task, shift: int = 0):
        super().__init__()
        self.task, self.shift = task, shift
        self.dummy = nn.Parameter(torch.zeros(()))

    def forward(self, idx):
        B, N = idx.shape
        out = torch.zeros(B, N, self.task.vocab_size)
        for b in range(B):
            row = idx[b].tolist()
            sep = row.index(self.task.SEP)
            n = _n(self.task, sep)
            P = self.task.prompt_len(n)
            ans = self.task.solve(row[:P], n)
            for t in range(P - 1, min(N, P - 1 + len(ans))):
                tok = (ans[t - (P - 1)] + self.shift) % self.task.n_symbols
                out[b, t, tok] = 10.0
        return out


@pytest.mark.parametrize("name", ALGO)
def test_greedy_evaluation_with_oracle(name):
    t = make_task(name, train_len=3, n_eval=8)
    seen = []

    def model_for(seq_len):
        seen.append(seq_len)
        return Oracle(t)

    ms = t.evaluate(model_for)
    assert [m.eval_len for m in ms] == list(t.eval_lengths)
    assert all(m.protocol == "accuracy" and m.accuracy == 1.0 and m.token_accuracy == 1.0 for m in ms)
    assert seen == [t.seq_len(n) for n in t.eval_lengths]
    wrong = t.evaluate(lambda n: Oracle(t, shift=1))
    assert all(m.accuracy == 0.0 for m in wrong)


def test_greedy_decoding_feeds_back_its_own_tokens():
    """Greedy decoding, not teacher forcing: a model that repeats its last token
    keeps repeating its own first guess."""

    class Repeat(nn.Module):
        def forward(self, idx):
            return torch.nn.functional.one_hot(idx, 10).float()  # predict the current token again

    p = torch.tensor([[1, 2, 3], [4, 5, 6]])
    out = greedy_decode(Repeat(), p, 4)
    assert out.tolist() == [[3, 3, 3, 3], [6, 6, 6, 6]]
    assert greedy_decode(Repeat(), p, 0).shape == (2, 0)
    with pytest.raises(ValueError, match="n_new"):
        greedy_decode(Repeat(), p, -1)


@pytest.mark.parametrize("scheme", ["rope", "alibi", "learned", "fire"])
def test_cached_and_recomputed_decoding_agree(scheme):
    from relpos.model import ModelConfig, TransformerLM
    from tests.helpers import randomize_parameters

    m = TransformerLM(ModelConfig(vocab_size=12, d_model=16, n_heads=2, max_len=40, scheme=scheme)).eval()
    randomize_parameters(m, 0.5)
    p = torch.randint(0, 12, (5, 9))
    a = greedy_decode(m, p, 12, use_cache=True)
    b = greedy_decode(m, p, 12, use_cache=False, max_tokens=40)  # also exercises row chunking
    assert torch.equal(a, b)


def _old_mqar_sample(self, rng, n, *, evaluation=False):
    """MQAR.sample as it was before issue 52 (numpy interleaving): the reference for the faster one."""
    keys = rng.choice(self.n_keys, size=n, replace=False)
    vals = rng.integers(0, self.n_values, size=n) + self.n_keys
    pairs = [keys, vals] if self.order == "key-value" else [vals, keys]
    p = [self.BOS] + np.stack(pairs, axis=1).reshape(-1).tolist() + [self.SEP]
    order = rng.permutation(n) if self.queries == "each-once" else rng.integers(0, n, size=n)
    return p, self._answers(p, n, [int(keys[i]) for i in order])


def _old_fill(self, xrow, yrow, p, a, n):
    seq = p + a
    xrow[: len(seq) - 1] = seq[:-1]
    tgt = np.asarray(a, dtype=np.int64)
    tgt[~np.asarray(self.answer_mask(n), dtype=bool)] = -100
    yrow[len(p) - 1 : len(seq) - 1] = tgt


def _old_split_of(self, prompt):
    if self.holdout <= 0:
        return "train"
    import zlib

    h = zlib.crc32(np.asarray(prompt, dtype=np.int32).tobytes())
    if (h % 10_000) >= self.holdout * 10_000:
        return "train"
    return "val" if (h // 10_000) % 2 == 0 else "test"


def _old_batch(src, step):
    """AlgorithmicSource.batch before issue 52 (a length drawn for every row, even from a single length)."""
    from relpos.tasks.base import stable_seed

    t = src.task
    rng = np.random.default_rng(stable_seed(t.name, "train", t._key(), src.seed, step, 0))
    x = np.full((src.batch_size, src.width), t.PAD, dtype=np.int64)
    y = np.full((src.batch_size, src.width), -100, dtype=np.int64)
    for b in range(src.batch_size):
        n = int(rng.integers(t.min_len, t.train_len + 1))
        p, a = t.draw(rng, n, held_out=False)
        t._fill(x[b], y[b], p, a, n)
    return torch.from_numpy(x), torch.from_numpy(y)


@pytest.mark.parametrize("name, kw", [
    ("mqar", {"train_len": 4, "min_len": 4, "eval_lengths": [4, 8], "order": "value-key", "queries": "random"}),
    ("mqar", {"train_len": 6, "eval_lengths": [6, 8]}),
    ("copy", {"train_len": 8, "alphabet": 8}), ("reverse", {"train_len": 5}), ("parity", {"train_len": 12}),
    ("copy-hints", {"train_len": 6})])
def test_faster_batches_are_the_batches_of_before(name, kw, monkeypatch):
    """Issue 52 made training batches cheaper (MQAR's were about 10 % of its step): the same batches,
    validation and test sets, token for token, as the code before."""
    from relpos.tasks import make_task
    from relpos.tasks.algorithmic import AlgorithmicTask
    from relpos.tasks.mqar import MQAR

    task = make_task(name, **kw)
    src = task.train_source(32, seed=3)
    new = [src.batch(s) for s in (0, 1, 9)] + [task.validation_batch(), task.examples(task.train_len, 8)]
    monkeypatch.setattr(MQAR, "sample", _old_mqar_sample)
    monkeypatch.setattr(AlgorithmicTask, "_fill", _old_fill)
    monkeypatch.setattr(AlgorithmicTask, "split_of", _old_split_of)
    old = [_old_batch(src, s) for s in (0, 1, 9)] + [task.validation_batch(), task.examples(task.train_len, 8)]
    for (xn, yn), (xo, yo) in zip(new, old):
        assert torch.equal(xn, xo) and torch.equal(yn, yo)
