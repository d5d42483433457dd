"""``relpos.compare.reuse``: runs of another folder are copied only where training them here would repeat
them exactly, and a copied run equals one trained afresh."""

from __future__ import annotations

import copy

import pytest

from relpos.cli import main
from relpos.compare.sweep import compare
from relpos.compare.fitting import FitConfig
from relpos.compare.reuse import same_tries, task_settings
from relpos.compare.runner import SerialRunner
from relpos.compare.store import Store
from tests.experiments.test_compare import quiet, tiny

#: timing and provenance: everything else of a stored job must be equal between a copy and a fresh run
_VOLATILE = {"seconds", "seconds_all_tries", "ms_per_step", "tokens_per_s", "eval_seconds", "cpu_seconds",
             "reused_from", "finished_at", "train_seconds"}


def cfg_with(target: float, grid: list[float], copy_steps: int = 12, copy_grid: list[float] | None = None):
    cfg = tiny(schemes=["alibi", "rope"], rope_variants=["pi"])  # rope: two views of one trained model
    cfg.task_train = {"copy": {"steps": copy_steps, "batch_size": 8, "lr": 3e-3,
                               **({"lr_grid": copy_grid} if copy_grid else {})}}
    cfg.fit = FitConfig(target=target, val_every=4, lr_grid=grid)
    return cfg


def run(cfg, out, reuse=()):
    return compare(cfg, out, runner=SerialRunner(), progress=False, plots=False, log=quiet, reuse=list(reuse))


def stored(out):
    with Store(out / "results.sqlite", create=False) as st:
        fp = st.get_meta("fingerprint")
        jobs = {j["job"]: j for j in st.jobs(fp)}
        runs = {(r["job"], r["variant"]): r["measurements"] for r in st.runs(fp)}
    return jobs, runs


def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k not in _VOLATILE}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x


def test_task_settings_ignore_only_the_grid():
    a = cfg_with(0.0, []).validate().protocol()
    b = cfg_with(0.0, [3e-3, 1e-3]).validate().protocol()
    assert a != b and task_settings(a, "copy") == task_settings(b, "copy")
    c = cfg_with(0.0, [], copy_steps=13).validate().protocol()
    assert task_settings(a, "copy") != task_settings(c, "copy") and task_settings(a, "lm") == task_settings(c, "lm")


def test_same_tries():
    tried = [{"lr": 3e-3, "fitted": False}, {"lr": 1e-3, "fitted": True}]
    assert same_tries(tried, 3e-3, [1e-3, 3e-3], task="copy")  # every rate, in the same order
    assert not same_tries(tried, 3e-3, [3e-3, 1e-3, 2e-3], task="copy")  # here it would also try 2e-3
    assert not same_tries(tried[:1], 3e-3, [3e-3, 1e-3], task="copy")  # fitted or not, every rate runs
    assert not same_tries(tried, 1e-3, [3e-3, 1e-3], task="copy")  # here 1e-3 comes first
    assert same_tries([{"lr": 3e-3, "fitted": False}], 3e-3, [], task="copy")  # the only rate either way
    assert not same_tries([], 3e-3, [], task="copy")  # no record of what it tried: train it
    assert not same_tries([{"lr": 6e-3}], 6e-3, [1e-3, 6e-3], task="lm")  # language models get the grid too


def test_reused_runs_equal_fresh_ones_and_only_those_are_reused(tmp_path):
    # A: a grid of two rates (gate 0), kept models
    a = tmp_path / "a"
    run(cfg_with(0.0, [1e-3, 3e-3]), a)
    # B: the grid written in the other order: another fingerprint, the same tries (the task's rate first)
    b = tmp_path / "b"
    s = run(cfg_with(0.0, [3e-3, 1e-3]), b, reuse=[a])
    assert s.finished == 0 and s.skipped == s.total == 4
    jobs_b, runs_b = stored(b)
    assert all(j["info"]["reused_from"]["folder"] == str(a) for j in jobs_b.values())
    for j in jobs_b.values():
        ckpt = j["info"]["train"].get("checkpoint")
        assert ckpt is None or (b / ckpt).is_dir()  # the saved model came along
    # C: B's configuration trained afresh: the same measurements and fit records
    c = tmp_path / "c"
    run(cfg_with(0.0, [3e-3, 1e-3]), c)
    jobs_c, runs_c = stored(c)
    assert runs_b == runs_c
    assert {k: strip(j["info"]) for k, j in jobs_b.items()} == {k: strip(j["info"]) for k, j in jobs_c.items()}


