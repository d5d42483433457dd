"""Merging compare folders: each task from the last folder that holds it; refused when the models differ."""

from __future__ import annotations

import json

import pytest

from relpos.compare.merge import main, merge_folders, merge_results


def _run(task, label, seed, acc):
    return {"scheme": label, "variant": None, "label": label, "task": task, "seed": seed, "train_len": 8,
            "job": f"{task}/{label}/seed{seed}", "metrics": [{"eval_len": 8, "accuracy": acc, "bpb": None},
                                                             {"eval_len": 16, "accuracy": acc / 2, "bpb": None}],
            "position_loss": [], "fixed_target": [], "span": None,
            "train": {"ms_per_step": 10.0, "seconds": 1.0, "fit": {"fitted": acc >= 0.95, "score": acc}}}


def _res(fp, tasks, runs, *, d_model=64, reverse_steps=4000, failures=()):
    cfg = {"preset": "default", "d_model": d_model, "n_layers": 2, "n_heads": 4, "tasks": tasks,
           "task_train": {"copy": {"steps": 4000}, "reverse": {"steps": reverse_steps}},
           "task_options": {"copy": {"alphabet": 8}, "reverse": {"alphabet": 8}},
           "fit": {"target": 0.95}, "algorithmic": {"train_len": 8}}
    return {"version": 2, "fingerprint": fp, "config": cfg, "runs": runs, "failures": list(failures)}


def _sources():
    old = _res("aaa", ["copy", "reverse"], [_run("copy", "rope", 0, 1.0), _run("reverse", "nope", 0, 0.6)],
               failures=[{"job": "reverse/alibi/seed0", "error": "x"}, {"job": "copy/t5/seed0", "error": "y"}])
    new = _res("bbb", ["reverse"], [_run("reverse", "nope", 0, 0.99)], reverse_steps=16000)
    return [("old", old), ("new", new)]


def test_each_task_comes_from_the_last_folder_that_holds_it():
    m = merge_results(_sources())
    by_task = {r["task"]: r for r in m["runs"]}
    assert by_task["copy"]["train"]["fit"]["score"] == 1.0
    assert by_task["reverse"]["train"]["fit"]["score"] == 0.99  # the rerun wins
    assert len(m["runs"]) == 2
    assert m["fingerprint"] == "aaa+bbb"
    assert m["sources"] == [{"folder": "old", "fingerprint": "aaa", "tasks": ["copy"]},
                            {"folder": "new", "fingerprint": "bbb", "tasks": ["reverse"]}]
    # task settings follow the task's folder; the failure of a replaced task is dropped
    assert m["config"]["task_train"]["reverse"]["steps"] == 16000
    assert m["config"]["task_train"]["copy"]["steps"] == 4000
    assert m["config"]["tasks"] == ["copy", "reverse"]
    assert [f["job"] for f in m["failures"]] == ["copy/t5/seed0"]


def test_folders_with_different_models_are_refused():
    srcs = _sources()
    srcs[1][1]["config"]["d_model"] = 128
    with pytest.raises(ValueError, match=r"d_model: 64 -> 128"):
        merge_results(srcs)
    with pytest.raises(ValueError, match="at least one"):
        merge_results([])


def _write(folder, res):
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps(res))


def test_merge_folders_writes_a_report_and_leaves_sources_alone(tmp_path):
    (a, ra), (b, rb) = _sources()
    _write(tmp_path / "a", ra)
    _write(tmp_path / "b", rb)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    out = tmp_path / "merged"
    merge_folders(out, [tmp_path / "a", tmp_path / "b"], plots=False)
    report = (out / "report.md").read_text()
    assert "merged: reverse from" in report and "fingerprint `bbb`" in report
    assert json.loads((out / "results.json").read_text())["fingerprint"] == "aaa+bbb"
    assert {p: p.read_bytes() for p in before} == before
    merge_folders(out, [tmp_path / "a"], plots=False)  # an earlier merge may be replaced


