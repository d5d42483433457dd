"""Algorithmic tasks: generators, checkers, training batches, greedy evaluation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from relpos.tasks import IGNORE, Copy, Parity, Recall, Reverse, greedy_decode, make_task

ALGO = ["copy", "reverse", "recall", "parity"]


def test_formats_by_hand():
    c = Copy(train_len=4, alphabet=5)
    assert (c.BOS, c.SEP, c.PAD, c.vocab_size) == (5, 6, 7, 8)
    assert c.solve([5, 1, 2, 3, 6], 3) == [1, 2, 3]
    assert Reverse(train_len=4, alphabet=5).solve([5, 1, 2, 3, 6], 3) == [3, 2, 1]
    p = Parity(train_len=4)
    assert p.solve([p.BOS, 1, 0, 1, 1, p.SEP], 4) == [1]
    assert p.solve([p.BOS, 1, 0, 1, 0, p.SEP], 4) == [0]
    r = Recall(train_len=2, eval_lengths=[2, 4], n_values=3)
    assert r.n_keys == 4  # default: as many keys as the longest length
    k0, k1, v0, v1 = 0, 3, r.n_keys + 2, r.n_keys + 0
    assert r.solve([r.BOS, k0, v0, k1, v1, r.SEP, k1], 2) == [v1]
    assert r.solve([r.BOS, k0, v0, k1, v1, r.SEP, k0], 2) == [v0]


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
        n = sep - 1 if name != "recall" else (sep - 1) // 2
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


def test_recall_queries_are_farther_back_than_training():
    L = 6
    t = Recall(train_len=L, eval_lengths=[L, 2 * L, 3 * L], n_eval=50)
    longest_train_distance = (2 * L + 2) - 1  # query token at 2n+2, first key at 1, n = L
    for n in (2 * L, 3 * L):
        P, _ = t.examples(n)
        for p in P.tolist():
            q = p[-1]
            key_pos = p.index(q)  # keys are distinct, values are not keys
            assert len(p) - 1 - key_pos > longest_train_distance
    # at the training length the queries cover every pair
    P, _ = t.examples(L)
    assert len({p.index(p[-1]) for p in P.tolist()}) > L // 2


def test_recall_keys_distinct_and_values_separate():
    t = Recall(train_len=4, eval_lengths=[8])
    P, A = t.examples(8)
    for p, a in zip(P.tolist(), A.tolist()):
        keys = p[1:17:2]
        vals = p[2:17:2]
        assert len(set(keys)) == 8 and max(keys) < t.n_keys
        assert min(vals) >= t.n_keys and a[0] in vals


@given(st.sampled_from(ALGO), st.integers(1, 12), st.integers(0, 2**31))
def test_checker_accepts_truth_rejects_corruption(name, n, seed):
    t = make_task(name, train_len=4, eval_lengths=[12])
    rng = np.random.default_rng(seed)
    p, a = t.sample(rng, n, evaluation=True)
    assert t.check(p, n, a)
    bad = list(a)
    bad[0] = (bad[0] + 1) % t.n_symbols
    if name == "recall":
        bad[0] = t.n_keys + (a[0] - t.n_keys + 1) % t.n_values
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
    with pytest.raises(ValueError, match="n_keys"):
        Recall(train_len=4, eval_lengths=[16], n_keys=8)
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
            n = sep - 1 if self.task.name != "recall" else (sep - 1) // 2
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
