"""End to end: a tiny sweep, resume, config mismatch, --force, --report-only, --out safety, results.json, the
kept models (processes and runners: test_compare_processes.py; flags and plans: test_compare_config.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from relpos.cli import main
from relpos.compare.sweep import compare
from relpos.compare.runner import SerialRunner
from relpos.compare.store import ConfigMismatchError, Store
from tests.experiments.compare_support import REPO, digest, quiet, run_tiny, tiny


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    s = run_tiny(out)
    return out, s


def test_sweep_writes_everything(swept):
    out, s = swept
    assert s.total == 4 and s.finished == 4 and not s.failed
    for name in ("results.sqlite", "results.json", "config.json", "report.md", "lm_loss_vs_length.png",
                 "lm_loss_by_position.png", "lm_fixed_target.png", "accuracy_vs_length.png"):
        assert (out / name).exists(), name
    report = (out / "report.md").read_text()
    for png in out.glob("*.png"):
        assert f"]({png.name})" in report
    with Store(out / "results.sqlite") as st:
        assert st.integrity_check() == "ok"
        assert len(st.done_jobs(s.fingerprint)) == 4


def test_results_json_schema(swept):
    out, s = swept
    d = json.loads((out / "results.json").read_text())
    assert d["version"] == 1 and d["fingerprint"] == s.fingerprint
    assert d["config"]["schemes"] == ["alibi", "rope"]
    runs = d["runs"]
    # 2 schemes x 2 tasks, plus 2 RoPE scalings per task
    assert len(runs) == 4 + 4
    keys = {(r["task"], r["scheme"], r["variant"]) for r in runs}
    assert ("lm", "rope", "yarn") in keys and ("copy", "rope", "pi") in keys and ("lm", "alibi", None) in keys
    for r in runs:
        assert {"scheme", "variant", "task", "seed", "train_len", "metrics", "position_loss"} <= set(r)
        assert isinstance(r["seed"], int) and isinstance(r["train_len"], int)
        for m in r["metrics"]:
            assert {"eval_len", "loss", "bpb", "ppl", "accuracy"} <= set(m)
        if r["task"] == "lm":
            assert r["train_len"] == 8
            assert [m["eval_len"] for m in r["metrics"]] == [8, 16]
            assert all(m["bpb"] > 0 and m["ppl"] > 1 and m["accuracy"] is None for m in r["metrics"])
            assert {p["eval_len"] for p in r["position_loss"]} == {8, 16}
            assert all({"bucket_start", "bucket_end", "bpb"} <= set(p) for p in r["position_loss"])
            assert [f["context_len"] for f in r["fixed_target"]] == [8, 16]
        else:
            assert r["train_len"] == 3
            assert [m["eval_len"] for m in r["metrics"]] == [3, 6]
            assert all(0 <= m["accuracy"] <= 1 and m["bpb"] is None for m in r["metrics"])
            assert r["position_loss"] == []


def test_rerun_skips_everything_and_changes_no_result(swept):
    out, s = swept
    with Store(out / "results.sqlite") as st:
        before = st.conn.execute("SELECT * FROM measurements ORDER BY 1,2,3,4,5,6,7,8,9").fetchall()
    s2 = run_tiny(out)
    assert s2.skipped == 4 and s2.finished == 0
    with Store(out / "results.sqlite") as st:
        after = st.conn.execute("SELECT * FROM measurements ORDER BY 1,2,3,4,5,6,7,8,9").fetchall()
    assert before == after


def test_adding_a_scheme_reuses_the_folder(swept, tmp_path):
    out, _ = swept
    s = run_tiny(out, schemes=["alibi", "rope", "nope"], tasks=["copy"])
    assert s.skipped == 2 and s.finished == 1
    d = json.loads((out / "results.json").read_text())
    assert ("copy", "nope") in {(r["task"], r["scheme"]) for r in d["runs"]}


def test_different_configuration_is_refused_and_nothing_changes(swept):
    out, _ = swept
    before = digest(out)
    with pytest.raises(ConfigMismatchError, match=r"different configuration.*steps: 3 -> 4.*--force"):
        run_tiny(out, steps=4)
    assert digest(out) == before
    # through the command line: exit status 2 and one clear line
    r = subprocess.run([sys.executable, "-m", "relpos.cli", "compare", "--preset", "ci", "--out", str(out),
                        "--no-progress"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and "different configuration" in r.stderr and "Traceback" not in r.stderr
    assert digest(out) == before


def test_force_moves_old_results_aside(tmp_path):
    out = tmp_path / "o"
    run_tiny(out, schemes=["alibi"], tasks=["copy"])
    old = digest(out)
    with pytest.raises(ConfigMismatchError):
        run_tiny(out, schemes=["alibi"], tasks=["copy"], steps=4)
    s = compare(tiny(schemes=["alibi"], tasks=["copy"], steps=4), out, runner=SerialRunner(), force=True,
                progress=False, log=quiet, plots=False)
    assert s.finished == 1
    prev = [p for p in out.iterdir() if p.name.startswith("previous-")]
    assert len(prev) == 1
    assert digest(prev[0])["results.json"] == old["results.json"]


def test_report_only_rebuilds_from_the_database(swept, capsys):
    out, s = swept
    (out / "results.json").unlink()
    (out / "lm_loss_vs_length.png").unlink()
    assert main(["compare", "--out", str(out), "--report-only"]) == 0
    assert "bits per byte" in capsys.readouterr().out
    d = json.loads((out / "results.json").read_text())
    assert d["fingerprint"] == s.fingerprint and len(d["runs"]) >= 8
    assert (out / "lm_loss_vs_length.png").exists()


def test_report_only_narrows_to_tasks_and_refuses_config_flags(swept, capsys):
    """``--report-only --tasks lm`` reports only the language models (the finished task while the next one
    trains) and keeps the rest in the database; a flag that would change the configuration is refused by name
    (it used to be ignored silently)."""
    out, s = swept
    assert main(["compare", "--out", str(out), "--report-only", "--tasks", "lm"]) == 0
    d = json.loads((out / "results.json").read_text())
    assert {r["task"] for r in d["runs"]} == {"lm"} and "copy exact 2L" not in (out / "report.md").read_text()
    assert "2 training runs" in capsys.readouterr().out  # alibi and rope on lm, of the 4 jobs
    assert main(["compare", "--out", str(out), "--report-only"]) == 0
    assert {r["task"] for r in json.loads((out / "results.json").read_text())["runs"]} == {"lm", "copy"}
    assert "copy exact 2L" in (out / "report.md").read_text()
    before = (out / "results.json").read_bytes()
    for flags, name in ((["--seeds", "1"], "--seeds"), (["--schemes", "t5", "--steps", "9"], "--schemes, --steps")):
        assert main(["compare", "--out", str(out), "--report-only", *flags]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"does not take {name} (accepted:" in err[0], err
    assert main(["compare", "--out", str(out), "--report-only", "--tasks", "parity"]) == 2
    err = capsys.readouterr().err
    assert "--tasks parity: not a task of" in err and "lm, copy" in err
    assert (out / "results.json").read_bytes() == before


def test_report_only_needs_results(tmp_path, capsys):
    assert main(["compare", "--out", str(tmp_path), "--report-only"]) == 2
    assert "holds no relpos compare results" in capsys.readouterr().err


def test_a_failing_run_does_not_stop_the_sweep(tmp_path, monkeypatch):
    import relpos.compare.runner as R

    real = R.run_job

    def flaky(job, cfg, **kw):
        if job["scheme"] == "alibi":
            raise RuntimeError("boom in alibi")
        return real(job, cfg, **kw)

    monkeypatch.setattr(R, "run_job", flaky)
    out = tmp_path / "f"
    s = compare(tiny(schemes=["alibi", "nope"], tasks=["copy"]), out, runner=SerialRunner(), progress=False,
                log=quiet)
    assert s.failed == ["copy/alibi/seed0"] and s.finished == 1
    d = json.loads((out / "results.json").read_text())
    assert [f["job"] for f in d["failures"]] == ["copy/alibi/seed0"] and "boom in alibi" in d["failures"][0]["error"]
    assert "boom in alibi" in (out / "report.md").read_text()
    monkeypatch.setattr(R, "run_job", real)  # the next invocation retries it
    s = compare(tiny(schemes=["alibi", "nope"], tasks=["copy"]), out, runner=SerialRunner(), progress=False,
                log=quiet)
    assert s.finished == 1 and s.skipped == 1 and not s.failed
    assert json.loads((out / "results.json").read_text())["failures"] == []


def test_out_refuses_a_foreign_folder_a_file_and_the_current_folder(tmp_path, monkeypatch, capsys):
    """--out safety: compare writes only into a new folder, an empty one, or its own earlier output."""
    from relpos.outdir import OutputDirError

    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    afile = tmp_path / "file.txt"
    afile.write_text("keep me too")
    for bad in (foreign, afile):
        with pytest.raises(OutputDirError, match="Nothing was changed"):
            run_tiny(bad)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"] and afile.read_text() == "keep me too"
    monkeypatch.chdir(tmp_path)
    assert main(["compare", "--preset", "ci", "--out", "."]) == 2
    assert "current folder" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    s = run_tiny(empty)  # an empty folder is fine, and so is rerunning into its own output
    assert s.finished and run_tiny(empty).skipped == s.total


def test_trained_models_are_kept_and_load(swept, tmp_path):
    from relpos.training.checkpoint import load

    out, s = swept
    d = json.loads((out / "results.json").read_text())
    for r in d["runs"]:
        ck = r["train"]["checkpoint"]
        assert ck == f"models/{r['task']}/{r['scheme']}/seed{r['seed']}"
        model, mcfg = load(out / ck)
        assert mcfg.scheme == r["scheme"] and model(torch.zeros(1, 3, dtype=torch.long)).shape[-1] == mcfg.vocab_size
    none = compare(tiny(schemes=["alibi"], tasks=["copy"]), tmp_path / "n", runner=SerialRunner(), progress=False,
                   log=quiet, keep_models=False)
    assert not (none.out_dir / "models").exists()


def test_a_sliced_invocation_does_not_narrow_the_folder_record(tmp_path):
    """Two invocations on one folder, one scheme each: config.json, results.json and the report describe both,
    in the order they came."""
    out = tmp_path / "o"
    run_tiny(out, schemes=["rope"], tasks=["copy"], rope_variants=[])
    run_tiny(out, schemes=["alibi"], tasks=["copy"], rope_variants=[])
    saved = json.loads((out / "config.json").read_text())
    assert saved["schemes"] == ["rope", "alibi"]
    assert json.loads((out / "results.json").read_text())["config"]["schemes"] == ["rope", "alibi"]
    table = (out / "report.md").read_text().split("## copy", 1)[1]  # the task table: configuration order
    assert table.index("| rope |") < table.index("| alibi |")
    # another configuration starts its own record
    run_tiny(tmp_path / "p", schemes=["alibi"], tasks=["copy"], rope_variants=[], steps=4)
    assert json.loads((tmp_path / "p" / "config.json").read_text())["schemes"] == ["alibi"]


def test_the_progress_line_times_every_learning_rate_try(tmp_path, monkeypatch):
    """A job's "done in" (and so the time left) is its whole time: every try of the rate grid and its evaluation,
    not only the kept try's training (a two-rate MQAR job read 476 s for 1,038 s of work)."""
    import relpos.compare.runner as R

    real = R.run_job

    def timed(job, cfg, **kw):
        res = real(job, cfg, **kw)
        res["train"].update(seconds=100.0, seconds_all_tries=250.0)
        res["eval_seconds"] = 5.0
        return res

    monkeypatch.setattr(R, "run_job", timed)
    lines: list[str] = []
    compare(tiny(schemes=["alibi"], tasks=["copy"]), tmp_path / "p", runner=SerialRunner(), progress=False,
            log=lines.append)
    done = [x for x in lines if " done in " in x]
    assert done and "done in 255.0 s" in done[0], done