def test_runs_that_would_train_differently_are_trained(tmp_path):
    # A: one rate; B: copy's own grid adds 1e-3 -> copy is trained, lm (its one rate in both) reused
    a = tmp_path / "a"
    run(cfg_with(1.0, []), a)
    b = tmp_path / "b"
    before = copy.deepcopy(stored(a))
    s = run(cfg_with(1.0, [], copy_grid=[3e-3, 1e-3]), b, reuse=[a])
    jobs_b, _ = stored(b)
    reused = sorted(k for k, j in jobs_b.items() if "reused_from" in j["info"])
    assert reused == [k for k in sorted(jobs_b) if k.startswith("lm/")] and s.finished == len(jobs_b) - len(reused)
    assert [t["lr"] for t in jobs_b["copy/alibi/seed0"]["info"]["train"]["fit"]["lr_tries"]] == [3e-3, 1e-3]
    assert stored(a) == before  # the source is only read
    # without kept models here, a copied run does not point at a model this folder lacks
    e = tmp_path / "e"
    compare(cfg_with(1.0, [], copy_grid=[3e-3, 1e-3]), e, runner=SerialRunner(), progress=False, plots=False,
            log=quiet, reuse=[a], keep_models=False)
    assert stored(a)[0]["lm/alibi/seed0"]["info"]["train"]["checkpoint"]
    assert stored(e)[0]["lm/alibi/seed0"]["info"]["train"]["checkpoint"] is None and not (e / "models").exists()
    # another gate: no task is decided the same, nothing is reused
    d = tmp_path / "d"
    run(cfg_with(0.5, []), d, reuse=[a])
    assert not any("reused_from" in j["info"] for j in stored(d)[0].values())


def test_cli_dry_run_says_what_reuse_would_copy(tmp_path, capsys):
    args = ["compare", "--preset", "ci", "--schemes", "alibi", "--tasks", "lm", "--steps", "3", "--rope-variants",
            "none", "--workers", "1", "--no-progress", "--no-plots"]
    src, dst = tmp_path / "src", tmp_path / "dst"
    assert main(args + ["--out", str(src)]) == 0
    capsys.readouterr()
    # a grid of the one rate: another fingerprint, the same try -> the one run would be copied
    assert main(args + ["--lr-grid", "3e-3", "--out", str(dst), "--dry-run", "--reuse", str(src)]) == 0
    lines = capsys.readouterr().out.splitlines()
    cpu = stored(src)[0]["lm/alibi/seed0"]["info"]["cpu_seconds"]
    assert lines[2] == f"--reuse {src}: 1 runs would be copied ({cpu:,.0f} CPU-seconds)"
    assert not dst.exists()  # a dry run writes nothing
    assert main(args + ["--lr-grid", "3e-3", "--out", str(dst), "--reuse", str(src)]) == 0
    assert "reused_from" in stored(dst)[0]["lm/alibi/seed0"]["info"]


def test_cli_names_a_folder_without_results(tmp_path, capsys):
    rc = main(["compare", "--preset", "ci", "--out", str(tmp_path / "o"), "--reuse", str(tmp_path / "none")])
    assert rc == 2 and "--reuse" in capsys.readouterr().err and not (tmp_path / "o").exists()


@pytest.mark.parametrize("content", [b"not a database"])
def test_foreign_source_is_refused_untouched(tmp_path, content):
    src = tmp_path / "src"
    src.mkdir()
    (src / "results.sqlite").write_bytes(content)
    from relpos.compare.store import NotAStoreError

    with pytest.raises(NotAStoreError):
        run(cfg_with(0.0, []), tmp_path / "o", reuse=[src])
    assert (src / "results.sqlite").read_bytes() == content


def test_runs_validated_differently_are_copied_only_for_the_tasks_named_and_say_so(tmp_path):
    """Issue 49: the second protocol-3 pass validates on more examples and keeps the best check's model; its
    finished language-modelling runs are merged, not retrained, only when asked, and each records how it was
    validated instead."""
    from relpos.compare.reuse import reusable

    a = tmp_path / "a"
    run(cfg_with(0.0, []), a)
    new = cfg_with(0.0, [])
    new.fit.keep_best = True
    new.lm = {**new.lm, "n_val": new.lm.get("n_val", 32) + 8}
    new.validate()
    keys = ["lm/alibi/seed0", "copy/alibi/seed0"]
    assert reusable(new, keys, a) == []  # another validation: nothing is the same run
    got = {r["job"]: r for r in reusable(new, keys, a, validated_before=["lm"])}
    assert sorted(got) == ["lm/alibi/seed0"]  # copy's validation changed too, but copy was not named
    vb = got["lm/alibi/seed0"]["train"]["fit"]["validated_before"]
    assert vb["fingerprint"] == cfg_with(0.0, []).validate().fingerprint()
    assert sorted(vb["differs"]) == ["fit.keep_best: (absent) -> True", "task.n_val: 32 -> 40"]
    other = cfg_with(0.0, [])  # a training difference is never waved through
    other.fit.keep_best, other.steps = True, other.steps + 1
    other.task_train["copy"]["steps"] += 1
    assert reusable(other.validate(), keys, a, validated_before=["lm", "copy"]) == []


@pytest.mark.parametrize("extra, says", [
    (["--reuse-validated-before", "lm,nonsense"], "names unknown tasks: nonsense"),
    (["--reuse-validated-before", "lm"], "needs --reuse FOLDER"),
])
def test_cli_refuses_a_bad_reuse_validated_before(tmp_path, capsys, extra, says):
    rc = main(["compare", "--preset", "ci", "--out", str(tmp_path / "o"), *extra])
    assert rc == 2 and says in capsys.readouterr().err and not (tmp_path / "o").exists()
