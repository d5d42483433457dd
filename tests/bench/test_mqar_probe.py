"""``benchmarks/mqar_probe.py``: both models train on MQAR and report finite, improving numbers."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("mqar_probe", ROOT / "benchmarks" / "mqar_probe.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("extra", [["--model", "relpos", "--scheme", "alibi"],
                                   ["--model", "plain", "--pos", "rope", "--no-mlp", "--order", "value-key"],
                                   ["--model", "plain", "--pos", "absolute", "--queries", "random"]])
def test_probe_trains_and_reports(extra, capsys):
    mod = _script()
    hist = mod.run(mod.parse(["--steps", "250", "--pairs", "3", "--n-keys", "8", "--n-values", "4",
                              "--d-model", "16", "--heads", "2", "--batch-size", "8"] + extra))
    assert [h[0] for h in hist] == [0, 250]
    assert all(math.isfinite(h[1]) and 0.0 <= h[2] <= 1.0 for h in hist)
    assert hist[-1][1] < hist[0][1]  # it learned something (at least the value alphabet)
    assert "per-token acc" in capsys.readouterr().out
