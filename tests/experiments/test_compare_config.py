"""``relpos compare`` flags, plans and the models a configuration gives (no sweep, or a tiny one)."""

from __future__ import annotations

import json

import pytest
import torch

from relpos.cli import main
from relpos.compare.sweep import plan
from relpos.compare.presets import preset
from relpos.compare.runner import Job, model_config_for, rope_variant_model_for
from tests.experiments.compare_support import run_tiny, tiny


@pytest.mark.parametrize("argv, msg", [
    (["--schemes", "alibi,bogus"], "unknown scheme 'bogus'"),
    (["--tasks", "lm,sorting"], "unknown task 'sorting'"),
    (["--eval-lengths", "32,0"], "above zero"),
    (["--task-eval-lengths", "-3"], "above zero"),
    (["--rope-variants", "wat"], "unknown RoPE variant"),
    (["--preset", "huge"], "unknown preset"),
    (["--runner", "carrier-pigeon"], "unknown runner"),
])
def test_bad_input_is_a_clear_error(tmp_path, capsys, argv, msg):
    out = tmp_path / "o"
    assert main(["compare", "--out", str(out), "--no-progress", *argv]) == 2
    err = capsys.readouterr().err
    assert msg in err and "error" in err
    assert not (out / "results.sqlite").exists()


def test_dry_run_lists_the_plan(capsys):
    assert main(["compare", "--preset", "full", "--dry-run"]) == 0
    out = capsys.readouterr().out
    cfg = preset("full").validate()
    assert f"{len(plan(cfg))} training runs" in out and "mqar/rope+rand/seed2" in out


def test_task_len_holds_for_every_algorithmic_task():
    """--task-len / --task-eval-lengths replace the presets' per-task lengths (MQAR at 4 pairs)."""
    from relpos.cli import build_parser
    from relpos.commands.compare import build_config

    base = build_config(build_parser().parse_args(["compare", "--preset", "full"])).validate()
    assert base.make_task("mqar").train_len != base.make_task("copy").train_len
    # protocol 3: L = 16, evaluated at 1x, 1.5x, 2x, 3x and 4x L
    assert base.make_task("parity").train_len == base.make_task("copy").train_len == 16
    assert list(base.make_task("copy").eval_lengths) == [16, 24, 32, 48, 64]
    cfg = build_config(build_parser().parse_args(["compare", "--preset", "full", "--task-len", "6"])).validate()
    for t in ("copy", "mqar", "parity", "reverse"):
        assert cfg.make_task(t).train_len == 6, t
        assert list(cfg.make_task(t).eval_lengths) == [6, 12, 18, 24], t
    cfg = build_config(build_parser().parse_args(["compare", "--preset", "full", "--task-eval-lengths", "8,16"]))
    assert all(list(cfg.validate().make_task(t).eval_lengths) == [8, 16] for t in ("mqar", "parity"))


def test_learned_table_covers_the_longest_evaluation():
    cfg = tiny(schemes=["learned"]).validate()
    for task in ("lm", "copy"):
        t = cfg.make_task(task)
        m = model_config_for(Job(task, "learned", 0), cfg, t)
        assert m.max_len > t.max_seq_len()
        r = model_config_for(Job(task, "learned", 0, randomized=True), cfg, t)
        assert r.random_positions >= t.max_seq_len() and r.max_len >= r.random_positions


