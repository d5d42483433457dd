"""Copy a running ``relpos compare`` folder's store to another folder, consistently, while it trains.

The long protocol-3 runs (``benchmarks/protocol3_runs.sh``) take more CPU-hours than one working session
has, and this project's machines keep nothing outside the repository between sessions. So the finished
runs travel in the repository: every so often, and before a session stops, this script copies the live
folder's ``results.sqlite`` (SQLite's online backup: a consistent copy, even mid-write, one file without
its write-ahead log) and ``config.json`` into a tracked folder, which is then committed. The next session
copies them back with ``--restore`` and reruns the same ``relpos compare`` command: every run in the
store is skipped, only what is missing trains.

    python benchmarks/store_snapshot.py LIVE_FOLDER SNAPSHOT_FOLDER            # live -> snapshot
    python benchmarks/store_snapshot.py --restore SNAPSHOT_FOLDER LIVE_FOLDER  # snapshot -> new live folder

It prints how many finished runs the copy holds. It refuses to replace a store with one that holds fewer
jobs (a stale snapshot over newer work), to replace a store of another fingerprint unless ``--supersede``
says the preset was changed on purpose (the old store then lives on in the repository's history and in the
new store's reused runs, ``relpos compare --reuse``), and to write into a folder holding files that relpos
compare did not write. Both directions follow relpos's ``--out`` rules: the destination is a new or empty
folder or one relpos wrote (a ``config.json`` there that is not relpos's is never overwritten), only regular
files are copied (never through or from a symbolic link), and each store is opened through the store's own
checks (no trigger, no view, no foreign table, ``PRAGMA quick_check``) before anything is read from it.

    python benchmarks/store_snapshot.py --supersede LIVE_FOLDER SNAPSHOT_FOLDER  # after a new fingerprint

The jobs in flight travel too: the training checkpoints under the live folder's ``inflight/`` (written every 500
steps of a job, :mod:`relpos.compare.inflight`) are copied, verified, to ``SNAPSHOT_FOLDER/inflight/``, and those
of jobs that finished meanwhile are removed there; ``--restore`` copies them back, so the next session's rerun
goes on inside those jobs instead of training them from step 0. A checkpoint is never replaced by an earlier one.
``--no-inflight`` copies the store alone (a copy to read, such as the page's).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from pathlib import Path

_FILES = ("config.json",)
_OURS = {"results.sqlite", "results.sqlite-wal", "results.sqlite-shm", "results.json", "config.json", "runs.log",
         "inflight"}


def _fail(msg: str) -> SystemExit:
    return SystemExit(f"store_snapshot: {msg}")


def _meta(db: Path) -> dict | None:
    """The store's ``meta`` through the store's own checks (regular file, no link beside it, SQLite, relpos's
    tables only -- no trigger, no view --, ``PRAGMA quick_check``), read only; None where there is none."""
    from relpos.compare.store_check import read_store_meta

    try:
        return read_store_meta(db, create=False)
    except (ValueError, OSError) as e:
        raise _fail(str(e)) from None


def _config(path: Path) -> bytes:
    """A relpos compare ``config.json`` (a regular file, not a link, with the configuration's fingerprint)."""
    from relpos.outdir import read_regular_text

    try:
        if os.path.islink(path):
            raise ValueError(f"{path} is a symbolic link; relpos copies only regular files")
        text = read_regular_text(path, limit=16 << 20)
        cfg = json.loads(text)
    except FileNotFoundError:
        raise _fail(f"{path.parent} holds no relpos compare results (results.sqlite and config.json)") from None
    except (ValueError, UnicodeDecodeError, OSError) as e:
        raise _fail(f"{path}: {e}") from None
    if not (isinstance(cfg, dict) and isinstance(cfg.get("fingerprint"), str)):
        raise _fail(f"{path} is not the config.json of a relpos compare folder; nothing was changed")
    return text.encode("utf-8")


def _ro_uri(db: Path) -> str:
    """Read-only, and ``immutable`` while no write-ahead log lies beside the store (nobody is writing it): a
    read-only connection to a WAL-mode store would otherwise leave ``-wal``/``-shm`` files in the source folder."""
    return f"file:{db}?mode=ro" + ("" if db.with_name(db.name + "-wal").exists() else "&immutable=1")


def _jobs(db: Path) -> int:
    if not db.is_file():
        return 0
    conn = sqlite3.connect(_ro_uri(db), uri=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM jobs").fetchone()[0])
    finally:
        conn.close()


def _owns(folder: Path) -> bool:
    """A folder this script (or relpos compare) wrote: a relpos store, or a relpos compare config.json."""
    from relpos.compare.store_check import is_results_store

    if is_results_store(folder / "results.sqlite"):
        return True
    try:
        _config(folder / "config.json")
        return True
    except SystemExit:
        return False


def _check_dest(dest: Path) -> None:
    """The ``--out`` rule of relpos (:func:`relpos.outdir.check_output_dir`): a new or empty folder, or one
    holding a relpos store or compare config; its own files regular files (not links); nothing foreign."""
    from relpos.outdir import OutputDirError, check_output_dir

    if dest.is_dir() and not dest.is_symlink():
        foreign = sorted(p.name for p in dest.iterdir() if p.name not in _OURS)
        if foreign:
            raise _fail(f"{dest} holds files relpos compare did not write ({', '.join(foreign)}); choose an empty "
                        "folder")
    try:
        check_output_dir(dest, owns=_owns, what="store snapshot", flag="destination",
                         files=sorted(_OURS - {"inflight"}))
    except OutputDirError as e:
        raise _fail(str(e)) from None
    if not dest.is_dir():
        return
    if (dest / "config.json").exists():
        _config(dest / "config.json")  # a user's own config.json is never overwritten
    if (dest / "results.sqlite-wal").exists():
        raise _fail(f"{dest}/results.sqlite-wal exists: a relpos compare may be writing there; nothing was changed "
                    "-- stop it (or open the store once to fold its log in) and run again")


def snapshot(src: Path, dest: Path, supersede: bool = False) -> int:
    """Copy ``src``'s store and configuration into ``dest``; return the number of finished jobs copied.

    ``supersede``: replace a store of another fingerprint (never one of the same fingerprint with more jobs).
    Both folders follow relpos's rules: the source's files are regular files (no link), its store passes the
    store's own checks; the destination is new, empty, or relpos's own, and nothing is written through a link."""
    from relpos.outdir import OutputDirError, create_exclusive, write_bytes_atomic

    db = src / "results.sqlite"
    if not (db.exists() or db.is_symlink()):
        raise _fail(f"{src} holds no relpos compare results (results.sqlite and config.json)")
    src_meta = _meta(db)
    if not src_meta:
        raise _fail(f"{db} holds no relpos results")
    cfg_bytes = {name: _config(src / name) for name in _FILES}
    _check_dest(dest)
    dest.mkdir(parents=True, exist_ok=True)
    dest_meta = _meta(dest / "results.sqlite") or {}
    have, new = _jobs(dest / "results.sqlite") if dest_meta else 0, _jobs(db)
    old_fp, new_fp = dest_meta.get("fingerprint"), src_meta.get("fingerprint")
    other = old_fp is not None and old_fp != new_fp
    if other and not supersede:
        raise _fail(f"{dest} holds the store of fingerprint {old_fp}, {src} that of {new_fp}; "
                    "pass --supersede to replace it (a deliberate change of the preset)")
    if new < have and not other:
        raise _fail(f"{dest} holds {have} finished jobs, {src} only {new}; refusing to replace the larger store")
    tmp = dest / f".results.sqlite.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    os.close(create_exclusive(tmp))  # a new file: never a planted link
    try:
        source = sqlite3.connect(_ro_uri(db), uri=True, timeout=120)
        target = sqlite3.connect(str(tmp))
        try:
            source.backup(target)
            target.execute("PRAGMA journal_mode=DELETE")  # one self-contained file in the repository
        finally:
            target.close()
            source.close()
        if _meta(tmp).get("fingerprint") != new_fp:  # the copy passes the same checks
            raise _fail(f"the copy of {db} does not read back; nothing was replaced")
        try:
            for name, data in cfg_bytes.items():
                write_bytes_atomic(dest / name, data)  # checks the target is no link first
        except OutputDirError as e:
            raise _fail(str(e)) from None
        os.replace(tmp, dest / "results.sqlite")
    finally:
        if tmp.exists():
            tmp.unlink()
    return _jobs(dest / "results.sqlite")


def copy_inflight(src: Path, dest: Path, restore: bool = False) -> dict[str, int]:
    """Copy ``src/inflight``'s training checkpoints to ``dest/inflight`` (:func:`relpos.compare.inflight.copy_checkpoints`);
    live -> snapshot (not ``restore``) also removes the snapshot's checkpoints of jobs that finished."""
    from relpos.compare.inflight import copy_checkpoints
    from relpos.outdir import OutputDirError

    for p in (src / "inflight", dest / "inflight"):
        if p.is_symlink():
            raise _fail(f"{p} is a symbolic link; relpos copies checkpoints only between folders of its own")
    if not (src / "inflight").is_dir() and not (dest / "inflight").is_dir():
        return {"copied": 0, "kept": 0, "dropped": 0}
    try:
        return copy_checkpoints(src / "inflight", dest / "inflight", drop_missing=not restore)
    except (OutputDirError, ValueError) as e:
        raise _fail(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--restore", action="store_true", help="copy a snapshot back into a (new) live folder")
    ap.add_argument("--supersede", action="store_true",
                    help="replace a store of another fingerprint (after a deliberate change of the preset)")
    ap.add_argument("--no-inflight", action="store_true",
                    help="copy the store only, not the checkpoints of the jobs in flight (a copy to read, not resume)")
    ap.add_argument("src", type=Path)
    ap.add_argument("dest", type=Path)
    a = ap.parse_args(argv)
    n = snapshot(a.src, a.dest, supersede=a.supersede)
    print(f"{'restored' if a.restore else 'snapshot'}: {n} finished jobs in {a.dest / 'results.sqlite'}")
    if a.no_inflight:
        return 0
    c = copy_inflight(a.src, a.dest, restore=a.restore)
    if any(c.values()):
        print(f"jobs in flight: {c['copied']} checkpoints copied, {c['kept']} kept (as recent), {c['dropped']} of "
              f"finished jobs removed, in {a.dest / 'inflight'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
