"""Language-modelling task: loss helpers and the three evaluation protocols."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from relpos.tasks import IGNORE, LanguageModelling, Measurement, token_losses


class Bigram(nn.Module):
    """Logits depend on the current byte only: no position, no context."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.table = nn.Parameter(torch.randn(256, 256, generator=g))

    def forward(self, idx):
        return self.table[idx]


class PositionOnly(nn.Module):
    """Gets worse with position for every target: the logit of byte 0 (which never occurs in
    source text) grows with the position, so every real byte's loss grows too."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(()))

    def forward(self, idx):
        B, N = idx.shape
        out = torch.zeros(B, N, 256)
        out[..., 0] = 0.1 * torch.arange(N, dtype=torch.float32) * self.w
        return out


def test_token_losses_match_cross_entropy():
    torch.manual_seed(0)
    m = Bigram()
    x = torch.randint(0, 256, (5, 7))
    y = torch.randint(0, 256, (5, 7))
    y[1, 3] = IGNORE
    got = token_losses(m, x, y, max_tokens=8)  # 1 row per chunk
    ref = F.cross_entropy(m(x).double().reshape(-1, 256), y.reshape(-1), reduction="none", ignore_index=IGNORE)
    ref = ref.view(5, 7)
    assert math.isnan(got[1, 3])
    mask = y != IGNORE
    torch.testing.assert_close(got[mask], ref[mask])
    with pytest.raises(ValueError, match="x and y"):
        token_losses(m, x, y[:, :3])


def test_measurement_units():
    m = Measurement.from_loss("window", 64, math.log(256), 10)
    assert m.bpb == pytest.approx(8.0) and m.ppl == pytest.approx(256.0)
    with pytest.raises(ValueError, match="protocol"):
        Measurement("bogus", 1)


def test_uniform_model_is_eight_bits_everywhere():
    class Uniform(nn.Module):
        def forward(self, idx):
            return torch.zeros(*idx.shape, 256)

    t = LanguageModelling(train_len=8, eval_lengths=[8, 16, 32], eval_tokens=256, blocks=3)
    ms = t.evaluate(lambda n: Uniform())
    assert {m.protocol for m in ms} == {"window", "position", "fixed_target"}
    for m in ms:
        assert m.bpb == pytest.approx(8.0)


def test_context_free_model_is_flat_across_lengths():
    """Same bytes at every length: a model that ignores position and context gets the same
    window loss and the same fixed-target loss at every length."""
    t = LanguageModelling(train_len=8, eval_lengths=[8, 16, 32, 64], eval_tokens=512, target_len=4, blocks=4)
    ms = t.evaluate(lambda n: Bigram())
    win = [m.bpb for m in ms if m.protocol == "window"]
    fixed = [m.bpb for m in ms if m.protocol == "fixed_target"]
    assert len(win) == 4 and len(fixed) == 4
    assert max(win) - min(win) < 1e-9
    assert max(fixed) - min(fixed) < 1e-9
    # and its bucket losses average back to the window loss (equal-width buckets)
    for n in (8, 64):
        b = [m for m in ms if m.protocol == "position" and m.eval_len == n]
        w = next(m for m in ms if m.protocol == "window" and m.eval_len == n)
        assert sum(m.loss * m.count for m in b) / sum(m.count for m in b) == pytest.approx(w.loss)


def test_position_effects_show_in_buckets_and_fixed_targets():
    t = LanguageModelling(train_len=8, eval_lengths=[8, 32], eval_tokens=256, target_len=4, blocks=4,
                          position_buckets=4)
    ms = t.evaluate(lambda n: PositionOnly())
    b = [m for m in ms if m.protocol == "position" and m.eval_len == 32]
    assert [(m.bucket_start, m.bucket_end) for m in b] == [(0, 8), (8, 16), (16, 24), (24, 32)]
    assert all(b[i].loss < b[i + 1].loss for i in range(3))
    f = [m for m in ms if m.protocol == "fixed_target"]
    assert [m.eval_len for m in f] == [8, 32] and f[0].loss < f[1].loss
    assert all(m.count == 4 * 4 for m in f)  # blocks x target_len


def test_model_for_gets_each_length():
    seen = []
    t = LanguageModelling(train_len=8, eval_lengths=[8, 16], eval_tokens=64, blocks=2)

    def mf(n):
        seen.append(n)
        return Bigram()

    t.evaluate(mf)
    assert sorted(set(seen)) == [8, 16]


def test_buckets_cover_the_window():
    for n, k in [(8, 16), (64, 16), (100, 7), (1, 4)]:
        bs = LanguageModelling.buckets(n, k)
        assert bs[0][0] == 0 and bs[-1][1] == n and len(bs) == min(n, k)
        assert all(a < b for a, b in bs) and all(bs[i][1] == bs[i + 1][0] for i in range(len(bs) - 1))


def test_training_source_is_stdlib_bytes():
    t = LanguageModelling(train_len=16, train_bytes=50_000)
    x, y = t.train_source(4, seed=0).batch(0)
    assert x.shape == y.shape == (4, 16)
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert t.vocab_size == 256 and t.max_seq_len() == 16 * 16


def test_bad_options():
    with pytest.raises(ValueError, match="eval_lengths"):
        LanguageModelling(train_len=8, eval_lengths=[8, 0])
    with pytest.raises(ValueError, match="target_len"):
        LanguageModelling(train_len=8, eval_lengths=[8, 16], target_len=9)
    with pytest.raises(ValueError, match="train_len"):
        LanguageModelling(train_len=1)
