"""Output folders: write only where nothing that relpos did not create can be lost.

Every relpos command that writes a folder (``relpos train --out``, ``relpos compare
--out``) follows one rule, implemented here once:

* a path that does not exist is fine: the command creates a new folder there;
* an existing, *empty* folder is fine (nothing in it can be lost);
* an existing folder is fine when it holds this command's own earlier output,
  recognised by its manifest (``owns(path)`` returns True);
* anything else -- a file, a symlink to a file or device, a folder with other
  content, the current directory or one of its ancestors, the file-system root
  -- raises :class:`OutputDirError` naming the path, and the path is left
  untouched.

Call :func:`check_output_dir` *before* any expensive work starts (training), so a
bad ``--out`` costs nothing. :func:`prepare_output_dir` checks and then creates the
folder. Neither function ever deletes or renames anything.

Example:
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> (root / "notes.txt").write_text("mine")
    4
    >>> try:
    ...     check_output_dir(root / "notes.txt", owns=lambda p: False, what="checkpoint")
    ... except OutputDirError as e:
    ...     print("refused:", "notes.txt is a file" in str(e))
    refused: True
    >>> prepare_output_dir(root / "run", owns=lambda p: False, what="checkpoint").name
    'run'
"""

from __future__ import annotations

import json
import os
import socket
import stat
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable

__all__ = ["OutputDirError", "check_output_dir", "prepare_output_dir", "write_json_atomic", "clean_stale_tmp",
           "process_alive", "refuse_special_files", "file_kind", "check_writable", "read_regular_text"]

#: A temporary file of a dead writer older than this is removed by :func:`clean_stale_tmp`.
STALE_TMP_SECONDS = 3600.0


class OutputDirError(ValueError):
    """An output path holds something that relpos did not create; nothing was changed."""


def _describe(p: Path) -> str:
    if p.is_symlink() and not p.exists():
        return "a dangling symbolic link"
    if p.is_dir():
        return "a folder that does not hold relpos output"
    if p.is_file():
        return "a file"
    return "a special file (device, socket or pipe)"


def file_kind(mode: int) -> str | None:
    """What a file of this ``st_mode`` is, when it is not a regular file (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"


def refuse_special_files(folder: str | os.PathLike, names: Iterable[str], *, flag: str = "--out") -> None:
    """Raise :class:`OutputDirError` if one of ``names`` in ``folder`` exists and is not a regular file.

    A named pipe, socket, device, folder or symbolic link where relpos reads or writes
    its own file would block the command (a FIFO never answers) or send its output
    somewhere else; nothing is opened here, only ``lstat``-ed.
    """
    for name in names:
        p = Path(folder) / name
        try:
            kind = file_kind(os.lstat(p).st_mode)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise OutputDirError(f"{flag} {folder}: cannot read {name} ({e.strerror or e})") from None
        if kind is not None:
            raise OutputDirError(
                f"{flag} {folder}: {name} is {kind}, not a regular file; relpos reads and writes only regular "
                f"files there. Nothing was changed; remove it or choose another {flag}."
            )


def check_writable(folder: str | os.PathLike, *, flag: str = "--out") -> None:
    """Create and remove a temporary file in ``folder``; raise :class:`OutputDirError` if that fails.

    Call it before expensive work so that a read-only file system, a full disk or a
    busy mount point is found before training, not after it.
    """
    probe = Path(folder) / f".relpos-write-test.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"relpos")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.unlink(probe)
    except OSError as e:
        try:
            os.unlink(probe)
        except OSError:
            pass
        raise OutputDirError(f"{flag} {folder}: cannot write there ({e.strerror or e}); nothing was trained -- "
                             f"choose a writable {flag}") from None


def read_regular_text(path: str | os.PathLike, *, limit: int = 64 << 20) -> str:
    """The text of a regular file of at most ``limit`` bytes; never blocks on a named pipe.

    Raises:
        FileNotFoundError: it does not exist.
        ValueError: it is not a regular file, or it is larger than ``limit``.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        kind = file_kind(st.st_mode)
        if kind is not None:
            raise ValueError(f"{path} is {kind}, not a regular file; relpos reads only regular files")
        if st.st_size > limit:
            raise ValueError(f"{path} is {st.st_size:,} bytes; relpos reads at most {limit:,} bytes here")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ValueError(f"{path} is larger than {limit:,} bytes; relpos reads at most {limit:,} bytes here")
    return data.decode("utf-8")


