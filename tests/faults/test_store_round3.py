"""Fault class "a store or saved model relpos did not make" (issue 47 items 3, 5 and 7, and ``--hf-model --force``):

* item 5: a store with a trigger, a view or a table relpos did not create is refused by name before any write
  (a trigger wiped the earlier runs during a normal compare; a ``jobs`` view gave "is the disk full?");
* item 3: ``benchmarks/store_snapshot.py --restore`` follows the ``--out`` rules, copies only regular files and
  opens the snapshot through the store's checks (a recursive view hung it);
* item 7: a saved model swapped into another job's slot is refused before it is evaluated;
* ``--hf-model --force`` on a trained compare folder moves every relpos output aside, not only the database.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import sqlite3
import threading
from pathlib import Path

import pytest

from relpos.compare.store import NotAStoreError, Store
from tests.experiments.test_additions import cfg, run
from tests.faults.conftest import copy_folder as _copy

ROOT = Path(__file__).resolve().parents[2]
_RECURSIVE = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c"


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _plant(db: Path, sql: str) -> None:
    con = sqlite3.connect(db)
    con.executescript(sql)
    con.close()


def _in_time(fn, seconds=20):
    """Run ``fn`` in a thread; fail (instead of hanging the suite) when it takes longer than ``seconds``."""
    got: list = []

    def target():
        try:
            got.append(("ok", fn()))
        except BaseException as e:  # noqa: BLE001 - handed to the test
            got.append(("err", e))

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert got, f"did not return within {seconds} s (a recursive view is being read)"
    return got[0]


# ------------------------------------------------------------------ item 5: triggers, views, foreign tables


_PLANTED = {
    "trigger": ("CREATE TRIGGER wipe AFTER INSERT ON jobs BEGIN DELETE FROM jobs WHERE job != NEW.job; "
                "DELETE FROM runs WHERE job != NEW.job; END;", "trigger 'wipe'"),
    "view": ("CREATE VIEW totals AS SELECT COUNT(*) FROM runs;", "view 'totals'"),
    "table": ("CREATE TABLE notes (x TEXT);", "table 'notes'"),
    "index": ("CREATE INDEX by_task ON jobs (task);", "index 'by_task'"),
    "jobs view": ("ALTER TABLE jobs RENAME TO jobs_old; CREATE VIEW jobs AS SELECT * FROM jobs_old;", "view 'jobs'"),
    "recursive meta": ("ALTER TABLE meta RENAME TO meta_old; CREATE VIEW meta AS " + _RECURSIVE + ";", "view 'meta'"),
}


@pytest.mark.parametrize("kind", list(_PLANTED))
def test_a_store_with_objects_relpos_did_not_create_is_refused_by_name(finished, tmp_path, kind, capsys):
    from relpos.cli import main

    out = _copy(finished, tmp_path / "run")
    sql, name = _PLANTED[kind]
    _plant(out / "results.sqlite", sql)
    before = _sha(out / "results.sqlite")
    state, err = _in_time(lambda: Store(out / "results.sqlite"))
    assert state == "err" and isinstance(err, NotAStoreError) and name in str(err), err
    assert "did not create" in str(err) and "\n" not in str(err)
    # the command line: one line naming it (not "is the disk full?"), exit 2, the file unchanged
    rc = main(["compare", "--preset", "ci", "--schemes", "alibi,rope", "--tasks", "lm", "--out", str(out),
               "--no-progress"])
    msg = capsys.readouterr().err
    assert rc == 2 and name in msg and "disk full" not in msg and len(msg.strip().splitlines()) == 1, msg
    assert _sha(out / "results.sqlite") == before


def test_a_trigger_never_wipes_runs_during_a_compare(finished, tmp_path):
    out = _copy(finished, tmp_path / "run")
    _plant(out / "results.sqlite", _PLANTED["trigger"][0])
    with pytest.raises(NotAStoreError, match="trigger 'wipe'"):
        run(cfg(schemes=["alibi", "rope", "nope"]), out)  # would train nope and insert its job
    con = sqlite3.connect(out / "results.sqlite")
    assert con.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 2
    con.close()


def test_the_stores_own_schema_passes(finished):
    from relpos.compare.store import read_store_meta

    assert read_store_meta(finished / "results.sqlite", create=False)["fingerprint"]
    assert read_store_meta(ROOT / "docs/results/protocol3/full/results.sqlite", create=False)["fingerprint"]


# ------------------------------------------------------------------ item 3: store_snapshot --restore


def _snapshot_module():
    spec = importlib.util.spec_from_file_location("store_snapshot", ROOT / "benchmarks" / "store_snapshot.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture()
def snap(finished, tmp_path):
    """A snapshot folder of the finished run (results.sqlite and config.json)."""
    mod = _snapshot_module()
    s = tmp_path / "snap"
    assert mod.main([str(finished), str(s)]) == 0
    return mod, s


def test_restore_into_a_new_folder_works(snap, tmp_path):
    mod, s = snap
    assert mod.main(["--restore", str(s), str(tmp_path / "live")]) == 0
    assert sorted(p.name for p in (tmp_path / "live").iterdir()) == ["config.json", "results.sqlite"]


def test_restore_never_overwrites_a_users_config_json(snap, tmp_path):
    mod, s = snap
    live = tmp_path / "live"
    live.mkdir()
    (live / "config.json").write_text('{"my": "settings"}')
    with pytest.raises(SystemExit, match="store_snapshot: .*"):
        mod.main(["--restore", str(s), str(live)])
    assert (live / "config.json").read_text() == '{"my": "settings"}' and sorted(p.name for p in live.iterdir()) == [
        "config.json"]


def test_restore_never_writes_through_a_destination_link(snap, tmp_path):
    mod, s = snap
    live = tmp_path / "live"
    assert mod.main(["--restore", str(s), str(live)]) == 0
    victim = tmp_path / "victim.json"
    victim.write_text("precious")
    (live / "config.json").unlink()
    (live / "config.json").symlink_to(victim)
    with pytest.raises(SystemExit, match="config.json is a symbolic link"):
        mod.main(["--restore", str(s), str(live)])
    assert victim.read_text() == "precious"


def test_restore_never_pulls_a_linked_file_into_the_live_folder(snap, tmp_path):
    mod, s = snap
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"fingerprint": "x", "protocol": {}, "token": "s3cret"}))
    (s / "config.json").unlink()
    (s / "config.json").symlink_to(secret)
    live = tmp_path / "live"
    with pytest.raises(SystemExit, match="symbolic link"):
        mod.main(["--restore", str(s), str(live)])
    assert not any("s3cret" in p.read_text(errors="replace") for p in live.rglob("*") if p.is_file())


def test_restore_of_a_snapshot_with_a_recursive_view_is_refused_in_time(snap, tmp_path):
    mod, s = snap
    _plant(s / "results.sqlite", "ALTER TABLE jobs RENAME TO j0; CREATE VIEW jobs AS " + _RECURSIVE + ";")
    state, err = _in_time(lambda: mod.main(["--restore", str(s), str(tmp_path / "live")]))
    assert state == "err" and isinstance(err, SystemExit) and "view 'jobs'" in str(err)
    assert not (tmp_path / "live").exists()


def test_restore_refuses_a_folder_relpos_did_not_make(snap, tmp_path):
    mod, s = snap
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "results.json").write_text("my own numbers")
    with pytest.raises(SystemExit, match="store_snapshot"):
        mod.main(["--restore", str(s), str(mine)])
    assert sorted(p.name for p in mine.iterdir()) == ["results.json"]


# ------------------------------------------------------------------ item 7: a swapped saved model


def _rope_model(folder: Path) -> Path:
    return folder / "models" / "lm" / "rope" / "seed0"


def test_the_store_records_each_saved_models_content_hash(finished):
    with Store(finished / "results.sqlite", create=False) as st:
        jobs = st.jobs(st.get_meta("fingerprint"))
    for j in jobs:
        train = j["info"]["train"]
        meta = json.loads((finished / train["checkpoint"] / "config.json").read_text())
        assert train["checkpoint_sha256"] == meta["config_sha256"]


def test_an_alibi_model_in_ropes_slot_is_refused(finished, tmp_path):
    out = _copy(finished, tmp_path / "run")
    shutil.rmtree(_rope_model(out))
    shutil.copytree(out / "models" / "lm" / "alibi" / "seed0", _rope_model(out))
    before = _sha(out / "results.sqlite")
    with pytest.raises(ValueError, match="holds the model of job 'lm/alibi/seed0'"):
        run(cfg(passkey={"n": 1}), out)
    assert _sha(out / "results.sqlite") == before


def test_a_rope_model_of_another_folder_is_refused_by_its_hash(finished, tmp_path):
    out = _copy(finished, tmp_path / "run")
    # the same job and scheme, other weights: what a model trained in another folder looks like
    from relpos.training.checkpoint import load, save

    model, _ = load(_rope_model(out))
    with __import__("torch").no_grad():
        next(model.parameters()).add_(0.01)
    meta = json.loads((_rope_model(out) / "config.json").read_text())
    save(_rope_model(out), model, extra=meta["extra"])
    before = _sha(out / "results.sqlite")
    with pytest.raises(ValueError, match="is not the model lm/rope/seed0 trained"):
        run(cfg(passkey={"n": 1}), out)
    assert _sha(out / "results.sqlite") == before


# ------------------------------------------------------------------ --hf-model --force on a trained folder


def test_hf_force_moves_every_relpos_output_of_a_trained_folder(finished, tmp_path):
    from relpos.pretrained.out import _archive

    out = _copy(finished, tmp_path / "run")
    (out / "report.md").write_text("report")
    (out / "lm_loss.png").write_bytes(b"png")
    before = sorted(p.name for p in out.iterdir())
    dest = _archive(out, "old")
    assert sorted(p.name for p in out.iterdir()) == [dest.name]
    assert sorted(p.name for p in dest.iterdir()) == before


def test_a_folder_made_before_the_hash_is_checked_by_its_config_and_says_so(finished, tmp_path):
    """Folders trained before the store recorded each model's hash still take additions (their models checked
    by config.json), with a line saying so; a swapped model there is still refused by its config."""
    out = _copy(finished, tmp_path / "run")
    con = sqlite3.connect(out / "results.sqlite")
    for job, info in con.execute("SELECT job, info FROM jobs").fetchall():
        info = json.loads(info)
        info["train"].pop("checkpoint_sha256")
        con.execute("UPDATE jobs SET info = ? WHERE job = ?", (json.dumps(info), job))
    con.commit()
    con.close()
    s = run(cfg(passkey={"n": 1}), out)
    assert not s.failed and any("predate the content hash" in line for line in s.lines)


def test_compare_force_on_an_hf_folder_moves_its_report_too(tmp_path):
    from relpos.compare.sweep import _archive

    out = tmp_path / "o"
    out.mkdir()
    for name in ("results.sqlite", "hf_report.md", "passkey_m_none.png"):
        (out / name).write_text(name)
    dest = _archive(out, "old")
    assert sorted(p.name for p in out.iterdir()) == [dest.name]
