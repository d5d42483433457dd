"""Fault class "data loss": nothing relpos did not create (or already stored) is lost or overwritten.

Issue 29 items 4 (unwritable --out found after training), 6 (race on a new folder), 7 (a damaged
database: one message, nothing created beside it), 10 (results.json shrinking) and 13 (compare
--out "").
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
from pathlib import Path

import pytest

from relpos.cli import main
from relpos.compare.sweep import compare, prepare_output
from relpos.compare.runner import SerialRunner
from relpos.compare.store import ConfigMismatchError, CorruptStoreError, NotAStoreError, Store
from relpos.outdir import OutputDirError
from tests.experiments.test_compare import quiet, tiny


def _tiny():
    return tiny(schemes=["alibi"], tasks=["copy"], rope_variants=[])


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("swept") / "out"
    compare(_tiny(), out, runner=SerialRunner(), progress=False, log=quiet)
    return out


def copy_of(swept, tmp_path) -> Path:
    dst = tmp_path / "out"
    shutil.copytree(swept, dst)
    return dst


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# ------------------------------------------------------------ item 10: results.json never shrinks


def test_rerun_refuses_to_shrink_a_hand_extended_results_json(swept, tmp_path):
    out = copy_of(swept, tmp_path)
    doc = json.loads((out / "results.json").read_text())
    extra = dict(doc["runs"][0], scheme="mine", label="mine")
    doc["runs"].append(extra)
    (out / "results.json").write_text(json.dumps(doc))
    before = (out / "results.json").read_bytes()
    with pytest.raises(ValueError, match="results.json holds 2 runs, 1 of them not in the database"):
        compare(_tiny(), out, runner=SerialRunner(), progress=False, log=quiet)
    assert (out / "results.json").read_bytes() == before


def test_database_moved_aside_then_rerun_keeps_results_json_and_creates_nothing(swept, tmp_path):
    out = copy_of(swept, tmp_path)
    os.rename(out / "results.sqlite", tmp_path / "aside.sqlite")
    before, listing = (out / "results.json").read_bytes(), names(out)
    with pytest.raises(ValueError, match="refusing to overwrite it"):
        compare(_tiny(), out, runner=SerialRunner(), progress=False, log=quiet)
    assert (out / "results.json").read_bytes() == before
    assert names(out) == listing  # no new, empty results.sqlite either


def test_the_recovery_advice_names_results_json_too(swept, tmp_path):
    out = copy_of(swept, tmp_path)
    db = out / "results.sqlite"
    db.write_bytes(db.read_bytes()[: db.stat().st_size // 2])
    with pytest.raises(CorruptStoreError, match="move results.sqlite and results.json aside"):
        Store(db)


# ------------------------------------------------------------ item 7: a damaged database


@pytest.mark.parametrize("extra", [[], ["--dry-run"], ["--report-only"]])
def test_damaged_database_one_message_nothing_created(swept, tmp_path, capsys, extra, monkeypatch):
    out = copy_of(swept, tmp_path)
    db = out / "results.sqlite"
    db.write_bytes(db.read_bytes()[: db.stat().st_size // 2])
    for p in out.glob("results.sqlite-*"):
        p.unlink()
    listing, data = names(out), db.read_bytes()
    monkeypatch.chdir(tmp_path)
    flags = (["--tasks", "copy"] if extra == ["--report-only"] else  # the configuration is the folder's
             ["--schemes", "alibi", "--tasks", "copy", "--rope-variants", "none", "--steps", "3", "--workers", "1"])
    rc = main(["compare", "--preset", "ci", *flags, "--out", str(out), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and "is damaged" in err[0] and "To recover" in err[0], err
    assert names(out) == listing, "a -wal/-shm file was created beside the damaged database"
    assert db.read_bytes() == data


# ------------------------------------------------------------ item 6: two compares on one new folder


def _prepare(out, lr, barrier, q):
    cfg = _tiny()
    cfg.lr = lr
    barrier.wait()
    try:
        prepare_output(cfg, out).close()
        q.put("ok")
    except ConfigMismatchError as e:
        q.put(f"{type(e).__name__}: {e}")


@pytest.mark.parametrize("same", [True, False])
def test_two_compares_started_together_on_a_new_folder(tmp_path, same):
    ctx = mp.get_context("fork")
    for trial in range(6):
        out = tmp_path / f"new{trial}"
        barrier, q = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_prepare, args=(out, 1e-3 if same or i == 0 else 2e-3, barrier, q))
                 for i in range(2)]
        for p in procs:
            p.start()
        got = sorted(q.get(timeout=60) for _ in procs)
        for p in procs:
            p.join(60)
        if same:
            assert got == ["ok", "ok"], got
        else:
            assert got[1] == "ok", got
            assert "different configuration" in got[0] and "not a relpos results database" not in got[0], got


def test_sqlite_file_without_tables_counts_as_being_created(tmp_path):
    """The state a second compare sees while the first has written SQLite's header but no tables yet."""
    import sqlite3

    db = tmp_path / "results.sqlite"
    con = sqlite3.connect(db)
    con.execute("PRAGMA user_version = 1")  # writes the header, no tables
    con.close()
    with Store(db) as st:
        assert st.bind("abc", {}) is True
    db2 = tmp_path / "b.sqlite"
    con = sqlite3.connect(db2)
    con.execute("PRAGMA user_version = 1")
    con.close()
    with pytest.raises(NotAStoreError, match="tables: none"):  # for reading, it holds no results
        Store(db2, create=False)


# ------------------------------------------------------------ item 4: an unwritable --out


def test_check_writable_refuses_a_read_only_folder(tmp_path):
    from relpos.outdir import check_writable

    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(OutputDirError, match="cannot write there"):
            check_writable(ro)
    finally:
        ro.chmod(0o755)
    assert names(ro) == []


def test_train_into_a_read_only_out_fails_before_the_first_step(tmp_path, capsys, monkeypatch):
    import relpos.training.loop as T

    def no_training(*a, **k):  # pragma: no cover - reached only when the check is missing
        raise AssertionError("training started")

    monkeypatch.setattr(T.Trainer, "__init__", no_training)
    monkeypatch.setattr("relpos.outdir.os.open", _raise_erofs)
    rc = main(["train", "--steps", "600", "--out", str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot write there (Read-only file system)" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def _raise_erofs(*a, **k):
    raise OSError(30, "Read-only file system")


def test_train_refuses_a_mount_point(tmp_path, capsys, monkeypatch):
    target = tmp_path / "mnt"
    target.mkdir()
    real_ismount = os.path.ismount
    monkeypatch.setattr("relpos.training.checkpoint.os.path.ismount", lambda p: Path(p) == target or real_ismount(p))
    rc = main(["train", "--steps", "600", "--out", str(target), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "is a mount point" in err and "Traceback" not in err


# ------------------------------------------------------------ item 13: compare --out ""


def test_compare_refuses_an_empty_out(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for extra in ([], ["--dry-run"], ["--report-only"]):
        rc = main(["compare", "--preset", "ci", "--out", "", *extra])
        err = capsys.readouterr().err
        assert rc == 2 and "--out is empty" in err, (extra, err)
    assert names(tmp_path) == []