def test_rope_variants_share_weights_and_scale_by_length():
    from relpos.encodings.rope import RoPE
    from relpos.model import ModelConfig, TransformerLM
    from tests.helpers import randomize_parameters

    m = TransformerLM(ModelConfig(vocab_size=20, d_model=16, n_heads=2, n_layers=1, max_len=64, scheme="rope"))
    randomize_parameters(m)
    m.eval()
    x = torch.randint(0, 20, (2, 32))
    base = m(x)
    mf = rope_variant_model_for(m, 8, "linear", None)
    at_train = mf(8)
    torch.testing.assert_close(at_train(x), base)  # factor 1: the trained model
    longer = mf(32)
    enc = next(mod for mod in longer.modules() if isinstance(mod, RoPE))
    assert (enc.scaling, enc.factor, enc.original_max_len) == ("linear", 4.0, 8)
    assert not torch.allclose(longer(x), base)
    assert all(torch.equal(p, q) for p, q in zip(m.parameters(), longer.parameters()))
    assert all(mod.scaling is None for mod in m.modules() if isinstance(mod, RoPE))  # base untouched
    fixed = rope_variant_model_for(m, 8, "dynamic", 2.0)(32)
    assert next(mod for mod in fixed.modules() if isinstance(mod, RoPE)).factor == 2.0


def test_lr_flags_replace_the_task_recipes_rate_and_grid():
    """MQAR's recipe names its own rate and grid; --lr and --lr-grid, when given, hold for every task."""
    from relpos.cli import build_parser
    from relpos.commands.compare import build_config

    base = build_config(build_parser().parse_args(["compare", "--preset", "default"])).validate()
    assert base.train_settings("mqar")["lr_grid"] == [1e-3, 3e-3] and "lr_grid" not in base.train_settings("copy")
    cfg = build_config(build_parser().parse_args(["compare", "--preset", "default", "--lr-grid", "2e-3,1e-3"]))
    assert "lr_grid" not in cfg.validate().train_settings("mqar") and cfg.fit.lr_grid == [2e-3, 1e-3]
    cfg = build_config(build_parser().parse_args(["compare", "--preset", "default", "--lr", "5e-4"])).validate()
    assert cfg.train_settings("mqar")["lr"] == 5e-4 == cfg.train_settings("copy")["lr"]


def test_trained_position_values_export_for_the_explorer(tmp_path):
    from relpos.report.trained_export import main as export_main
    from relpos.report.trained_export import trained_positions

    out = tmp_path / "sweep"
    run_tiny(out, schemes=["t5", "alibi"], tasks=["lm"])
    assert trained_positions(out)["schemes"] == {}  # the tiny sweep fits nothing: nothing is exported
    d = json.loads((out / "results.json").read_text())
    for r in d["runs"]:
        r["train"]["fit"]["fitted"] = True
    (out / "results.json").write_text(json.dumps(d))
    target = tmp_path / "trained.json"
    assert export_main([str(out), str(target)]) == 0
    doc = json.loads(target.read_text())
    assert doc["version"] == 1 and "task lm" in doc["made_by"]
    assert set(doc["schemes"]) == {"t5"}  # ALiBi's slopes are fixed: nothing learned to show
    t5 = doc["schemes"]["t5"]
    assert (t5["n_heads"], t5["head_dim"]) == (2, 8) and t5["options"]["max_distance"] == 17
    assert len(t5["state"]["table"]) == 32 and len(t5["state"]["table"][0]) == 2
    # unfitted runs are exported on request and marked; the slim results keep metrics, drop curves
    assert trained_positions(out, fitted_only=True)["schemes"]["t5"]["fitted"] is True
    for r in d["runs"]:
        r["train"]["fit"]["fitted"] = False
    (out / "results.json").write_text(json.dumps(d))
    assert trained_positions(out)["schemes"] == {}
    assert export_main(["--include-unfitted", str(out), str(target), "--results", str(tmp_path / "slim.json")]) == 0
    doc = json.loads(target.read_text())
    assert doc["schemes"]["t5"]["fitted"] is False and "every trained model" in doc["made_by"]
    slim = json.loads((tmp_path / "slim.json").read_text())
    assert [r["metrics"] for r in slim["runs"]] == [r["metrics"] for r in d["runs"]]
    assert all("loss_curve" not in r["train"] and "history" not in r["train"]["fit"] for r in slim["runs"])
    from relpos.explorer.results import check_results, parse_results

    check_results(parse_results((tmp_path / "slim.json").read_bytes(), "slim.json"), "slim.json")
