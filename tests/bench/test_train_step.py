"""``benchmarks/train_step.py`` end to end at the smallest compare shape, and the ``TrainConfig.compile`` flag."""

from __future__ import annotations

import json

import pytest
import torch

from tests.bench.scripts import load_script


def test_train_step_table(tmp_path):
    mod = load_script("train_step")
    assert mod.main(["--shapes", "ci-lm", "--schemes", "t5", "cope", "--rounds", "1", "--no-compile",
                     "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "train_step.json").read_text())
    (sh,) = doc["shapes"]
    rows = {r["scheme"]: r for r in sh["rows"]}
    assert list(rows) == ["nope", "t5", "cope"]  # NoPE always runs, first
    assert rows["nope"]["vs_nope"] == 1.0
    assert rows["t5"]["target"] == 1.3 and rows["cope"]["target"] == 2.0
    for r in rows.values():
        assert r["step_ms"] > 0 and r["met"] == (r["vs_nope"] <= r["target"])
        assert "compiled_step_ms" not in r
    md = (tmp_path / "train_step.md").read_text()
    assert "| t5 |" in md and "ci-lm" in md


def test_compile_flag_is_checked():
    from relpos.training.loop import TrainConfig

    with pytest.raises(TypeError, match="compile"):
        TrainConfig(compile="yes")
    assert TrainConfig().compile is False


@pytest.mark.slow
def test_compiled_training_matches_eager():
    """TrainConfig(compile=True) compiles the whole model (the trainer steps through the compiled
    module; ``model`` stays the plain one) and trains to the same losses as eager."""
    from relpos.training.distributed import DistContext
    from relpos.model import ModelConfig
    from relpos.training.loop import TrainConfig, Trainer

    data = bytes(range(256)) * 40
    mc = ModelConfig(d_model=16, n_layers=1, n_heads=2, max_len=16, scheme="alibi")
    losses = {}
    for comp in (False, True):
        tc = TrainConfig(steps=2, batch_size=2, seq_len=16, warmup=1, progress=False, device="cpu", compile=comp)
        tr = Trainer(mc, tc, data, ctx=DistContext())
        losses[comp] = [tr.step(), tr.step()]
        assert hasattr(tr.net, "_orig_mod") == comp
        assert (tr.net is tr.model) == (not comp)
        assert not hasattr(tr.model, "_orig_mod")
    torch.testing.assert_close(torch.tensor(losses[True]), torch.tensor(losses[False]), atol=1e-4, rtol=1e-4)
