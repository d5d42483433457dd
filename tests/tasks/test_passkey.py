"""Passkey retrieval: exact lengths, the needle exactly at the asked depth, exact scoring."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from relpos.tasks.passkey import FILLER, INTRO, NEEDLE, QUESTION, Passkey, passkey_table


@pytest.mark.parametrize("length", [180, 257, 1000])
@pytest.mark.parametrize("depth", [0.0, 0.1, 0.25, 0.5, 0.9, 1.0])
def test_needle_sits_exactly_at_the_asked_depth(length, depth):
    pk = Passkey([length], [depth], n=3, digits=5, seed=4)
    for i in range(3):
        ex = pk.example(length, depth, i)
        t = ex.tokens
        assert len(t) == length + 1  # model input is exactly `length` tokens
        assert len(ex.key) == 5 and ex.key.isdigit() and ex.key[0] != "0"
        needle = list(NEEDLE.format(key=ex.key).encode())
        intro = list(INTRO.encode())
        assert t[: len(intro)] == intro
        assert ex.filler_before == round(depth * ex.filler_total)
        assert ex.needle_start == len(intro) + ex.filler_before
        assert t[ex.needle_start: ex.needle_start + len(needle)] == needle
        # the key appears nowhere else except the answer
        text = bytes(t).decode()
        assert text.count(ex.key) == 3  # twice in the needle, once as the answer
        assert text.endswith(QUESTION + " " + ex.key)
        filler = text[len(INTRO): ex.needle_start] + text[ex.needle_start + len(needle): -len(QUESTION) - 6]
        assert len(filler) == ex.filler_total and set(filler) <= set(FILLER)
        if depth == 0.0:
            assert ex.filler_before == 0
        if depth == 1.0:
            assert text[ex.needle_start + len(needle):].startswith(QUESTION)
    keys = {pk.example(length, depth, i).key for i in range(3)}
    assert len(keys) > 1 and pk.example(length, depth, 0).key == Passkey([length], [depth], seed=4).key(length, depth, 0)


def test_needle_depth_with_a_subword_tokenizer(tmp_path):
    pytest.importorskip("tokenizers")
    from relpos.corpus import load_tokenizer
    from tests.data_helpers import train_tokenizer

    tok = load_tokenizer(train_tokenizer(tmp_path / "tok.json"))

    def enc(s):
        return tok.encode(s, add_special_tokens=False).ids

    pk = Passkey([120, 200], [0.0, 0.5, 1.0], n=2, encode=enc, bos=[0])
    for L in (120, 200):
        for d in (0.0, 0.5, 1.0):
            ex = pk.example(L, d, 1)
            assert len(ex.tokens) == L + 1 and ex.tokens[0] == 0
            n = enc(NEEDLE.format(key=ex.key))
            assert ex.tokens[ex.needle_start: ex.needle_start + len(n)] == n
            assert ex.needle_start == 1 + len(enc(INTRO)) + round(d * ex.filler_total)
            assert tok.decode(ex.tokens[-ex.answer_len:]).strip() == ex.key


class Oracle(nn.Module):
    """Predicts the true next token of every known example, except the answer's last token of ``spoil`` rows."""

    def __init__(self, pk: Passkey, L: int, depth: float, spoil: set[int]) -> None:
        super().__init__()
        self.full, self.exs = pk.batch(L, depth)
        self.spoil = spoil
        self.V = 256

    def forward(self, x):
        out = torch.zeros(x.shape[0], x.shape[1], self.V)
        for r in range(x.shape[0]):
            i = next(i for i in range(self.full.shape[0]) if torch.equal(self.full[i, :-1], x[r]))
            nxt = self.full[i, 1:].clone()
            if i in self.spoil:
                nxt[-1] = (nxt[-1] + 1) % self.V  # last digit wrong
            out[r, torch.arange(x.shape[1]), nxt] = 5.0
        return out


@pytest.mark.parametrize("spoil", [set(), {0, 2}, {0, 1, 2, 3}])
def test_scoring_is_exact(spoil):
    pk = Passkey([150], [0.5], n=4, max_tokens=300)  # 2 rows per forward pass
    m = pk.score(Oracle(pk, 150, 0.5, spoil), 150, 0.5)
    A = 6  # " " + 5 digits, one byte each
    assert m.accuracy == (4 - len(spoil)) / 4
    assert m.token_accuracy == pytest.approx((4 * A - len(spoil)) / (4 * A))
    assert m.bucket_start == m.bucket_end == 50 and m.eval_len == 150 and m.count == 4
    assert m.protocol == "accuracy" and m.loss > 0


def test_evaluate_a_relpos_model_and_table():
    from relpos.model import ModelConfig, TransformerLM

    torch.manual_seed(0)
    model = TransformerLM(ModelConfig(vocab_size=256, d_model=32, n_layers=1, n_heads=2, max_len=512,
                                      scheme="rope")).eval()
    pk = Passkey([200, 400], [0.0, 1.0], n=2)
    seen = []

    def model_for(L):
        seen.append(L)
        return model

    ms = pk.evaluate(model_for)
    assert seen == [200, 400]
    assert [(m.eval_len, m.bucket_start) for m in ms] == [(200, 0), (200, 100), (200, -1), (400, 0), (400, 100),
                                                          (400, -1)]
    assert all(0.0 <= m.accuracy <= 1.0 and m.loss > 0 for m in ms)
    table = passkey_table(ms)
    assert table.splitlines()[0] == "| passkey accuracy | depth 0% | depth 100% | mean |"
    assert table.splitlines()[2].startswith("| 200 | ")


def test_bad_input():
    with pytest.raises(ValueError, match="too short.*needs at least"):
        Passkey([50])
    with pytest.raises(ValueError, match="depths entries"):
        Passkey([500], [1.5])
    with pytest.raises(TypeError, match="lengths entries"):
        Passkey([500.0])
    with pytest.raises(ValueError, match="lengths must not be empty"):
        Passkey([])


def test_fitting_keeps_lengths_long_enough_for_the_prompt():
    shortest = Passkey([1000]).min_length()
    assert 100 < shortest < 200
    pk = Passkey.fitting([64, shortest - 1, shortest, 512], depths=[0.5], n=2)
    assert pk.lengths == (shortest, 512) and pk.n == 2
    assert Passkey.fitting([32, 64]) is None
    ex = pk.example(shortest, 0.5, 0)
    assert ex.filler_total == 8  # the shortest prompt still carries a little filler
