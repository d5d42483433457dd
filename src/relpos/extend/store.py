"""The resumable results store of the ``extend`` benchmark: ``OUT/extend.sqlite``.

One row per measured (recipe, seed, rate, K) -- K = 0 has no rate (0) -- with its validation loss and test
numbers (:func:`relpos.extend.finetune.measure`), written the moment it is measured, so a killed run loses at
most the fine-tuning run in progress. A fine-tuning run (recipe, seed, rate) counts as done when every K of its
recipe is stored. The database is bound to one protocol fingerprint (:meth:`ExtendSpec.protocol`); another is
refused, or with ``force`` the old files are moved into ``OUT/previous-<fingerprint>-<time>/`` (nothing is
deleted). The folder follows the ``--out`` rules of :mod:`relpos.outdir`.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

__all__ = ["ExtendStore", "FILES", "fingerprint_of", "owns", "prepare_out"]

#: The files the benchmark writes into its folder.
FILES = ("extend.sqlite", "extend.sqlite-wal", "extend.sqlite-shm", "extend.json", "report.md", "results.json",
         "extend.png")


def fingerprint_of(protocol: dict) -> str:
    blob = json.dumps(protocol, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def owns(folder: Path) -> bool:
    """Whether ``folder`` holds this benchmark's earlier output."""
    return (folder / "extend.sqlite").is_file()


def _stored_fingerprint(db: Path) -> str | None:
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            row = con.execute("SELECT v FROM meta WHERE k = 'fingerprint'").fetchone()
        finally:
            con.close()
    except sqlite3.Error:
        return None
    return row[0] if row else None


def prepare_out(out, fingerprint: str, *, force: bool = False, log=lambda s: None) -> Path:
    """Check (and create) the output folder for a run of ``fingerprint``; returns it.

    Raises:
        relpos.outdir.OutputDirError: ``out`` is a file or a folder with other content.
        ValueError: it holds results of another protocol (and not ``force``); nothing is changed.
    """
    from relpos.outdir import move_aside, prepare_output_dir

    real = prepare_output_dir(out, owns=owns, what="extend results", files=FILES)
    db = real / "extend.sqlite"
    old = _stored_fingerprint(db) if db.is_file() else None
    if old is not None and old != fingerprint:
        if not force:
            raise ValueError(f"--out {out} holds extend results of another protocol (fingerprint {old}, this one "
                             f"{fingerprint}); nothing was changed: use another --out, or pass --force to move them "
                             f"into {out}/previous-{old}-<time>/")
        dest = move_aside(real, old, [real / n for n in FILES if (real / n).exists()])
        log(f"moved the results of protocol {old} to {dest}")
    return real


class ExtendStore:
    """The SQLite store (see the module docstring)."""

    def __init__(self, path, fingerprint: str, protocol: dict) -> None:
        self.path = Path(path)
        self.conn = sqlite3.connect(str(self.path), timeout=60.0, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT)")
        self.conn.execute("CREATE TABLE IF NOT EXISTS rows (recipe TEXT, seed INTEGER, lr REAL, k INTEGER, "
                          "seconds REAL, row TEXT, PRIMARY KEY (recipe, seed, lr, k))")
        old = self.conn.execute("SELECT v FROM meta WHERE k = 'fingerprint'").fetchone()
        if old is None:
            self.conn.execute("INSERT INTO meta VALUES ('fingerprint', ?), ('protocol', ?)",
                              (fingerprint, json.dumps(protocol, sort_keys=True)))
        elif old[0] != fingerprint:
            self.conn.close()
            raise ValueError(f"{self.path} holds extend results of another protocol ({old[0]}, this one {fingerprint})")
        self.fingerprint = fingerprint

    def put(self, recipe: str, seed: int, lr: float, k: int, row: dict, seconds: float) -> None:
        self.conn.execute("INSERT OR REPLACE INTO rows VALUES (?,?,?,?,?,?)",
                          (recipe, int(seed), float(lr), int(k), float(seconds), json.dumps(row, allow_nan=False)))

    def has(self, recipe: str, seed: int, lr: float, ks) -> bool:
        got = {r[0] for r in self.conn.execute("SELECT k FROM rows WHERE recipe = ? AND seed = ? AND lr = ?",
                                               (recipe, int(seed), float(lr)))}
        return set(int(k) for k in ks) <= got

    def rows(self) -> list[dict]:
        out = []
        for recipe, seed, lr, k, secs, row in self.conn.execute(
                "SELECT recipe, seed, lr, k, seconds, row FROM rows ORDER BY recipe, seed, lr, k"):
            out.append({"recipe": recipe, "seed": seed, "lr": lr, "k": k, "seconds": secs, **json.loads(row)})
        return out

    def close(self) -> None:
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
