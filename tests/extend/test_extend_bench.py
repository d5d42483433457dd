"""The extend benchmark end to end on a tiny compare folder (issue 50, part A): every (recipe, seed, rate, K) is
stored, a rerun trains nothing, a killed run resumes to the same numbers, bad folders are refused in one line."""

from __future__ import annotations

import json
import sqlite3

import pytest
import torch

from relpos.extend import bench
from relpos.extend.bench import run_extend
from relpos.extend.spec import ExtendSpec


def _spec(folder, out, **kw):
    kw = {"recipes": ("direct", "pi", "yarn", "alibi"), "lr_grid": (1e-3, 3e-3), "k_fractions": (0.34, 1.0),
          "allow_unfitted": True, **kw}
    return ExtendSpec(source=str(folder), out=str(out), **kw)


def _rows(out):
    con = sqlite3.connect(out / "extend.sqlite")
    try:
        return {(r, s, lr, k): json.loads(row) for r, s, lr, k, row in
                con.execute("SELECT recipe, seed, lr, k, row FROM rows")}
    finally:
        con.close()


def test_end_to_end_every_cell_stored_and_rerun_trains_nothing(folder, tmp_path, monkeypatch):
    out = tmp_path / "ext"
    res = run_extend(_spec(folder, out), progress=False, log=lambda s: None)
    assert res["plan"].grid == [0, 1, 3]
    rows = _rows(out)
    # per seed: direct, pi, yarn at K=0 and (2 rates x K 1, 3); alibi (reference) at K=0 and 2 rates x K=3
    assert len(rows) == 2 * (3 * 5 + 3)
    assert ("alibi", 0, 1e-3, 1) not in rows and ("alibi", 0, 3e-3, 3) in rows
    r = rows[("pi", 1, 3e-3, 3)]
    assert set(r["lengths"]) == {"8", "32", "64", "128"} and r["val_loss"] > 0
    assert len(r["lengths"]["8"]["windows"]) == len(r["lengths"]["8"]["far"])
    text = (out / "report.md").read_text()
    assert "Far-position ratio against K" in text and "not testable here" in text  # unfitted models: no claims
    assert json.loads((out / "results.json").read_text())["claims"]

    def boom(*a, **k):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr("relpos.extend.finetune.finetune_run", boom)
    lines = []
    run_extend(_spec(folder, out), progress=False, log=lines.append)
    assert any("already in" in s for s in lines)


def test_killed_run_resumes_to_the_same_numbers(folder, tmp_path, monkeypatch):
    spec = dict(recipes=("pi",), lr_grid=(3e-3,))
    clean = tmp_path / "clean"
    run_extend(_spec(folder, clean, **spec), progress=False, log=lambda s: None, plots=False)
    from relpos.extend import finetune

    real, calls = finetune.measure, []

    def dies(*a, **k):
        calls.append(1)
        if len(calls) == 4:  # seed 1's zero-shot row is stored; its fine-tuning run dies at K=1
            raise RuntimeError("killed")
        return real(*a, **k)

    killed = tmp_path / "killed"
    monkeypatch.setattr(finetune, "measure", dies)
    with pytest.raises(RuntimeError):
        run_extend(_spec(folder, killed, **spec), progress=False, log=lambda s: None, plots=False)
    monkeypatch.setattr(finetune, "measure", real)
    assert 0 < len(_rows(killed)) < len(_rows(clean))
    run_extend(_spec(folder, killed, **spec), progress=False, log=lambda s: None, plots=False)
    a, b = _rows(clean), _rows(killed)
    assert a.keys() == b.keys()
    for key in a:
        assert a[key]["lengths"] == b[key]["lengths"] and a[key]["val_loss"] == b[key]["val_loss"]


def test_folder_without_fitted_models_is_refused_in_one_line(folder, tmp_path):
    with pytest.raises(ValueError, match="no fitted language models") as e:
        run_extend(_spec(folder, tmp_path / "o", allow_unfitted=False), progress=False)
    assert "\n" not in str(e.value)
    with pytest.raises(FileNotFoundError, match="no relpos compare results"):
        run_extend(_spec(tmp_path, tmp_path / "o2"), progress=False)
    assert not (tmp_path / "o").exists() and not (tmp_path / "o2").exists()


def test_dry_run_states_the_estimate_and_writes_nothing(folder, tmp_path):
    out = tmp_path / "dry"
    res = run_extend(_spec(folder, out), dry_run=True)
    text = "\n".join(res["lines"])
    assert "hours" in text and "fine-tuning steps" in text and "K grid [0, 1, 3]" in text
    assert not out.exists()
    e = bench.estimate(res["plan"])
    assert e["steps"] == 2 * (3 * 2 * 3 + 2 * 3) and e["units"] == 2 * (4 + 3 * 2 + 2)


def test_another_protocol_is_refused_then_moved_aside_with_force(folder, tmp_path):
    out = tmp_path / "p"
    run_extend(_spec(folder, out, recipes=("direct",), lr_grid=(1e-3,), k_fractions=(0.34,)), progress=False,
               log=lambda s: None, plots=False)
    with pytest.raises(ValueError, match="another protocol"):
        run_extend(_spec(folder, out, recipes=("direct",), lr_grid=(3e-3,), k_fractions=(0.34,)), progress=False)
    run_extend(_spec(folder, out, recipes=("direct",), lr_grid=(3e-3,), k_fractions=(0.34,), force=True),
               progress=False, log=lambda s: None, plots=False)
    assert len(list(out.glob("previous-*/extend.sqlite"))) == 1


def test_foreign_out_folder_is_refused(folder, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    from relpos.outdir import OutputDirError

    with pytest.raises(OutputDirError):
        run_extend(_spec(folder, tmp_path / "mine"), progress=False)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"


def test_recipes_change_the_rotary_model_beyond_L(folder):
    from relpos.extend.finetune import load_source_model
    from relpos.extend.recipes import apply_recipe, recipe

    path = next((folder / "models" / "lm" / "rope").iterdir())
    x = torch.randint(0, 256, (1, 32))
    outs = {}
    for name in ("direct", "pi", "yarn"):
        m, _ = load_source_model(path, 128)
        apply_recipe(m, recipe(name), 8, 4)
        with torch.no_grad():
            outs[name] = m(x)
    assert not torch.equal(outs["direct"], outs["pi"]) and not torch.equal(outs["pi"], outs["yarn"])
    with pytest.raises(ValueError, match="rotary"):
        m, _ = load_source_model(next((folder / "models" / "lm" / "alibi").iterdir()), 128)
        apply_recipe(m, recipe("pi"), 8, 4)
