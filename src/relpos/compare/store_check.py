"""Checking a results database before anything opens it for writing (see :mod:`relpos.compare.store`).

A file that is not SQLite, or an SQLite database with tables of its own but no relpos ``meta``, raises
:class:`NotAStoreError`; a damaged one (``PRAGMA quick_check``) raises :class:`CorruptStoreError` with
recovery steps. The check opens the file read-only (``immutable`` while no write-ahead log exists), so it
creates nothing beside a foreign or damaged file, and never blocks on a named pipe.

>>> read_store_meta("/nonexistent/results.sqlite") is None
True
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from relpos.outdir import file_kind

__all__ = ["ConfigMismatchError", "NotAStoreError", "CorruptStoreError", "is_results_store", "read_store_meta",
           "foreign_objects", "check_store_files", "SIDE_FILES"]

class ConfigMismatchError(ValueError):
    """The output folder holds results of a different configuration."""


class NotAStoreError(ConfigMismatchError):
    """The file is not a relpos results database (not SQLite, or another program's tables)."""


class CorruptStoreError(ValueError):
    """The results database is damaged (``PRAGMA quick_check`` failed)."""


_SQLITE_MAGIC = b"SQLite format 3\x00"


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


#: The files SQLite opens beside a database (each must be a regular file where it exists).
SIDE_FILES = ("-wal", "-shm", "-journal")

_OWN_COLUMNS: dict[str, list[str]] = {}


def own_columns() -> dict[str, list[str]]:
    """``{table: [column, ...]}`` of the tables a relpos store creates (read from its schema)."""
    if not _OWN_COLUMNS:
        from relpos.compare.store import _SCHEMA  # here, not at import: store imports this module

        con = sqlite3.connect(":memory:")
        try:
            con.executescript(_SCHEMA)
            for t in _tables(con):
                _OWN_COLUMNS[t] = [r[1] for r in con.execute(f"PRAGMA table_info({t})")]
        finally:
            con.close()
    return _OWN_COLUMNS


def foreign_objects(conn: sqlite3.Connection) -> list[str]:
    """What a database holds that a relpos store does not create: triggers, views, indexes and tables of
    other names, and relpos's tables with other columns; each as ``"a trigger 'x'"``. Reads only
    ``sqlite_master`` and the tables' column lists, so no view or trigger is ever run."""
    own = own_columns()
    out = []
    for kind, name, table in conn.execute("SELECT type, name, tbl_name FROM sqlite_master ORDER BY type, name"):
        if kind == "table" and name == "sqlite_sequence":
            continue
        if kind == "index" and str(name).startswith("sqlite_autoindex_") and table in own:
            continue
        if kind == "table" and name in own:
            cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{name}")')]
            if cols != own[name]:
                out.append(f"a table {name!r} with other columns ({', '.join(map(str, cols))})")
            continue
        out.append(f"{'an' if kind == 'index' else 'a'} {kind} {name!r}")
    return out


def is_results_store(path: str | os.PathLike) -> bool:
    """True if ``path`` is a relpos results database (read-only check; never raises, never blocks)."""
    try:
        return read_store_meta(path, create=False) is not None
    except (OSError, sqlite3.Error, ValueError):
        return False


def _corrupt(p: Path, detail: str) -> CorruptStoreError:
    return CorruptStoreError(
        f"{p} is damaged (SQLite: {detail}). Nothing was changed. To recover: copy what SQLite can still "
        f"read with `sqlite3 {p} .recover | sqlite3 {p.with_name('recovered.sqlite')}` and move the "
        f"recovered file into place, or move {p.name} and results.json aside and rerun the same "
        f"`relpos compare` (finished runs are then trained again)"
    )


def check_store_files(path: str | os.PathLike) -> None:
    """Raise :class:`NotAStoreError` unless the database and the files SQLite keeps beside it (``-wal``,
    ``-shm``, ``-journal``) are regular files where they exist: SQLite follows a symbolic link (and blocks on
    a named pipe), so the results would be written somewhere else. Only ``lstat`` is used."""
    p = Path(path)
    for side in ("",) + SIDE_FILES:
        q = p.with_name(p.name + side)
        try:
            kind = file_kind(os.lstat(q).st_mode)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise NotAStoreError(f"{q} cannot be read ({e.strerror or e}); nothing was changed") from None
        if kind is not None:
            raise NotAStoreError(f"{q} is {kind}, not a regular file; relpos reads and writes its results "
                                 f"database only as regular files in the folder. Nothing was changed; remove it or "
                                 f"choose another --out")


def read_store_meta(path: str | os.PathLike, *, create: bool = True) -> dict | None:
    """Check a results database without changing or creating anything; return its ``meta`` table.

    Opens the file read-only and, while no write-ahead log exists beside it, as
    ``immutable`` so that SQLite creates no ``-wal``/``-shm`` files next to a
    damaged or foreign file. Never blocks on a named pipe.

    Returns:
        ``{key: value}`` of the ``meta`` table; None when the file does not exist,
        is empty, or is an SQLite file without tables yet (a database another
        process is creating right now) and ``create`` is true.

    Raises:
        NotAStoreError: not a regular file, not SQLite, another program's tables,
            or (``create`` false) empty.
        CorruptStoreError: damaged (``PRAGMA quick_check``), with recovery steps.
    """
    p = Path(path)
    if not (p.exists() or p.is_symlink()):
        return None
    check_store_files(p)
    with open(p, "rb") as f:
        head = f.read(16)
    if not head:
        if create:
            return None  # an empty file: a database that was never written (or is being created right now)
        raise NotAStoreError(f"{p} is empty: it holds no relpos results")
    if head != _SQLITE_MAGIC:
        raise NotAStoreError(f"{p} is not a relpos results database (not an SQLite file); choose another --out")

    def read(immutable: bool) -> dict | None:
        uri = f"file:{p}?mode=ro" + ("&immutable=1" if immutable else "")
        try:
            con = sqlite3.connect(uri, uri=True, timeout=60)
        except sqlite3.Error as e:  # pragma: no cover - e.g. unreadable
            raise NotAStoreError(f"{p} cannot be opened: {e}") from None
        try:
            try:
                tables = _tables(con)
                # a database with some of relpos's tables (or none at all) and anything else: named below
                foreign = foreign_objects(con) if (tables & set(own_columns()) or not tables) else []
            except sqlite3.DatabaseError as e:
                raise _corrupt(p, str(e)) from None
            if foreign:  # before any of them is read: a view may never end, a trigger may delete rows
                raise NotAStoreError(
                    f"{p} holds {', '.join(foreign[:5])}{' ...' if len(foreign) > 5 else ''} that relpos did not "
                    f"create; relpos never opens such a database for writing. Nothing was changed; remove "
                    f"{'them' if len(foreign) > 1 else 'it'} or choose another --out")
            try:
                meta = dict(con.execute("SELECT key, value FROM meta")) if "meta" in tables else {}
            except sqlite3.DatabaseError as e:
                raise _corrupt(p, str(e)) from None
            if "schema_version" not in meta:
                if tables or not create:
                    raise NotAStoreError(
                        f"{p} is not a relpos results database (its tables: {', '.join(sorted(tables)) or 'none'}); "
                        f"relpos leaves it untouched -- choose another --out"
                    )
                return None  # SQLite's header but no tables yet: another compare is creating it
            try:
                rows = [r[0] for r in con.execute("PRAGMA quick_check(5)")]
            except sqlite3.DatabaseError as e:
                raise _corrupt(p, str(e)) from None
            if rows != ["ok"]:
                raise _corrupt(p, "; ".join(map(str, rows)))
            return meta
        finally:
            con.close()

    wal = p.with_name(p.name + "-wal")
    if wal.exists():
        return read(immutable=False)  # committed rows may live in the log: read through it
    try:
        return read(immutable=True)
    except (CorruptStoreError, NotAStoreError):
        if wal.exists():  # another process opened it meanwhile: read again through its log
            return read(immutable=False)
        raise
