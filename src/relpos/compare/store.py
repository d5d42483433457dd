"""The results database of a sweep: one SQLite file, safe to kill and to share.

Tables (all keyed by the configuration fingerprint ``config_hash``):

* ``meta`` -- ``fingerprint``, ``protocol`` (the fingerprinted settings, JSON),
  ``schema_version``, ``created_at``.
* ``jobs`` -- one row per finished training run (``job`` key such as
  ``lm/rope/seed0``), with timing and the training-loss curve.
* ``runs`` -- one row per evaluated model: a job's base model, plus one row per
  evaluation-time variant (the RoPE scalings), keyed by
  ``(config_hash, scheme, variant, task, seed, train_len)``; ``variant`` is
  ``''`` for the model as trained.
* ``measurements`` -- one row per run and measurement, keyed by the run's key plus
  ``(protocol, eval_len, bucket_start)``.
* ``failures`` -- runs that raised, with the error (they are retried next time).
* ``leases`` -- jobs being trained right now: the owner (``host:pid``) and an
  expiry time. :meth:`Store.claim` takes a job that is neither finished nor
  held by a live owner, so two ``compare`` processes on one folder share the
  work instead of repeating it; :meth:`Store.heartbeat` extends the owner's
  leases, :meth:`Store.release` (and storing the job) gives one back. A lease
  whose owner process is gone (same host) or whose time ran out is free again.

Opening checks the file first and changes nothing that is not a relpos store:
a file that is not SQLite, or a database with tables of its own but no relpos
``meta``, raises :class:`NotAStoreError`; a damaged database (``PRAGMA
quick_check``) raises :class:`CorruptStoreError` with recovery steps.

Durability: the database is in WAL mode with ``synchronous=FULL``, and each
finished job (its job row, run rows and every measurement) is written in one
``BEGIN IMMEDIATE`` transaction, so a process killed at any moment -- even by
SIGKILL -- leaves either the whole job or none of it, never a corrupt file.
Several processes may write at once: SQLite serialises the transactions and
each connection waits up to ``timeout`` seconds for the lock. Rows are only
ever inserted, never replaced: a job stored twice (two sweeps racing) keeps the
first copy.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import socket
import sqlite3
import time
from pathlib import Path

from relpos.compare.leases import LEASE_SECONDS, LeaseMixin
from relpos.compare.store_check import (  # re-exported: store.py was their home
    ConfigMismatchError,
    CorruptStoreError,
    NotAStoreError,
    check_store_files,
    is_results_store,
    read_store_meta,
)

__all__ = ["Store", "read_jobs", "ConfigMismatchError", "NotAStoreError", "CorruptStoreError", "SCHEMA_VERSION",
           "LEASE_SECONDS", "error_line", "is_results_store", "read_store_meta"]

SCHEMA_VERSION = 1


def error_line(error: str | None) -> str:
    r"""The line of a stored failure worth showing: its last non-empty line (a traceback's exception).

    Example:
        >>> error_line("Traceback (most recent call last):\n  File ...\nValueError: k must be >= 0\n")
        'ValueError: k must be >= 0'
    """
    return (str(error or "").strip().splitlines() or [""])[-1]


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
    config_hash TEXT NOT NULL,
    job TEXT NOT NULL,
    scheme TEXT NOT NULL,
    task TEXT NOT NULL,
    seed INTEGER NOT NULL,
    randomized INTEGER NOT NULL,
    train_seconds REAL,
    eval_seconds REAL,
    finished_at TEXT NOT NULL,
    host TEXT,
    info TEXT NOT NULL,
    PRIMARY KEY (config_hash, job)
);
CREATE TABLE IF NOT EXISTS runs (
    config_hash TEXT NOT NULL,
    scheme TEXT NOT NULL,
    variant TEXT NOT NULL,
    task TEXT NOT NULL,
    seed INTEGER NOT NULL,
    train_len INTEGER NOT NULL,
    job TEXT NOT NULL,
    info TEXT NOT NULL,
    PRIMARY KEY (config_hash, scheme, variant, task, seed, train_len)
);
CREATE TABLE IF NOT EXISTS measurements (
    config_hash TEXT NOT NULL,
    scheme TEXT NOT NULL,
    variant TEXT NOT NULL,
    task TEXT NOT NULL,
    seed INTEGER NOT NULL,
    train_len INTEGER NOT NULL,
    protocol TEXT NOT NULL,
    eval_len INTEGER NOT NULL,
    bucket_start INTEGER NOT NULL,
    bucket_end INTEGER NOT NULL,
    loss REAL,
    bpb REAL,
    ppl REAL,
    accuracy REAL,
    token_accuracy REAL,
    count INTEGER NOT NULL,
    PRIMARY KEY (config_hash, scheme, variant, task, seed, train_len, protocol, eval_len, bucket_start)
);
CREATE TABLE IF NOT EXISTS failures (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    config_hash TEXT NOT NULL,
    job TEXT NOT NULL,
    error TEXT NOT NULL,
    at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS leases (
    config_hash TEXT NOT NULL,
    job TEXT NOT NULL,
    owner TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    expires REAL NOT NULL,
    PRIMARY KEY (config_hash, job)
);
"""

_MEASURE_COLS = ("protocol", "eval_len", "bucket_start", "bucket_end", "loss", "bpb", "ppl", "accuracy",
                 "token_accuracy", "count")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def job_seconds(result: dict) -> float:
    """A job's own wall seconds from its result (or a stored job's ``info``): every learning-rate try and the
    evaluation (``train.seconds`` alone is the kept try; results of before the rate grid have only that)."""
    train = result.get("train") or {}
    return float(train.get("seconds_all_tries", train.get("seconds")) or 0.0) + float(result.get("eval_seconds") or 0.0)


def _num(v):
    """SQLite has no NaN/inf: store them as NULL."""
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None



def read_jobs(conn: sqlite3.Connection, config_hash: str) -> list[dict]:
    """The finished jobs of ``config_hash`` (oldest first), from any connection to a store: the store's own, or a
    read-only one to a copy that must not change."""
    rows = conn.execute(
        "SELECT job, scheme, task, seed, randomized, train_seconds, eval_seconds, finished_at, info "
        "FROM jobs WHERE config_hash = ? ORDER BY finished_at, job",
        (config_hash,),
    ).fetchall()
    cols = ("job", "scheme", "task", "seed", "randomized", "train_seconds", "eval_seconds", "finished_at")
    out = []
    for r in rows:
        d = dict(zip(cols, r[:-1]))
        d["randomized"] = bool(d["randomized"])
        d["info"] = json.loads(r[-1])
        out.append(d)
    return out

class Store(LeaseMixin):
    """A connection to ``results.sqlite`` (one per process; cheap to open).

    Args:
        path: the database file (created with its tables if missing and
            ``create`` is true).
        timeout: seconds to wait for another writer's lock.
        create: False to open only an existing relpos store (for reading a
            folder's results, e.g. ``compare --report-only``).

    Raises:
        FileNotFoundError: ``create`` is false and the file does not exist.
        NotAStoreError: the file is not a relpos results database (nothing in
            it is changed), or it is empty and ``create`` is false.
        CorruptStoreError: the database is damaged; the message says how to
            recover.
    """

    def __init__(self, path: str | os.PathLike, *, timeout: float = 120.0, create: bool = True) -> None:
        self.path = Path(path)
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        if not create and not (self.path.exists() or self.path.is_symlink()):
            raise FileNotFoundError(f"no results database at {self.path}")
        check_store_files(self.path)  # SQLite would follow a link (of the database, its log or its memory file)
        if self.path.exists() or self.path.is_symlink():
            self._check_file(create)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None)
        try:
            self._open(timeout)
        except BaseException:
            self.conn.close()
            raise

    def _check_file(self, create: bool) -> None:
        """Refuse a file that is not ours or is damaged, before changing anything in it."""
        read_store_meta(self.path, create=create)

    def _open(self, timeout: float) -> None:
        self.conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        # Two processes creating one new file at once: the switch to WAL can fail with "database is locked"
        # without waiting on the busy timeout (SQLite does not retry it), so retry it within the timeout.
        deadline = time.monotonic() + timeout
        while True:
            try:
                mode = self.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                break
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        if str(mode).lower() != "wal":  # pragma: no cover - e.g. a file system without shared memory
            raise RuntimeError(f"could not put {self.path} in WAL mode (got {mode!r})")
        self.conn.execute("PRAGMA synchronous = FULL")
        with self.transaction():
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    self.conn.execute(stmt)
            self.conn.execute(
                "INSERT OR IGNORE INTO meta VALUES ('schema_version', ?), ('created_at', ?)",
                (str(SCHEMA_VERSION), _now()),
            )
        v = self.get_meta("schema_version")
        if v != str(SCHEMA_VERSION):
            raise ConfigMismatchError(f"{self.path} has results schema version {v}, this relpos writes {SCHEMA_VERSION}")

    # ------------------------------------------------------------- plumbing
    def transaction(self):
        """``with store.transaction(): ...`` -- BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error)."""
        return _Transaction(self.conn)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` (``"ok"`` when sound)."""
        return self.conn.execute("PRAGMA integrity_check").fetchone()[0]

    # ----------------------------------------------------------------- meta
    def get_meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def bind(self, fingerprint: str, protocol: dict) -> bool:
        """Tie the database to a configuration fingerprint.

        Returns True if the database was fresh (now bound), False if it already
        had this fingerprint.

        Raises:
            ConfigMismatchError: it holds a different fingerprint (the message
                lists the settings that differ).
        """
        from relpos.compare.config import config_diff

        with self.transaction():
            old = self.get_meta("fingerprint")
            if old is None:
                self.conn.execute(
                    "INSERT INTO meta VALUES ('fingerprint', ?), ('protocol', ?)",
                    (fingerprint, json.dumps(protocol, sort_keys=True)),
                )
                return True
        if old == fingerprint:
            return False
        try:
            diff = config_diff(json.loads(self.get_meta("protocol") or "{}"), protocol)
        except ValueError:  # pragma: no cover - unreadable old protocol
            diff = []
        detail = ("; differs in: " + ", ".join(diff[:8]) + (" ..." if len(diff) > 8 else "")) if diff else ""
        raise ConfigMismatchError(
            f"{self.path.parent} holds results of a different configuration "
            f"(fingerprint {old}, this run {fingerprint}){detail}"
        )

    # ----------------------------------------------------------------- jobs
    def done_jobs(self, config_hash: str) -> set[str]:
        rows = self.conn.execute("SELECT job FROM jobs WHERE config_hash = ?", (config_hash,))
        return {r[0] for r in rows}

    def write_job(self, config_hash: str, result: dict) -> bool:
        """Store one finished job and all its runs and measurements atomically.

        Args:
            result: the worker's result (see :func:`relpos.compare.runner.run_job`).

        Returns:
            False if this job was already stored (nothing written), True otherwise.
        """
        info = {k: v for k, v in result.items() if k not in ("runs",)}
        with self.transaction():
            cur = self.conn.execute(
                "INSERT OR IGNORE INTO jobs VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    config_hash,
                    result["job"],
                    result["scheme"],
                    result["task"],
                    int(result["seed"]),
                    int(bool(result.get("randomized"))),
                    _num(result.get("train", {}).get("seconds")),
                    _num(result.get("eval_seconds")),
                    _now(),
                    socket.gethostname(),
                    json.dumps(info, default=float),
                ),
            )
            self.conn.execute("DELETE FROM leases WHERE config_hash = ? AND job = ? AND owner = ?",
                              (config_hash, result["job"], self.owner))
            if cur.rowcount == 0:
                return False
            for run in result["runs"]:
                key = (config_hash, run["scheme"], run.get("variant") or "", run["task"], int(run["seed"]),
                       int(run["train_len"]))
                run_info = {k: v for k, v in run.items() if k != "measurements"}
                self.conn.execute("INSERT OR IGNORE INTO runs VALUES (?,?,?,?,?,?,?,?)",
                                  key + (result["job"], json.dumps(run_info, default=float)))
                rows = []
                for m in run["measurements"]:
                    rows.append(key + (
                        m["protocol"], int(m["eval_len"]), int(m.get("bucket_start", -1)),
                        int(m.get("bucket_end", -1)), _num(m.get("loss")), _num(m.get("bpb")), _num(m.get("ppl")),
                        _num(m.get("accuracy")), _num(m.get("token_accuracy")), int(m.get("count", 0)),
                    ))
                self.conn.executemany(
                    f"INSERT OR IGNORE INTO measurements VALUES ({','.join('?' * 16)})", rows
                )
        return True

    def record_failure(self, config_hash: str, job: str, error: str) -> None:
        with self.transaction():
            self.conn.execute("INSERT INTO failures (config_hash, job, error, at) VALUES (?,?,?,?)",
                              (config_hash, job, error[-4000:], _now()))
            self.conn.execute("DELETE FROM leases WHERE config_hash = ? AND job = ? AND owner = ?",
                              (config_hash, job, self.owner))

    def failures(self, config_hash: str) -> list[dict]:
        """Failures of jobs that have not succeeded since (latest first)."""
        rows = self.conn.execute(
            "SELECT job, error, at FROM failures WHERE config_hash = ? AND job NOT IN "
            "(SELECT job FROM jobs WHERE config_hash = ?) ORDER BY id DESC",
            (config_hash, config_hash),
        ).fetchall()
        seen, out = set(), []
        for job, err, at in rows:
            if job not in seen:
                seen.add(job)
                out.append({"job": job, "error": err, "at": at})
        return out

    # -------------------------------------------------------------- reading
    def jobs(self, config_hash: str) -> list[dict]:
        return read_jobs(self.conn, config_hash)

    def runs(self, config_hash: str) -> list[dict]:
        """Every stored run with its measurements, in a stable order."""
        runs = self.conn.execute(
            "SELECT scheme, variant, task, seed, train_len, job, info FROM runs WHERE config_hash = ? "
            "ORDER BY task, scheme, variant, seed",
            (config_hash,),
        ).fetchall()
        meas: dict[tuple, list[dict]] = {}
        for r in self.conn.execute(
            f"SELECT scheme, variant, task, seed, train_len, {', '.join(_MEASURE_COLS)} FROM measurements "
            "WHERE config_hash = ? ORDER BY protocol, eval_len, bucket_start",
            (config_hash,),
        ):
            meas.setdefault(tuple(r[:5]), []).append(dict(zip(_MEASURE_COLS, r[5:])))
        out = []
        for scheme, variant, task, seed, train_len, job, info in runs:
            out.append({
                "scheme": scheme,
                "variant": variant or None,
                "task": task,
                "seed": seed,
                "train_len": train_len,
                "job": job,
                "info": json.loads(info),
                "measurements": meas.get((scheme, variant, task, seed, train_len), []),
            })
        return out


class _Transaction:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self):
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.conn.execute("COMMIT")
        else:
            self.conn.execute("ROLLBACK")
