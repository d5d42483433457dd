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


def test_probe_passes_scheme_options_and_sharing():
    """--scheme-options and --share-encoding reach the relpos model (per-layer T5 tables, a short range)."""
    mod = load_script("mqar_probe")
    args = mod.parse(["--model", "relpos", "--scheme", "t5", "--scheme-options", '{"max_distance": 20}',
                      "--share-encoding", "no", "--layers", "3", "--pairs", "3", "--n-keys", "8", "--n-values", "4",
                      "--d-model", "16", "--heads", "2"])
    model = mod.build(args, mod.MQAR(train_len=3, eval_lengths=[3], n_keys=8, n_values=4))
    assert model.cfg.scheme_options == {"max_distance": 20} and model.cfg.share_encoding is False
    tables = [n for n, _ in model.named_parameters() if n.endswith("table")]
    assert len(tables) == 3  # one per layer; the scheme's default shares one
    default = mod.build(mod.parse(["--model", "relpos", "--scheme", "t5", "--layers", "3", "--d-model", "16",
                                   "--heads", "2"]), mod.MQAR(train_len=3, eval_lengths=[3], n_keys=8, n_values=4))
    assert default.cfg.share_encoding is None
    assert len([n for n, _ in default.named_parameters() if n.endswith("table")]) == 1  # T5 shares one table
    with pytest.raises(SystemExit):
        mod.parse(["--share-encoding", "maybe"])


@pytest.mark.parametrize("freeze", [True, False])
def test_probe_freezes_the_position_scheme(tmp_path, freeze):
    """--freeze-position keeps the scheme's table at its initial values; without it the table trains."""
    import torch

    mod = load_script("mqar_probe")
    argv = ["--model", "relpos", "--scheme", "t5", "--steps", "30", "--pairs", "3", "--n-keys", "8", "--n-values", "4",
            "--d-model", "16", "--heads", "2", "--batch-size", "8", "--lr", "1e-2", "--save", str(tmp_path / "m.pt")]
    args = mod.parse(argv + (["--freeze-position"] if freeze else []))
    mod.run(args)
    torch.manual_seed(args.seed)
    init = mod.build(args, mod.MQAR(train_len=3, eval_lengths=[3], n_keys=8, n_values=4)).state_dict()
    trained = torch.load(tmp_path / "m.pt")
    assert torch.equal(trained["pos.0.table"], init["pos.0.table"]) is freeze
    assert not torch.equal(trained["tok_emb.weight"], init["tok_emb.weight"])  # the rest of the model trained


def test_probe_refuses_freezing_the_plain_model():
    mod = load_script("mqar_probe")
    with pytest.raises(SystemExit, match="relpos"):
        mod.run(mod.parse(["--model", "plain", "--freeze-position", "--steps", "1", "--pairs", "3", "--n-keys", "8",
                           "--n-values", "4", "--d-model", "16", "--heads", "2"]))
