"""Job leases in the results database: concurrent ``compare`` processes share the work.

A lease row ``(config_hash, job, owner, host, pid, expires)`` reserves a job for
one process (``owner`` = ``host:pid``). :meth:`LeaseMixin.claim` takes a job that
is neither finished nor held by a live owner; a lease is free again when its
time runs out or, on the same host, when its owner process is gone (killed).
:meth:`LeaseMixin.keep_alive` renews this process's leases from a thread while
jobs run. Storing or failing a job releases its lease (see ``Store.write_job``).

:class:`LeaseMixin` is mixed into :class:`relpos.compare.store.Store`; it uses
the store's ``conn``, ``path``, ``owner`` and ``transaction()``.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time

from relpos.outdir import process_alive

__all__ = ["LEASE_SECONDS", "LeaseMixin"]

#: How long a claimed job stays reserved without a heartbeat (seconds).
LEASE_SECONDS = 600.0


class LeaseMixin:
    """claim / heartbeat / release / leases / keep_alive on a results store."""

    def _lease_live(self, owner: str, host: str, pid: int, expires: float, now: float) -> bool:
        if expires <= now:
            return False
        if host == socket.gethostname() and not process_alive(pid):
            return False  # its process is gone (killed): the job is free again
        return True

    def claim(self, config_hash: str, job: str, *, ttl: float = LEASE_SECONDS) -> bool:
        """Reserve ``job`` for this process for ``ttl`` seconds.

        Returns:
            True if this process may run the job now; False if it is finished
            or another live process holds it.
        """
        now = time.time()
        with self.transaction():
            if self.conn.execute("SELECT 1 FROM jobs WHERE config_hash = ? AND job = ?",
                                 (config_hash, job)).fetchone():
                return False
            row = self.conn.execute("SELECT owner, host, pid, expires FROM leases WHERE config_hash = ? AND job = ?",
                                    (config_hash, job)).fetchone()
            if row is not None and row[0] != self.owner and self._lease_live(*row, now):
                return False
            self.conn.execute("INSERT OR REPLACE INTO leases VALUES (?,?,?,?,?,?)",
                              (config_hash, job, self.owner, socket.gethostname(), os.getpid(), now + ttl))
        return True

    def heartbeat(self, config_hash: str, *, ttl: float = LEASE_SECONDS) -> int:
        """Extend every lease this process holds by ``ttl`` seconds from now; returns how many."""
        with self.transaction():
            cur = self.conn.execute("UPDATE leases SET expires = ? WHERE config_hash = ? AND owner = ?",
                                    (time.time() + ttl, config_hash, self.owner))
        return cur.rowcount

    def release(self, config_hash: str, job: str | None = None) -> None:
        """Give back this process's lease on ``job`` (all of its leases if None)."""
        with self.transaction():
            if job is None:
                self.conn.execute("DELETE FROM leases WHERE config_hash = ? AND owner = ?", (config_hash, self.owner))
            else:
                self.conn.execute("DELETE FROM leases WHERE config_hash = ? AND job = ? AND owner = ?",
                                  (config_hash, job, self.owner))

    def leases(self, config_hash: str) -> dict[str, dict]:
        """Live leases: ``{job: {"owner", "expires"}}``."""
        now = time.time()
        rows = self.conn.execute("SELECT job, owner, host, pid, expires FROM leases WHERE config_hash = ?",
                                 (config_hash,)).fetchall()
        return {r[0]: {"owner": r[1], "expires": r[4]} for r in rows if self._lease_live(*r[1:], now)}

    def keep_alive(self, config_hash: str, *, interval: float = LEASE_SECONDS / 6, ttl: float = LEASE_SECONDS):
        """``with store.keep_alive(fp): ...`` -- heartbeat this process's leases from a thread.

        The thread uses its own connection (SQLite connections stay in their thread)
        and the leases are released when the block ends.
        """
        return _KeepAlive(self, config_hash, interval, ttl)


class _KeepAlive:
    def __init__(self, store: LeaseMixin, config_hash: str, interval: float, ttl: float) -> None:
        self.store, self.fp, self.interval, self.ttl = store, config_hash, interval, ttl
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _beat(self) -> None:
        try:
            conn = sqlite3.connect(str(self.store.path), timeout=60, isolation_level=None)
        except sqlite3.Error:  # pragma: no cover
            return
        try:
            while not self._stop.wait(self.interval):
                try:
                    conn.execute("UPDATE leases SET expires = ? WHERE config_hash = ? AND owner = ?",
                                 (time.time() + self.ttl, self.fp, self.store.owner))
                except sqlite3.Error:  # busy or closing: try again next beat
                    pass
        finally:
            conn.close()

    def __enter__(self) -> "_KeepAlive":
        self._thread = threading.Thread(target=self._beat, daemon=True, name="relpos-lease-heartbeat")
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.store.release(self.fp)
        except sqlite3.Error:  # pragma: no cover - the store is already unusable
            pass
