"""``relpos compare`` across processes: resume after SIGKILL, the ci preset end to end, the Ray and torchrun
runners."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relpos.compare.sweep import compare
from relpos.compare.presets import preset
from relpos.compare.store import Store
from tests.experiments.compare_support import REPO, quiet, tiny


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
    from relpos.compare.runner import RayRunner

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
    from relpos.compare.runner import make_runner

    with pytest.raises(ValueError, match=r"pip install 'relpos\[ray\]'"):
        make_runner("ray")


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