def check_output_dir(
    path: str | os.PathLike,
    *,
    owns: Callable[[Path], bool],
    what: str,
    flag: str = "--out",
    files: Iterable[str] = (),
) -> Path:
    """Check that a command may write its output folder at ``path``; change nothing.

    Args:
        path: the folder the command will write (need not exist).
        owns: ``owns(folder) -> bool``, True when an existing folder holds this
            command's own earlier output (read its manifest; must not raise).
        what: what the command writes, for the message (e.g. ``"checkpoint"``).
        flag: the option that named the path, for the message.
        files: names of the command's own files in the folder; any of them that
            exists and is not a regular file (a named pipe, a link, ...) is refused
            before ``owns`` reads anything (see :func:`refuse_special_files`).

    Returns:
        The path, with symbolic links resolved (write there).

    Raises:
        OutputDirError: the path exists and is not an empty folder or this
            command's own output; or it is the current folder, one of its
            ancestors, or the file-system root.
        TypeError: ``path`` is not a string or path.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{flag} must be a path, got {type(path).__name__}")
    given = Path(path)
    if str(path) == "":
        raise OutputDirError(f"{flag} is empty; name a new folder")
    real = given.resolve()
    here = Path.cwd().resolve()
    if real == here or real in here.parents or real == Path(real.anchor):
        raise OutputDirError(
            f"{flag} {given} is the current folder or one of its parents; relpos writes its {what} "
            f"into a folder of its own -- name a new folder (e.g. {flag} runs/{what.replace(' ', '-')})"
        )
    if not (given.exists() or given.is_symlink()):
        return real
    if given.is_dir():
        refuse_special_files(real, files, flag=flag)
        try:
            empty = not any(real.iterdir())
        except OSError as e:
            raise OutputDirError(f"{flag} {given}: cannot read the folder ({e.strerror or e})") from None
        if empty or owns(real):
            return real
    raise OutputDirError(
        f"{flag} {given} is {_describe(given)}; relpos writes a {what} only into a new folder, an empty "
        f"folder, or a folder with its own earlier {what}. Nothing was changed; choose another {flag}."
    )


def prepare_output_dir(
    path: str | os.PathLike,
    *,
    owns: Callable[[Path], bool],
    what: str,
    flag: str = "--out",
    files: Iterable[str] = (),
) -> Path:
    """:func:`check_output_dir`, then create the folder (and its parents) if missing and check that a
    file can be written there (:func:`check_writable`).

    Returns:
        The folder (symbolic links resolved).

    Raises:
        OutputDirError: see :func:`check_output_dir`, or the folder cannot be
            created (e.g. a parent is a file or read-only).
    """
    real = check_output_dir(path, owns=owns, what=what, flag=flag, files=files)
    try:
        real.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputDirError(f"{flag} {path}: cannot create the folder ({e.strerror or e})") from None
    check_writable(real, flag=flag)
    return real


# ------------------------------------------------------------------ files


def process_alive(pid: int) -> bool:
    """True if a process with this id runs on this machine (or cannot be checked)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def clean_stale_tmp(path: str | os.PathLike, *, max_age: float = STALE_TMP_SECONDS) -> int:
    """Remove leftover temporary files of :func:`write_json_atomic` for ``path``.

    A file ``<name>.<host>.<pid>.<rand>.tmp`` is removed when its writer (same host)
    is no longer running; any other ``<name>.*.tmp`` (older relpos versions) when it
    is older than ``max_age`` seconds. Only regular files are touched.

    Returns:
        How many files were removed.
    """
    path = Path(path)
    host = socket.gethostname()
    n = 0
    now = time.time()
    for p in path.parent.glob(f"{path.name}.*.tmp"):
        try:
            st = p.lstat()
        except OSError:
            continue
        if not p.is_file() or p.is_symlink():
            continue
        parts = p.name[len(path.name) + 1: -len(".tmp")].split(".")
        if len(parts) == 3 and parts[0] == host and parts[1].isdigit():
            stale = not process_alive(int(parts[1])) or now - st.st_mtime > 24 * max_age
        else:
            stale = now - st.st_mtime > max_age
        if stale:
            try:
                p.unlink()
                n += 1
            except OSError:
                pass
    return n


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Write JSON to a temporary file beside ``path``, flush it, then rename it into place.

    The file gets the usual permissions (0666 minus the umask, like every other
    file relpos writes); leftover temporary files of dead writers are removed.
    """
    path = Path(path)
    tmp = path.parent / f"{path.name}.{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1, allow_nan=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    clean_stale_tmp(path)
