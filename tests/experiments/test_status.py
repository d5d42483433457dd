"""``relpos.compare.status``: what a folder holds for a plan (``compare --dry-run``)."""

from __future__ import annotations

import pytest

from relpos.compare.presets import preset
from relpos.compare.status import folder_status, status_lines
from relpos.compare.store import NotAStoreError, Store
from tests.experiments.test_store import fake_result


def _result(job: str, *, fitted: bool, cpu: float) -> dict:
    task, scheme, seed = job.split("/")
    r = fake_result(job, scheme=scheme, task=task, seed=int(seed.removeprefix("seed")))
    r["train"]["fit"] = {"fitted": fitted}
    r["cpu_seconds"] = cpu
    return r


def _bound(path):
    """The ci preset, its fingerprint and its store at ``path`` (bound to it)."""
    cfg = preset("ci")
    fp = cfg.fingerprint()
    st = Store(path / "results.sqlite")
    st.bind(fp, cfg.protocol())
    return cfg, fp, st


def test_done_running_failed_and_to_run(tmp_path):
    keys = ["lm/rope/seed0", "lm/alibi/seed0", "copy/rope/seed0", "copy/alibi/seed0", "copy/nope/seed0"]
    cfg, fp, st = _bound(tmp_path)
    with st:
        st.write_job(fp, _result("lm/rope/seed0", fitted=True, cpu=12.0))
        st.write_job(fp, _result("copy/rope/seed0", fitted=False, cpu=30.5))
        # stored as the runner stores it: a whole traceback, the exception on its last line
        st.record_failure(fp, "copy/alibi/seed0", "Traceback (most recent call last):\n  File ...\nRuntimeError: boom\n")
        assert st.claim(fp, "lm/alibi/seed0")  # this process holds it: live
        status = folder_status(cfg, tmp_path, keys)
    assert status.state == "same"
    assert [j.state for j in status.jobs] == ["done", "running", "done", "failed", "to run"]
    assert status.counts() == {"done": 2, "running": 1, "failed": 1, "to run": 1}
    assert status.cpu_by_task() == {"lm": 12.0, "copy": 30.5}
    lines = status_lines(status)
    assert lines[0] == (f"{tmp_path}: 2 of 5 done (1 fitted), 42 CPU-seconds so far (lm 12, copy 30); "
                        "1 running, 1 failed, 1 to run; about 73 CPU-seconds left at each task's mean so far")
    assert lines[1].split() == ["lm/rope/seed0", "done:", "fitted,", "12", "CPU-s"]
    assert "not fitted" in lines[3] and "RuntimeError: boom" in lines[4] and "traceback" not in lines[4]
    assert lines[5].split() == ["copy/nope/seed0", "to", "run"]


def test_cpu_left_is_estimated_per_task_and_says_what_it_cannot_estimate(tmp_path):
    keys = ["lm/rope/seed0", "lm/alibi/seed0", "lm/nope/seed0", "copy/rope/seed0", "copy/alibi/seed0"]
    cfg, fp, st = _bound(tmp_path)
    with st:
        st.write_job(fp, _result("lm/rope/seed0", fitted=True, cpu=10.0))
        st.write_job(fp, _result("lm/alibi/seed0", fitted=True, cpu=30.0))
        status = folder_status(cfg, tmp_path, keys)
    assert status.cpu_left() == (20.0, ["copy"])  # one lm run at the lm mean; copy has no finished run
    assert status_lines(status)[0].endswith("at least 20 CPU-seconds left (at each task's mean so far) plus copy, "
                                            "which have no finished run to estimate from")
    only_copy_left = [k for k in keys if k.startswith("copy/")] + ["lm/rope/seed0", "lm/alibi/seed0"]
    assert status_lines(folder_status(cfg, tmp_path, only_copy_left))[0].endswith(
        "; no estimate of the time left yet (copy: no finished run)")  # never "about 0 CPU-seconds left"
    with Store(tmp_path / "results.sqlite") as st:
        for k in keys[2:]:
            st.write_job(fp, _result(k, fitted=True, cpu=5.0))
    assert "seconds left" not in status_lines(folder_status(cfg, tmp_path, keys))[0]  # all done: no estimate


def test_other_configuration_and_empty_folder(tmp_path):
    full, ci = preset("full"), preset("ci")
    with Store(tmp_path / "results.sqlite") as st:
        st.bind(full.fingerprint(), full.protocol())
    status = folder_status(ci, tmp_path, ["lm/rope/seed0"])
    assert status.state == "other" and status.folder_fingerprint == full.fingerprint()
    assert "another configuration" in status_lines(status)[0]
    fresh = folder_status(ci, tmp_path / "new", ["lm/rope/seed0"])
    assert fresh.state == "empty" and not (tmp_path / "new").exists()  # reading creates nothing


def test_foreign_database_is_refused_untouched(tmp_path):
    (tmp_path / "results.sqlite").write_text("not ours")
    with pytest.raises(NotAStoreError, match="not a relpos results database"):
        folder_status(preset("ci"), tmp_path, ["lm/rope/seed0"])
    assert (tmp_path / "results.sqlite").read_text() == "not ours"


def test_compare_dry_run_shows_the_folder(tmp_path, capsys):
    from relpos.cli import main

    cfg = preset("ci").validate()
    with Store(tmp_path / "results.sqlite") as st:
        st.bind(cfg.fingerprint(), cfg.protocol())
        st.write_job(cfg.fingerprint(), _result("copy/rope/seed0", fitted=True, cpu=7.0))
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["compare", "--preset", "ci", "--out", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "1 of 22 done (1 fitted), 7 CPU-seconds so far (copy 7); 0 running, 0 failed, 21 to run" in out
    assert any(line.split()[:3] == ["copy/rope/seed0", "done:", "fitted,"] for line in out.splitlines())
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no config.json, no report: nothing written
