"""``benchmarks/ab_step.py``: each setting times the step off and on, and put the process's setting back."""

from __future__ import annotations

import json

import pytest
import torch

from tests.bench.scripts import load_script


@pytest.mark.parametrize("setting, off, on", [("causal-blocks", "whole", "blocks"), ("flush-denormal", "kept", "flushed")])
def test_each_setting_is_timed_both_ways_and_restored(setting, off, on, tmp_path, monkeypatch):
    mod = load_script("ab_step")
    seen = []
    real = mod.Setting.apply
    monkeypatch.setattr(mod.Setting, "apply", lambda self, v: seen.append(v) or real(self, v))
    rows_before = mod.dense.CAUSAL_BLOCK_ROWS
    assert mod.main([setting, "--schemes", "t5", "--shapes", "2x16x16", "--steps", "1", "--warmup", "1",
                     "--out", str(tmp_path)]) == 0
    assert seen == [False, True, False, True]  # alternating, warm-up round included
    assert mod.dense.CAUSAL_BLOCK_ROWS == rows_before and torch.set_flush_denormal(False) is not None
    name = {"causal-blocks": "causal_blocks", "flush-denormal": "flush_denormal"}[setting]
    (row,) = json.loads((tmp_path / f"{name}.json").read_text())["rows"]
    assert row[f"{on}_ms"] > 0 and row[f"{off}_ms"] > 0
    assert row["ratio"] == pytest.approx(row[f"{on}_ms"] / row[f"{off}_ms"], rel=0.02)


def test_relkey_compiled_times_the_pytorch_loops_against_the_compiled_ones_and_restores(tmp_path, monkeypatch):
    mod = load_script("ab_step")
    krel = mod.relkey.relkey_kernel
    usable = krel.usable
    ran = []
    real_loop = mod.relkey._forward_blocks
    monkeypatch.setattr(mod.relkey, "_forward_blocks", lambda *a: ran.append("pytorch") or real_loop(*a))
    real_fwd = krel.blocks_forward
    monkeypatch.setattr(krel, "blocks_forward", lambda *a: ran.append("compiled") or real_fwd(*a))
    assert mod.main(["relkey-compiled", "--shapes", "1x96x16", "--steps", "1", "--warmup", "1",
                     "--out", str(tmp_path)]) == 0  # 96 rows: 2 row blocks (relkey_blocks)
    built = mod.kernels.load() is not None
    # two rounds (warm-up, timed), each a step off then on, each step two layers
    assert ran == ((["pytorch"] * 2 + ["compiled"] * 2) * 2 if built else ["pytorch"] * 8)
    assert krel.usable is usable
    (row,) = json.loads((tmp_path / "relkey_compiled_step.json").read_text())["rows"]
    assert row["compiled_ms"] > 0 and row["pytorch_ms"] > 0


def test_fire_mlp_times_the_pytorch_path_against_the_one_call_and_restores(tmp_path, monkeypatch):
    mod = load_script("ab_step")
    usable = mod.fire.fire_kernels.usable
    ran = []
    real = mod.fire.fire_kernels.mlp_offsets
    monkeypatch.setattr(mod.fire.fire_kernels, "mlp_offsets", lambda *a: ran.append("compiled") or real(*a))
    assert mod.main(["fire-mlp", "--shapes", "2x16x16", "--steps", "1", "--warmup", "1", "--out", str(tmp_path)]) == 0
    assert mod.fire.fire_kernels.usable is usable
    (row,) = json.loads((tmp_path / "fire_mlp_step.json").read_text())["rows"]
    assert row["pytorch_ms"] > 0 and row["compiled_ms"] > 0
    if mod.kernels.load() is not None:  # each layer's bias, in the compiled rounds only (2 rounds x 2 layers)
        assert ran == ["compiled"] * 4
