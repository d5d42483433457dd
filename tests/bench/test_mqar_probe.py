"""``benchmarks/mqar_probe.py``: both models train on MQAR and report finite, improving numbers."""

from __future__ import annotations

import math

import pytest

from tests.bench.scripts import load_script


@pytest.mark.parametrize("extra", [["--model", "relpos", "--scheme", "alibi"],
                                   ["--model", "relpos", "--scheme", "nope", "--no-mlp", "--init", "fan_in"],
                                   ["--model", "plain", "--pos", "rope", "--no-mlp", "--order", "value-key"],
                                   ["--model", "plain", "--pos", "absolute", "--queries", "random"]])
def test_probe_trains_and_reports(extra, capsys):
    mod = load_script("mqar_probe")
    hist = mod.run(mod.parse(["--steps", "250", "--pairs", "3", "--n-keys", "8", "--n-values", "4",
                              "--d-model", "16", "--heads", "2", "--batch-size", "8"] + extra))
    assert [h[0] for h in hist] == [0, 250]
    assert all(math.isfinite(h[1]) and 0.0 <= h[2] <= 1.0 for h in hist)
    assert hist[-1][1] < hist[0][1]  # it learned something (at least the value alphabet)
    assert "per-token acc" in capsys.readouterr().out
