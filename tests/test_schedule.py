"""relpos.training.schedule: cosine, constant, and a callback's cooldown."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relpos.training.schedule import Cooldown, lr_at
from relpos.training.loop import TrainConfig


def test_constant_schedule_holds_the_rate_after_warmup():
    c = TrainConfig(steps=100, warmup=10, lr=2.0, schedule="constant")
    assert lr_at(0, c) == pytest.approx(0.2) and lr_at(9, c) == 2.0
    assert {lr_at(s, c) for s in range(10, 200)} == {2.0}  # no decay without a cooldown, even past the budget


@given(start=st.integers(1, 80), length=st.integers(1, 50), schedule=st.sampled_from(["cosine", "constant"]))
def test_a_cooldown_decays_linearly_from_the_current_rate_to_the_floor(start, length, schedule):
    c = TrainConfig(steps=100, warmup=5, lr=1.0, min_lr_ratio=0.1, schedule=schedule)
    top = lr_at(start - 1, c)
    lrs = [lr_at(s, c, (start, length)) for s in range(start, start + length + 5)]
    assert [lr_at(s, c, (start, length)) for s in range(start)] == [lr_at(s, c) for s in range(start)]
    assert lrs[length - 1:] == pytest.approx([0.1] * 6)
    steps = [top - x for x in lrs[:length]]  # equal decrements: linear
    assert all(b - a == pytest.approx((top - 0.1) / length, abs=1e-12) for a, b in zip([0.0] + steps, steps))


def test_bad_schedules_and_cooldowns_are_clear_errors():
    with pytest.raises(ValueError, match="schedule must be one of 'cosine', 'constant'"):
        TrainConfig(schedule="linear")
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="Cooldown.steps must be an int >= 1"):
            Cooldown(bad)
