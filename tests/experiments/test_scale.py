"""The scale check: its cells, its summary (Spearman's rho with an interval, schemes that move), its CLI."""

from __future__ import annotations

import json

import pytest

from relpos.cli import main
from relpos.compare.presets import QUICK_SCHEMES, SCALE_STEPS, preset, scale_cell
from relpos.compare.scale import cell_dir, cells, scale_markdown, scale_summary


def test_cells_cover_three_sizes_and_two_lengths_with_equal_tokens_per_step():
    assert cells() == [(64, 64), (128, 64), (256, 64), (64, 256), (128, 256), (256, 256)]
    fps = set()
    for d, L in cells():
        cfg = scale_cell(d, L).validate()
        assert cfg.schemes == list(QUICK_SCHEMES) and cfg.tasks == ["lm"] and cfg.seeds == [0, 1, 2]
        assert cfg.batch_size * L == 1024 and cfg.steps == SCALE_STEPS and cfg.lm["train_len"] == L
        assert cfg.lr_tries("lm") == [cfg.lr]  # one rate, the same for every scheme and size
        # trained until it fits (the default preset's LM plateau rule), not a fixed budget: 1,000 cosine steps
        # fitted none of the smallest cell's runs
        assert cfg.fit.lm_schedule == "plateau" and cfg.fit.early_stop and cfg.fit.lm_patience == 3
        fps.add(cfg.fingerprint())
    assert len(fps) == 6  # each cell its own folder and store
    assert preset("scale").preset == "scale"


def test_model_sizes_are_about_a_tenth_half_and_two_million_parameters():
    from relpos.model import ModelConfig, TransformerLM

    n = {}
    for d in (64, 128, 256):
        cfg = scale_cell(d, 64)
        n[d] = sum(p.numel() for p in TransformerLM(ModelConfig(vocab_size=259, scheme="nope", max_len=64,
                                                               **cfg.model_settings("lm"))).parameters())
    assert 0.08e6 < n[64] < 0.15e6 and 0.35e6 < n[128] < 0.6e6 and 1.4e6 < n[256] < 2.4e6


def _fake_cell(out, d, L, scores):
    runs = []
    for s, per_seed in scores.items():
        for seed, ratio in enumerate(per_seed):
            runs.append({"scheme": s, "variant": None, "label": s, "task": "lm", "seed": seed, "train_len": L,
                         "job": f"lm/{s}/seed{seed}", "metrics": [{"eval_len": L, "bpb": 2.0},
                                                                  {"eval_len": 8 * L, "bpb": 2.0 * ratio}],
                         "train": {"params": d * 1000, "fit": {"fitted": True}}})
    f = cell_dir(out, d, L) / "results.json"
    f.parent.mkdir(parents=True)
    f.write_text(json.dumps({"runs": runs}))


def test_summary_gives_rho_with_an_interval_and_names_the_schemes_that_move(tmp_path):
    small = {"a": [1.0, 1.01, 1.0], "b": [1.5, 1.52, 1.49], "c": [2.0, 2.1, 2.05], "d": [3.0, 3.1, 2.9]}
    large = {"a": [1.0, 1.0, 1.01], "b": [3.5, 3.6, 3.4], "c": [2.0, 2.05, 2.1], "d": [3.0, 2.9, 3.1]}
    _fake_cell(tmp_path, 64, 64, small)
    _fake_cell(tmp_path, 256, 64, large)
    s = scale_summary(tmp_path)
    assert not s["complete"] and set(s["cells"]) == {"d64-L64", "d256-L64"}
    (r,) = s["rho"]
    assert (r["a"], r["b"], r["schemes"]) == (64, 256, 4)
    assert r["rho"] == pytest.approx(0.4) and r["lo"] <= r["rho"] <= r["hi"]
    assert r["moved"] == {"b": (2, 4)}  # b: 2nd with the small model, last with the large one
    md = scale_markdown(s)
    assert "Incomplete" in md and "b 2->4" in md and "| 64 | d64 vs d256 | 0.40 |" in md
    assert "| fitted runs |" in md and "| training steps |" in md and "| CPU-hours |" in md


def test_a_scheme_with_one_fitted_seed_is_left_out_of_the_rho(tmp_path):
    _fake_cell(tmp_path, 64, 64, {"a": [1.0, 1.0], "b": [2.0, 2.0], "c": [3.0, 3.0], "d": [4.0]})
    _fake_cell(tmp_path, 128, 64, {"a": [1.0, 1.0], "b": [2.0, 2.0], "c": [3.0, 3.0], "d": [0.5, 0.5]})
    (r,) = scale_summary(tmp_path)["rho"]
    assert r["schemes"] == 3 and r["rho"] == 1.0


def test_cli_scale_refuses_flags_that_would_change_its_cells(tmp_path, capsys):
    rc = main(["compare", "--preset", "scale", "--schemes", "rope", "--out", str(tmp_path / "s")])
    assert rc == 2 and "--schemes" in capsys.readouterr().err and not (tmp_path / "s").exists()
