"""The SQLite results store: atomic jobs, no overwrites, concurrent writers, fingerprints."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3

import pytest

from relpos.compare.store import ConfigMismatchError, Store

FP = "abc123"


def fake_result(job: str, scheme: str = "alibi", task: str = "lm", seed: int = 0, n_meas: int = 3,
                variants=(None,), loss: float = 1.0) -> dict:
    runs = []
    for v in variants:
        runs.append({
            "scheme": scheme, "variant": v, "task": task, "seed": seed, "train_len": 8,
            "measurements": [
                {"protocol": "window", "eval_len": 8 * (i + 1), "loss": loss + i, "bpb": (loss + i) / 0.693,
                 "ppl": 2.0, "accuracy": None, "token_accuracy": None, "bucket_start": -1, "bucket_end": -1,
                 "count": 10}
                for i in range(n_meas)
            ],
        })
    return {"job": job, "scheme": scheme, "task": task, "seed": seed, "randomized": False,
            "train": {"seconds": 1.5, "steps": 3, "loss_curve": [3.0, 2.0]}, "eval_seconds": 0.5, "runs": runs}


def test_roundtrip_and_no_overwrite(tmp_path):
    with Store(tmp_path / "r.sqlite") as st:
        assert st.bind(FP, {"a": 1}) is True
        assert st.bind(FP, {"a": 1}) is False
        assert st.write_job(FP, fake_result("lm/alibi/seed0", variants=(None, "yarn"))) is True
        assert st.done_jobs(FP) == {"lm/alibi/seed0"}
        # the same job again (two sweeps racing): kept as first written
        assert st.write_job(FP, fake_result("lm/alibi/seed0", loss=99.0)) is False
        runs = st.runs(FP)
        assert [(r["scheme"], r["variant"]) for r in runs] == [("alibi", None), ("alibi", "yarn")]
        assert [m["loss"] for m in runs[0]["measurements"]] == [1.0, 2.0, 3.0]
        assert st.jobs(FP)[0]["info"]["train"]["loss_curve"] == [3.0, 2.0]
        assert st.integrity_check() == "ok"
        assert st.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_one_row_per_run_and_measurement(tmp_path):
    with Store(tmp_path / "r.sqlite") as st:
        st.bind(FP, {})
        st.write_job(FP, fake_result("lm/rope/seed0", scheme="rope", variants=(None, "pi", "ntk"), n_meas=4))
        n = st.conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]
        assert n == 3 * 4
        with pytest.raises(sqlite3.IntegrityError):  # the key is unique
            st.conn.execute("INSERT INTO measurements SELECT * FROM measurements LIMIT 1")


def test_job_is_all_or_nothing(tmp_path):
    bad = fake_result("lm/t5/seed0", scheme="t5")
    bad["runs"][0]["measurements"].append({"protocol": "window"})  # missing eval_len -> KeyError mid-write
    with Store(tmp_path / "r.sqlite") as st:
        st.bind(FP, {})
        with pytest.raises(KeyError):
            st.write_job(FP, bad)
        assert st.done_jobs(FP) == set()
        assert st.conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0] == 0
        assert st.conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0


def test_other_fingerprint_is_refused_with_the_difference(tmp_path):
    with Store(tmp_path / "r.sqlite") as st:
        st.bind(FP, {"train": {"steps": 10}, "model": {"d_model": 8}})
        st.write_job(FP, fake_result("lm/alibi/seed0"))
        with pytest.raises(ConfigMismatchError, match=r"train\.steps: 10 -> 20"):
            st.bind("other", {"train": {"steps": 20}, "model": {"d_model": 8}})
        assert st.done_jobs(FP) == {"lm/alibi/seed0"}


def test_failures_are_listed_until_the_job_succeeds(tmp_path):
    with Store(tmp_path / "r.sqlite") as st:
        st.bind(FP, {})
        st.record_failure(FP, "lm/fire/seed0", "Traceback ...\nValueError: boom")
        assert [f["job"] for f in st.failures(FP)] == ["lm/fire/seed0"]
        st.write_job(FP, fake_result("lm/fire/seed0", scheme="fire"))
        assert st.failures(FP) == []


def _writer(path: str, worker: int, n: int) -> None:
    st = Store(path, timeout=60)
    st.bind(FP, {})
    for i in range(n):
        st.write_job(FP, fake_result(f"lm/s{worker}/seed{i}", scheme=f"s{worker}", seed=i, n_meas=20))
    st.close()


def test_concurrent_writers(tmp_path):
    path = str(tmp_path / "r.sqlite")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 6)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with Store(path) as st:
        assert len(st.done_jobs(FP)) == 18
        assert st.conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0] == 18 * 20
        assert st.integrity_check() == "ok"
