"""End to end: a tiny sweep, resume (also after SIGKILL), config mismatch, bad input, results.json."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from relpos.cli import main
from relpos.experiments.compare import compare, plan
from relpos.experiments.presets import preset
from relpos.experiments.runner import Job, SerialRunner, model_config_for, rope_variant_model_for
from relpos.experiments.store import ConfigMismatchError, Store

REPO = Path(__file__).resolve().parents[2]


def tiny(**kw):
    cfg = preset("ci")
    cfg.schemes = ["alibi", "rope"]
    cfg.tasks = ["lm", "copy"]
    cfg.steps = 3
    cfg.d_model, cfg.n_heads, cfg.n_layers = 16, 2, 1
    cfg.rope_variants = ["pi", "yarn"]
    cfg.lm = {"train_len": 8, "eval_factors": [1, 2], "eval_tokens": 64, "train_bytes": 20_000}
    cfg.algorithmic = {"train_len": 3, "eval_factors": [1, 2], "n_eval": 4}
    cfg.workers = 1
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg


def quiet(_msg):
    pass


def run_tiny(out, **kw):
    return compare(tiny(**kw), out, runner=SerialRunner(), progress=False, log=quiet)


def digest(folder: Path) -> dict:
    """Hashes of the files in a folder (SQLite's own -wal/-shm companions left out: a reader
    may create them empty; the database's contents are compared through results.sqlite)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())
            if p.is_file() and not p.name.endswith(("-wal", "-shm"))}


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


def _db_jobs(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").exists(), reason="needs /proc to find worker processes")
def test_resume_after_sigkill(tmp_path):
    """Kill -9 a running sweep after its first stored run: the database is intact, the
    workers go away, and the rerun skips what was stored and finishes the rest."""
    out = tmp_path / "killed"
    argv = [sys.executable, "-m", "relpos.cli", "compare", "--preset", "ci", "--out", str(out), "--no-progress",
            "--schemes", "nope,alibi,t5,kerple-log,sandwich,rope", "--tasks", "lm", "--rope-variants", "none",
            "--steps", "15", "--eval-tokens", "256", "--workers", "2"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True)
    db = out / "results.sqlite"
    try:
        deadline = time.time() + 240
        while _db_jobs(db) < 1:
            assert p.poll() is None, p.stderr.read().decode()[-3000:]
            assert time.time() < deadline, "no run finished in time"
            time.sleep(0.05)
        workers = _children(p.pid)
        os.kill(p.pid, signal.SIGKILL)  # the sweep only: its workers must notice and exit
        p.wait(30)
        deadline = time.time() + 20
        while any(_alive(w) for w in workers) and time.time() < deadline:
            time.sleep(0.2)
        assert not [w for w in workers if _alive(w)], "orphaned worker processes kept running"
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.stdout.close()
        p.stderr.close()
    stored = _db_jobs(db)
    assert 1 <= stored < 6
    with Store(db) as st:
        assert st.integrity_check() == "ok"
    r = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"{stored} of 6 runs already" in r.stderr
    with Store(db) as st:
        assert st.integrity_check() == "ok"
        assert st.conn.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 6
        assert st.conn.execute("SELECT COUNT(DISTINCT job) FROM runs").fetchone()[0] == 6
    d = json.loads((out / "results.json").read_text())
    assert {r["scheme"] for r in d["runs"]} == {"nope", "alibi", "t5", "kerple-log", "sandwich", "rope"}


@pytest.mark.slow
def test_ci_preset_end_to_end(tmp_path):
    """`relpos compare --preset ci` as CI runs it: every default scheme, exit status 0, all files."""
    out = tmp_path / "ci"
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "relpos.cli", "compare", "--preset", "ci", "--out", str(out),
                        "--workers", "2", "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    took = time.time() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads((out / "results.json").read_text())
    cfg = preset("ci").validate()
    assert {(x["task"], x["scheme"]) for x in d["runs"]} == {(t, s) for t in cfg.tasks for s in cfg.schemes}
    assert {x["variant"] for x in d["runs"] if x["scheme"] == "rope"} == {None, "pi", "ntk", "dynamic", "yarn"}
    assert "bits per byte" in r.stdout and "exact-match accuracy" in r.stdout
    print(f"ci preset took {took:.0f} s")


@pytest.mark.slow
def test_ray_runner_on_a_local_instance(tmp_path):
    """--runner ray against a local Ray instance (skipped where Ray, an optional extra, is absent)."""
    pytest.importorskip("ray")
    from relpos.experiments.runner import RayRunner

    s = compare(tiny(schemes=["alibi", "nope"], tasks=["copy"]), tmp_path / "ray", runner=RayRunner(threads=1),
                progress=False, log=quiet, plots=False)
    assert s.finished == 2 and not s.failed
    with Store(tmp_path / "ray" / "results.sqlite") as st:
        assert st.done_jobs(s.fingerprint) == {"copy/alibi/seed0", "copy/nope/seed0"}


def test_ray_runner_without_ray_is_a_clear_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *a, **kw):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    from relpos.experiments.runner import make_runner

    with pytest.raises(ValueError, match=r"pip install 'relpos\[ray\]'"):
        make_runner("ray")


def test_report_only_rebuilds_from_the_database(swept, capsys):
    out, s = swept
    (out / "results.json").unlink()
    (out / "lm_loss_vs_length.png").unlink()
    assert main(["compare", "--out", str(out), "--report-only"]) == 0
    assert "bits per byte" in capsys.readouterr().out
    d = json.loads((out / "results.json").read_text())
    assert d["fingerprint"] == s.fingerprint and len(d["runs"]) >= 8
    assert (out / "lm_loss_vs_length.png").exists()


def test_report_only_needs_results(tmp_path, capsys):
    assert main(["compare", "--out", str(tmp_path), "--report-only"]) == 2
    assert "holds no relpos compare results" in capsys.readouterr().err


@pytest.mark.slow
def test_torchrun_runner_trains_with_two_processes(tmp_path):
    """--runner torchrun: one run trained by 2 data-parallel processes, evaluated by rank 0."""
    out = tmp_path / "tr"
    r = subprocess.run([sys.executable, "-m", "relpos.cli", "compare", "--preset", "ci", "--schemes", "alibi",
                        "--tasks", "copy", "--steps", "4", "--runner", "torchrun", "--nproc", "2", "--out", str(out),
                        "--no-plots", "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads((out / "results.json").read_text())
    (run,) = d["runs"]
    assert run["train"]["world_size"] == 2 and run["train"]["steps"] == 4
    assert [m["eval_len"] for m in run["metrics"]] == [6, 12, 18]


def test_a_failing_run_does_not_stop_the_sweep(tmp_path, monkeypatch):
    import relpos.experiments.runner as R

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
    from relpos.checkpoint import load

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


def test_trained_position_values_export_for_the_explorer(tmp_path):
    from relpos.experiments.trained_export import main as export_main
    from relpos.experiments.trained_export import trained_positions

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
