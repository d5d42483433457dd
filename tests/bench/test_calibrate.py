"""``auto``'s calibration: the stopping rule of one cell, on scripted timings (no real timing)."""

from __future__ import annotations

import pytest

from relpos.bench import calibrate
from relpos.bench.spec import BenchSpec


def _script(monkeypatch, dense_ms, chunked_ms):
    """Make every timed dense / chunked run return the next scripted time (process CPU ms)."""
    seq = {"dense": list(dense_ms), "chunked": list(chunked_ms)}

    def build_step(case, spec):
        def step():  # the untimed warm-up calls it
            return None
        step.impl = case.impl
        return step, None

    monkeypatch.setattr(calibrate, "build_step", build_step)
    monkeypatch.setattr(calibrate, "timed", lambda step, spec: (0.0, seq[step.impl].pop(0)))


@pytest.mark.parametrize("dense, chunked, runs, pick", [
    ([80, 40, 40, 40, 40], [50, 50, 50, 50, 50], 5, "dense"),  # a slow first dense call: not decided on it
    ([200, 200], [50, 50], 2, "chunked"),  # clear twice: decided after two pairs
    ([40, 41, 42, 43, 44], [45, 45, 45, 45, 45], 5, "dense"),  # close: five pairs, medians decide
])
def test_a_cell_is_decided_only_when_two_pairs_agree_clearly(monkeypatch, dense, chunked, runs, pick):
    _script(monkeypatch, dense, chunked)
    rec = calibrate._pair("t5", 256, "fwd", BenchSpec(memory=False), 5, None)
    assert (rec["runs"], rec["pick"]) == (runs, pick)
