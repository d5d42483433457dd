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


class LateDegrade(Bigram):
    """Context-free like :class:`Bigram`, and worse only at positions >= ``start`` (past anything "trained")."""

    def __init__(self, start: int, penalty: float = 3.0):
        super().__init__()
        self.start, self.penalty = start, penalty

    def forward(self, idx):
        out = super().forward(idx).clone()
        out[:, self.start:, 0] += self.penalty  # byte 0 never occurs in source text: every real byte loses
        return out


def test_far_position_ratio_exposes_a_model_that_degrades_late():
    """The window mean of a long window mostly averages positions seen in training; the far positions do not."""
    from relpos.tasks.lm import far_loss

    t = LanguageModelling(train_len=8, eval_lengths=[8, 64], eval_tokens=1024, target_len=4, blocks=4)
    ms = t.evaluate(lambda n: LateDegrade(start=60, penalty=14.0))
    win = {m.eval_len: m.loss for m in ms if m.protocol == "window"}
    pos = [m for m in ms if m.protocol == "position"]
    window_ratio = win[64] / win[8]
    far_ratio = far_loss(pos, 64) / far_loss(pos, 8)
    assert window_ratio < 1.1  # the usual number says "held"
    assert far_ratio > 1.25 and far_ratio > window_ratio + 0.15  # the far quarter says it did not
    # a model that does not degrade has both ratios at 1
    ms = t.evaluate(lambda n: Bigram())
    pos = [m for m in ms if m.protocol == "position"]
    assert far_loss(pos, 64) / far_loss(pos, 8) == pytest.approx(1.0, abs=0.05)
    # the far quarter is the bucket-width-weighted mean of the buckets that start at or after 3/4 of the window
    rows = [{"eval_len": 16, "bucket_start": a, "bucket_end": b, "loss": v}
            for (a, b), v in zip([(0, 4), (4, 8), (8, 12), (12, 14), (14, 16)], [9, 9, 9, 1.0, 3.0])]
    assert far_loss(rows, 16) == pytest.approx(2.0) and far_loss(rows, 32) is None


def test_validation_reads_val_and_every_reported_number_reads_test():
    from relpos.tasks.lm import corpus

    t = LanguageModelling(train_len=16, eval_lengths=[16, 32], eval_tokens=512, blocks=4)
    val, test = corpus("val"), corpus("test")
    x, y = t.validation_batch()
    assert x.shape == (32, 16) and all(bytes(r.tolist()) in val for r in x)
    for row in t._chunks(8, 32):
        b = bytes(row.tolist())
        assert b in test and b not in val
    assert t.options()["corpus"]["sha256"] == t.corpus_identity()["sha256"]


def test_per_example_scores_are_the_window_means_in_a_fixed_order():
    t = LanguageModelling(train_len=8, eval_lengths=[8, 32], eval_tokens=256, blocks=4)
    ms = t.evaluate(lambda n: Bigram())
    for m in ms:
        if m.protocol == "window":
            assert len(m.per_example) == 256 // m.eval_len
            assert sum(m.per_example) / len(m.per_example) == pytest.approx(m.loss, abs=1e-5)
        elif m.protocol == "fixed_target":
            assert len(m.per_example) == 4
        elif m.bucket_start >= 3 * m.eval_len // 4:  # the far quarter's buckets: each window's mean there
            assert len(m.per_example) == 256 // m.eval_len
            assert sum(m.per_example) / len(m.per_example) == pytest.approx(m.loss, abs=1e-5)
        else:
            assert m.per_example is None
    again = t.evaluate(lambda n: Bigram())
    assert [m.per_example for m in again] == [m.per_example for m in ms]


class ContextHelps(nn.Module):
    """Loss falls with position: byte 0's logit (never the target) shrinks as context grows."""

    def forward(self, idx):
        B, N = idx.shape
        out = torch.zeros(B, N, 256)
        out[..., 0] = 20.0 / (1.0 + torch.arange(N, dtype=torch.float32))
        return out


def test_sliding_window_scores_the_same_bytes_with_more_context():
    """Press et al.'s sliding evaluation: a context-free model gets exactly the non-overlapping number (the
    same bytes are scored, each once); a model that gains from context gets a lower one."""
    kw = dict(train_len=8, eval_lengths=[8, 32], eval_tokens=256, blocks=4)
    plain, slide = LanguageModelling(**kw), LanguageModelling(**kw, eval_stride=8)
    for model, same in ((Bigram(), True), (ContextHelps(), False)):
        a = {m.eval_len: m for m in plain.evaluate(lambda n: model) if m.protocol == "window"}
        b = {m.eval_len: m for m in slide.evaluate(lambda n: model) if m.protocol == "window"}
        assert b[32].count == a[32].count and len(b[32].per_example) == len(a[32].per_example)
        if same:
            assert b[32].loss == pytest.approx(a[32].loss, abs=1e-9)
        else:
            assert b[32].loss < a[32].loss - 0.05
        assert b[8].loss == pytest.approx(a[8].loss, abs=1e-9)  # stride = length: nothing slides
    with pytest.raises(ValueError, match="eval_stride"):
        LanguageModelling(train_len=8, eval_lengths=[8, 32], eval_stride=5)
