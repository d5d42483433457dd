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
compare did not write.

    python benchmarks/store_snapshot.py --supersede LIVE_FOLDER SNAPSHOT_FOLDER  # after a new fingerprint
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
from pathlib import Path

_FILES = ("config.json",)
_OURS = {"results.sqlite", "results.sqlite-wal", "results.sqlite-shm", "results.json", "config.json", "runs.log"}


def _jobs(db: Path) -> int:
    if not db.is_file():
        return 0
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM jobs").fetchone()[0])
    finally:
        conn.close()


def _fingerprint(db: Path) -> str | None:
    if not db.is_file():
        return None
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'fingerprint'").fetchone()
        return None if row is None else str(row[0])
    finally:
        conn.close()


def snapshot(src: Path, dest: Path, supersede: bool = False) -> int:
    """Copy ``src``'s store and configuration into ``dest``; return the number of finished jobs copied.

    ``supersede``: replace a store of another fingerprint (never one of the same fingerprint with more jobs)."""
    db = src / "results.sqlite"
    if not db.is_file() or not (src / "config.json").is_file():
        raise SystemExit(f"store_snapshot: {src} holds no relpos compare results (results.sqlite and config.json)")
    dest.mkdir(parents=True, exist_ok=True)
    foreign = sorted(p.name for p in dest.iterdir() if p.name not in _OURS)
    if foreign:
        raise SystemExit(f"store_snapshot: {dest} holds files relpos compare did not write ({', '.join(foreign)}); "
                         "choose an empty folder")
    have, new = _jobs(dest / "results.sqlite"), _jobs(db)
    old_fp, new_fp = _fingerprint(dest / "results.sqlite"), _fingerprint(db)
    other = old_fp is not None and old_fp != new_fp
    if other and not supersede:
        raise SystemExit(f"store_snapshot: {dest} holds the store of fingerprint {old_fp}, {src} that of {new_fp}; "
                         "pass --supersede to replace it (a deliberate change of the preset)")
    if new < have and not other:
        raise SystemExit(f"store_snapshot: {dest} holds {have} finished jobs, {src} only {new}; refusing to replace "
                         "the larger store")
    tmp = dest / "results.sqlite.tmp"
    source = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=120)
    target = sqlite3.connect(str(tmp))
    try:
        source.backup(target)
        target.execute("PRAGMA journal_mode=DELETE")  # one self-contained file in the repository
    finally:
        target.close()
        source.close()
    os.replace(tmp, dest / "results.sqlite")
    for name in _FILES:
        shutil.copyfile(src / name, dest / name)
    return _jobs(dest / "results.sqlite")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--restore", action="store_true", help="copy a snapshot back into a (new) live folder")
    ap.add_argument("--supersede", action="store_true",
                    help="replace a store of another fingerprint (after a deliberate change of the preset)")
    ap.add_argument("src", type=Path)
    ap.add_argument("dest", type=Path)
    a = ap.parse_args(argv)
    n = snapshot(a.src, a.dest, supersede=a.supersede)
    print(f"{'restored' if a.restore else 'snapshot'}: {n} finished jobs in {a.dest / 'results.sqlite'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