def test_cli_errors_are_one_line_and_foreign_output_is_refused(tmp_path, capsys):
    (_, ra), _ = _sources()
    _write(tmp_path / "a", ra)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    assert main([str(mine), str(tmp_path / "a"), "--no-plots"]) == 2
    assert (mine / "notes.txt").read_text() == "keep" and not (mine / "results.json").exists()
    assert main([str(tmp_path / "out"), str(tmp_path / "missing")]) == 2
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results.json").write_text("[1, 2]")
    assert main([str(tmp_path / "out"), str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("error: ") for line in err)
    assert main([str(tmp_path / "out"), str(tmp_path / "a"), "--no-plots"]) == 0


def test_same_task_settings_combine_seeds_and_the_later_folder_wins_a_shared_job():
    (_, old), (_, new) = _sources()
    new["runs"] += [_run("copy", "rope", 1, 0.97), _run("copy", "rope", 0, 0.5)]  # seed 1 new; seed 0 redone
    new["failures"] = [{"job": "copy/t5/seed1", "error": "z"}]
    m = merge_results([("old", old), ("new", new)])
    copy = {r["seed"]: r["train"]["fit"]["score"] for r in m["runs"] if r["task"] == "copy"}
    assert copy == {0: 0.5, 1: 0.97}  # both folders' seeds; the later folder's seed 0
    assert [r["train"]["fit"]["score"] for r in m["runs"] if r["task"] == "reverse"] == [0.99]  # settings differ
    assert m["sources"] == [{"folder": "old", "fingerprint": "aaa", "tasks": ["copy"]},
                            {"folder": "new", "fingerprint": "bbb", "tasks": ["copy", "reverse"]}]
    assert sorted(f["job"] for f in m["failures"]) == ["copy/t5/seed0", "copy/t5/seed1"]
    # a changed copy setting in the later folder leaves the earlier folder's copy runs out
    new["config"]["task_options"]["copy"] = {"alphabet": 16}
    m = merge_results([("old", old), ("new", new)])
    assert {r["seed"] for r in m["runs"] if r["task"] == "copy"} == {0, 1}
    assert [r["train"]["fit"]["score"] for r in m["runs"] if r["task"] == "copy" and r["seed"] == 0] == [0.5]
    assert m["sources"][0]["tasks"] == []


def test_the_lm_fit_rule_belongs_to_language_modelling_only():
    old = _res("aaa", ["lm", "copy"], [_run("lm", "rope", 0, 0.5), _run("copy", "rope", 0, 1.0)])
    old["config"]["fit"] = {"target": 0.95, "lm_patience": 5}  # from before lm_schedule: a cosine
    new = _res("bbb", ["lm", "copy"], [_run("lm", "rope", 1, 0.6)])
    new["config"]["fit"] = {"target": 0.95, "lm_patience": 5, "lm_schedule": "plateau", "lm_cooldown": 0.25}
    m = merge_results([("old", old), ("new", new)])  # the LM rule differs: not a shared setting
    assert [r["job"] for r in m["runs"]] == ["copy/rope/seed0", "lm/rope/seed1"]  # old LM runs are not joined
    assert m["config"]["fit"] == {"target": 0.95, "lm_patience": 5, "lm_schedule": "plateau", "lm_cooldown": 0.25}
    new["config"]["fit"]["target"] = 0.9  # the algorithmic gate is still shared
    with pytest.raises(ValueError, match=r"fit.target: 0.95 -> 0.9"):
        merge_results([("old", old), ("new", new)])


def test_a_folder_is_named_only_for_the_tasks_it_holds_runs_of():
    (_, old), (_, new) = _sources()
    later = _res("ccc", ["copy"], [_run("copy", "rope", 1, 0.97)])
    # "new" shares copy's settings with both copy folders but holds no copy job: not a source of copy
    m = merge_results([("old", old), ("new", new), ("later", later)])
    assert {r["seed"] for r in m["runs"] if r["task"] == "copy"} == {0, 1}
    assert [s["tasks"] for s in m["sources"]] == [["copy"], ["reverse"], ["copy"]]
    assert m["fingerprint"] == "aaa+bbb+ccc"


def test_a_learning_rate_grid_is_a_setting_of_the_tasks_it_applies_to():
    """A folder with the full preset's grid joins an earlier folder without one on a task with its own grid
    (MQAR tried the same rates in both) but not on a task the preset's grid applied to (copy)."""
    plain = _res("aaa", ["copy", "mqar"], [_run("copy", "rope", 0, 1.0), _run("mqar", "rope", 0, 0.99)])
    full = _res("bbb", ["copy", "mqar"], [_run("copy", "rope", 1, 0.98), _run("mqar", "nope", 0, 0.97)])
    for res, grid in ((plain, []), (full, [2e-3, 1e-3, 3e-3])):
        res["config"]["fit"] = {"target": 0.95, "lr_grid": grid}
        res["config"]["task_train"] = {"copy": {"lr": 2e-3}, "mqar": {"lr": 1e-3, "lr_grid": [1e-3, 3e-3]}}
    m = merge_results([("plain", plain), ("full", full)])
    assert sorted(r["job"] for r in m["runs"]) == ["copy/rope/seed1", "mqar/nope/seed0", "mqar/rope/seed0"]
    assert m["sources"] == [{"folder": "plain", "fingerprint": "aaa", "tasks": ["mqar"]},
                            {"folder": "full", "fingerprint": "bbb", "tasks": ["copy", "mqar"]}]
    # the merged configuration says which rates each task tried
    assert m["config"]["fit"]["lr_grid"] == []
    assert m["config"]["task_train"]["copy"]["lr_grid"] == [2e-3, 1e-3, 3e-3]
    assert m["config"]["task_train"]["mqar"]["lr_grid"] == [1e-3, 3e-3]
    # the other way round, copy comes from the folder without a grid, and says so
    m = merge_results([("full", full), ("plain", plain)])
    assert "lr_grid" not in m["config"]["task_train"]["copy"]
    assert sorted(r["job"] for r in m["runs"]) == ["copy/rope/seed0", "mqar/nope/seed0", "mqar/rope/seed0"]


def test_language_models_trained_at_another_rate_are_not_joined():
    """The LM recipe lives at the top level of a configuration (no task_train entry): it is the task's setting."""
    a = _res("aaa", ["lm"], [_run("lm", "rope", 0, 0.5)])
    b = _res("bbb", ["lm"], [_run("lm", "rope", 1, 0.6)])
    a["config"]["lr"], b["config"]["lr"] = 3e-3, 6e-3
    m = merge_results([("a", a), ("b", b)])
    assert [r["job"] for r in m["runs"]] == ["lm/rope/seed1"]
    assert m["config"]["lr"] == 3e-3 and m["config"]["task_train"]["lm"] == {"lr": 6e-3}  # what lm trained at
    b["config"]["lr"] = 3e-3
    assert len(merge_results([("a", a), ("b", b)])["runs"]) == 2


def test_language_models_of_another_grid_are_not_joined():
    """Protocol 3: language modelling tries the whole grid like every task, so its grid is one of its settings."""
    a = _res("aaa", ["lm"], [_run("lm", "rope", 0, 0.5)])
    b = _res("bbb", ["lm"], [_run("lm", "rope", 1, 0.6)])
    a["config"]["fit"] = {"target": 0.95, "lr_grid": []}
    b["config"]["fit"] = {"target": 0.95, "lr_grid": [2e-3, 1e-3, 3e-3]}
    m = merge_results([("a", a), ("b", b)])
    assert [r["job"] for r in m["runs"]] == ["lm/rope/seed1"]
    assert m["config"]["task_train"]["lm"]["lr_grid"] == [2e-3, 1e-3, 3e-3]  # what lm tried
    a["config"]["fit"]["lr_grid"] = [2e-3, 1e-3, 3e-3]
    assert len(merge_results([("a", a), ("b", b)])["runs"]) == 2
