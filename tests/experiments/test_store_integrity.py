"""Store integrity (issue 10): foreign and empty databases, corruption, job leases, file hygiene.

Each test failed before: ``Store`` created its tables inside any SQLite file,
``--report-only`` replaced a good results.json with an empty one, corruption was
found only mid-sweep, two sweeps trained every job twice, and results.json was
written with mode 0600 and left ``*.tmp`` files behind.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest

from relpos.compare.sweep import compare, rebuild_report
from relpos.compare.runner import Job, SerialRunner
from relpos.compare.store import CorruptStoreError, NotAStoreError, Store, is_results_store
from relpos.outdir import clean_stale_tmp, write_json_atomic
from tests.experiments.test_compare import quiet, tiny
from tests.experiments.test_store import FP, fake_result


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("swept") / "run"
    compare(tiny(schemes=["alibi"], tasks=["copy"], rope_variants=[]), out, runner=SerialRunner(),
            progress=False, log=quiet, plots=False)
    return out


def copy_of(swept, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(swept, out)
    return out


def foreign_db(path):
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE users (name TEXT)")
    con.execute("INSERT INTO users VALUES ('ada')")
    con.commit()
    con.close()
    return path.read_bytes()


# ------------------------------------------------------------- foreign / empty


def test_foreign_database_is_refused_and_untouched(tmp_path):
    db = tmp_path / "results.sqlite"
    before = foreign_db(db)
    with pytest.raises(NotAStoreError, match="users"):
        Store(db)
    assert db.read_bytes() == before  # no relpos tables, no WAL switch
    assert not is_results_store(db)


def test_non_sqlite_file_is_refused(tmp_path):
    db = tmp_path / "results.sqlite"
    db.write_bytes(b"hello, I am a text file\n" * 10)
    with pytest.raises(NotAStoreError, match="not an SQLite file"):
        Store(db)
    assert db.read_bytes() == b"hello, I am a text file\n" * 10


def test_empty_database_is_not_a_store_for_reading(tmp_path):
    db = tmp_path / "results.sqlite"
    db.write_bytes(b"")
    with pytest.raises(NotAStoreError, match="empty"):
        Store(db, create=False)
    with pytest.raises(FileNotFoundError):
        Store(tmp_path / "missing.sqlite", create=False)
    assert not (tmp_path / "missing.sqlite").exists()
    Store(db).close()  # for writing, an empty file is a fresh database
    assert is_results_store(db)


@pytest.mark.parametrize("kind", ["empty", "foreign"])
def test_report_only_refuses_and_keeps_results_json(swept, tmp_path, kind):
    out = copy_of(swept, tmp_path)
    good = (out / "results.json").read_bytes()
    assert len(json.loads(good)["runs"]) > 0
    for extra in ("results.sqlite-wal", "results.sqlite-shm"):
        (out / extra).unlink(missing_ok=True)
    db = out / "results.sqlite"
    db.unlink()
    if kind == "empty":
        db.write_bytes(b"")
    else:
        foreign_db(db)
    before = db.read_bytes()
    with pytest.raises(NotAStoreError):
        rebuild_report(out, plots=False)
    assert (out / "results.json").read_bytes() == good
    assert db.read_bytes() == before


def test_report_only_never_shrinks_results_json(swept, tmp_path):
    out = copy_of(swept, tmp_path)
    rj = json.loads((out / "results.json").read_text())
    rj["runs"] = rj["runs"] * 3  # a results.json that holds more than this database
    (out / "results.json").write_text(json.dumps(rj))
    before = (out / "results.json").read_bytes()
    with pytest.raises(ValueError, match="refusing to overwrite"):
        rebuild_report(out, plots=False)
    assert (out / "results.json").read_bytes() == before


# ------------------------------------------------------------- corruption


def test_corruption_in_the_middle_is_found_at_open(tmp_path):
    db = tmp_path / "r.sqlite"
    with Store(db) as st:
        st.bind(FP, {})
        for i in range(40):
            st.write_job(FP, fake_result(f"lm/alibi/seed{i}", seed=i, n_meas=20))
        st.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(db.read_bytes())
    page = 4096
    assert len(data) > 8 * page
    mid = (len(data) // page // 2) * page
    data[mid: mid + page] = b"\xa5" * page  # one whole page in the middle
    db.write_bytes(bytes(data))
    with pytest.raises(CorruptStoreError, match=r"damaged.*recover"):
        Store(db)
    assert db.read_bytes() == bytes(data)


# ------------------------------------------------------------- leases


def test_lease_claim_heartbeat_release(tmp_path):
    db = tmp_path / "r.sqlite"
    a, b = Store(db), Store(db)
    b.owner = "otherhost:4242"  # another machine sharing the folder
    try:
        assert a.claim(FP, "j1") is True
        assert a.claim(FP, "j1") is True  # idempotent for its owner
        assert b.claim(FP, "j1") is False
        assert set(a.leases(FP)) == {"j1"}
        a.release(FP, "j1")
        assert b.claim(FP, "j1", ttl=0.05) is True
        time.sleep(0.1)
        assert a.claim(FP, "j1") is True  # b's lease ran out
        assert a.heartbeat(FP, ttl=100) == 1
        a.write_job(FP, fake_result("j1"))  # storing the job frees its lease ...
        assert a.leases(FP) == {}
        assert b.claim(FP, "j1") is False  # ... and a finished job is never claimed again
    finally:
        a.close()
        b.close()


def test_lease_of_a_dead_process_is_free(tmp_path):
    db = tmp_path / "r.sqlite"
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    with Store(db) as a:
        with Store(db) as dead:
            dead.owner = f"{dead.owner.split(':')[0]}:{p.pid}"
            dead.conn.execute("INSERT INTO leases VALUES (?,?,?,?,?,?)",
                              (FP, "j", dead.owner, dead.owner.split(":")[0], p.pid, time.time() + 1e6))
        assert a.claim(FP, "j") is True


def test_keep_alive_extends_and_releases(tmp_path):
    with Store(tmp_path / "r.sqlite") as st:
        st.claim(FP, "j", ttl=0.5)
        with st.keep_alive(FP, interval=0.05, ttl=0.5):
            time.sleep(1.0)
            assert "j" in st.leases(FP)  # would have expired without the heartbeat
        assert st.leases(FP) == {}


def _worker(db, jobs, q):
    st = Store(db)
    st.owner = f"{st.owner}:{os.getpid()}"
    ran = []
    for j in jobs:
        if st.claim(FP, j):
            time.sleep(0.05)  # "training"
            st.write_job(FP, fake_result(j))
            ran.append(j)
    st.close()
    q.put(ran)


def test_two_processes_share_the_jobs(tmp_path):
    db = tmp_path / "r.sqlite"
    Store(db).close()
    jobs = [f"lm/alibi/seed{i}" for i in range(12)]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_worker, args=(str(db), jobs, q)) for _ in range(2)]
    for p in ps:
        p.start()
    ran = [q.get(timeout=120) for _ in ps]
    for p in ps:
        p.join(timeout=60)
    assert sorted(ran[0] + ran[1]) == sorted(jobs)  # every job ran exactly once
    with Store(db) as st:
        assert st.done_jobs(FP) == set(jobs)


def test_runners_skip_jobs_they_cannot_claim(monkeypatch):
    from relpos.compare import runner

    ran = []
    monkeypatch.setattr(runner, "run_job", lambda job, cfg, **k: ran.append(job["scheme"]) or {"ok": 1})
    jobs = [Job(scheme=s, task="copy", seed=0) for s in ("alibi", "rope", "nope")]
    events = list(SerialRunner().run(jobs, {}, claim=lambda j: j.scheme != "rope"))
    assert ran == ["alibi", "nope"] and [e[0].scheme for e in events] == ["alibi", "nope"]


# ------------------------------------------------------------- files


def test_results_and_config_json_have_normal_permissions(swept):
    for name in ("results.json", "config.json", "results.sqlite"):
        assert (swept / name).stat().st_mode & 0o777 == 0o666 & ~_umask(), name
    assert not list(swept.glob("*.tmp"))


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


def test_leftover_tmp_files_are_cleaned(tmp_path):
    target = tmp_path / "results.json"
    old = tmp_path / "results.json.abc123.tmp"  # an older writer's leftover
    old.write_text("{")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    import socket

    dead = tmp_path / f"results.json.{socket.gethostname()}.{p.pid}.deadbeef.tmp"
    dead.write_text("{")
    live = tmp_path / f"results.json.{socket.gethostname()}.{os.getpid()}.cafe.tmp"
    live.write_text("{")
    fresh = tmp_path / "results.json.fresh.tmp"  # may belong to a writer right now
    fresh.write_text("{")
    write_json_atomic(target, {"a": 1})
    assert json.loads(target.read_text()) == {"a": 1}
    assert not old.exists() and not dead.exists()
    assert live.exists() and fresh.exists()
    assert clean_stale_tmp(target) == 0


@pytest.mark.slow
def test_two_compare_processes_train_each_job_once(tmp_path):
    """Two `relpos compare` processes on one folder share the jobs (issue 10: before, both trained all)."""
    from pathlib import Path

    src = str(Path(__file__).resolve().parents[2] / "src")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=src)
    out = tmp_path / "shared"
    cmd = [sys.executable, "-m", "relpos.cli", "compare", "--preset", "ci", "--schemes", "alibi,nope,sandwich,rope",
           "--tasks", "copy", "--seeds", "0,1", "--randomized", "none", "--rope-variants", "none", "--steps", "20",
           "--runner", "serial", "--no-plots", "--no-progress", "--out", str(out)]
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    second = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    logs = [p.communicate(timeout=600) for p in (first, second)]
    assert first.returncode == 0 and second.returncode == 0, [e[-2000:] for _, e in logs]
    done = [line for _, err in logs for line in err.splitlines() if " done in " in line]
    assert len(done) == 8, done  # 4 schemes x 2 seeds, each trained by exactly one process
    with Store(out / "results.sqlite", create=False) as st:
        fp = st.get_meta("fingerprint")
        assert len(st.done_jobs(fp)) == 8 and st.leases(fp) == {}


# ------------------------------------------------------------ what relpos did not create (issue 47)


@pytest.mark.parametrize("sql, name", [
    ("CREATE TRIGGER t AFTER INSERT ON runs BEGIN DELETE FROM runs; END", "trigger 't'"),
    ("CREATE VIEW v AS SELECT 1", "view 'v'"),
    ("CREATE TABLE extra (x)", "table 'extra'"),
    ("ALTER TABLE failures ADD COLUMN note TEXT", "table 'failures' with other columns"),
])
def test_a_store_with_objects_relpos_did_not_create_is_refused_before_any_write(tmp_path, sql, name):
    db = tmp_path / "results.sqlite"
    with Store(db) as st:
        st.bind(FP, {"k": 1})
        st.write_job(FP, fake_result("lm/rope/seed0"))
    con = sqlite3.connect(db)
    con.execute(sql)
    con.commit()
    con.close()
    before = db.read_bytes()
    with pytest.raises(NotAStoreError, match=name):
        Store(db)
    assert not is_results_store(db) and db.read_bytes() == before


@pytest.mark.parametrize("side", ["", "-wal", "-shm", "-journal"])
def test_a_linked_store_or_side_file_is_refused_before_sqlite_opens_it(tmp_path, side):
    victim = tmp_path / "victim"
    victim.write_bytes(b"")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / f"results.sqlite{side}").symlink_to(victim)
    with pytest.raises(NotAStoreError, match=f"results.sqlite{side} is a symbolic link"):
        Store(tmp_path / "out" / "results.sqlite")
    assert victim.read_bytes() == b"" and sorted(os.listdir(tmp_path / "out")) == [f"results.sqlite{side}"]
