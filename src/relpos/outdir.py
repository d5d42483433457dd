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
           "process_alive", "refuse_special_files", "file_kind", "check_writable", "read_regular_text",
           "check_under", "refuse_links_below", "write_bytes_atomic", "write_text_atomic", "create_exclusive", "save_figure"]

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


def refuse_special_files(folder: str | os.PathLike, names: Iterable[str], *, flag: str = "--out",
                         dirs: Iterable[str] = ()) -> None:
    """Raise :class:`OutputDirError` if one of ``names`` in ``folder`` exists and is not a regular file, or one
    of ``dirs`` exists and is not a real folder (a symbolic link to one included).

    A named pipe, socket, device, folder or symbolic link where relpos reads or writes
    its own file would block the command (a FIFO never answers) or send its output
    somewhere else; nothing is opened here, only ``lstat``-ed.
    """
    for name, want in [(n, None) for n in names] + [(d, "a folder") for d in dirs]:
        p = Path(folder) / name
        try:
            kind = file_kind(os.lstat(p).st_mode)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise OutputDirError(f"{flag} {folder}: cannot read {name} ({e.strerror or e})") from None
        if kind != want:
            what = "a regular file" if want is None else "a folder of its own"
            raise OutputDirError(
                f"{flag} {folder}: {name} is {kind or 'a regular file'}, not {what}; relpos reads and writes only "
                f"regular files in folders of its own there. Nothing was changed; remove it or choose another {flag}."
            )


def check_under(root: str | os.PathLike, path: str | os.PathLike, *, folder: bool = False,
                flag: str = "--out") -> Path:
    """Check that writing ``path`` (a file, or a folder when ``folder``) cannot leave the folder ``root``.

    ``path`` must lie inside ``root`` (no ``..``); every part of it below ``root`` that exists must be a real
    folder (not a symbolic link), and ``path`` itself, where it exists, a regular file (``folder``: a real
    folder). Only ``lstat`` is used; nothing is created.

    Returns:
        ``path`` as given below ``root``.

    Raises:
        OutputDirError: naming the part that is a link or special file.
    """
    root_p = Path(root)
    p = Path(path)
    rel = Path(os.path.relpath(os.path.abspath(p), os.path.abspath(root_p)))
    if rel.is_absolute() or rel.parts[:1] == ("..",):
        raise OutputDirError(f"{flag} {root}: {path} is outside the folder; relpos writes only inside it")
    cur = root_p
    parts = rel.parts if rel != Path(".") else ()
    for i, part in enumerate(parts):
        cur = cur / part
        try:
            kind = file_kind(os.lstat(cur).st_mode)
        except FileNotFoundError:
            break
        except OSError as e:
            raise OutputDirError(f"{flag} {root}: cannot read {cur} ({e.strerror or e})") from None
        last = i == len(parts) - 1
        want = None if (last and not folder) else "a folder"
        if kind != want:
            raise OutputDirError(
                f"{flag} {root}: {Path(*parts[: i + 1])} is {kind or 'a regular file'}, not "
                f"{'a regular file' if want is None else 'a folder of its own'}; relpos writes only regular files "
                f"inside its own folder. Nothing was changed; remove it or choose another {flag}.")
    return root_p / rel


def refuse_links_below(folder: str | os.PathLike, *, flag: str = "--out", root: str | os.PathLike | None = None) -> None:
    """Raise :class:`OutputDirError` if ``folder`` (when it exists) is not a real folder, or holds anything at
    any depth that is neither a real folder nor a regular file (a symbolic link, a named pipe, ...)."""
    top = Path(folder)
    check_under(root if root is not None else top.parent, top, folder=True, flag=flag)
    if not top.exists():
        return
    for base, dirnames, filenames in os.walk(top, followlinks=False):
        for name in dirnames + filenames:
            p = Path(base) / name
            try:
                kind = file_kind(os.lstat(p).st_mode)
            except OSError:
                continue
            if kind not in (None, "a folder"):
                shown = p.relative_to(top.parent)
                raise OutputDirError(
                    f"{flag} {top.parent}: {shown} is {kind}, not a regular file; relpos writes only regular "
                    f"files inside its own folder. Nothing was changed; remove it or choose another {flag}.")


def create_exclusive(path: str | os.PathLike, mode: int = 0o666) -> int:
    """Create ``path`` as a new regular file and return its descriptor open for writing.

    Never opens an existing file, a symbolic link (even a dangling one) or a named pipe: ``O_EXCL`` fails on
    any of them.

    Raises:
        OutputDirError: something already exists at ``path``.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, flags, mode)
    except FileExistsError:
        raise OutputDirError(f"{path} already exists; relpos creates its temporary files anew and never writes "
                             "into an existing one. Nothing was changed; remove it and run again") from None


def _check_target(path: Path) -> None:
    """A file about to be replaced must be a regular file (a link is neither followed nor replaced)."""
    try:
        kind = file_kind(os.lstat(path).st_mode)
    except FileNotFoundError:
        return
    if kind is not None:
        raise OutputDirError(f"{path} is {kind}, not a regular file; relpos replaces only regular files it wrote. "
                             "Nothing was changed; remove it or choose another output folder")


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all: into a new temporary file beside it (created
    exclusively, never through a link), flushed, then renamed into place.

    Raises:
        OutputDirError: ``path`` exists and is not a regular file (a symbolic link, a named pipe, a folder);
            nothing is written.
    """
    path = Path(path)
    _check_target(path)
    tmp = path.parent / f"{path.name}.{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    fd = create_exclusive(tmp)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        _check_target(path)  # again, just before the rename
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    clean_stale_tmp(path)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """:func:`write_bytes_atomic` of UTF-8 text."""
    write_bytes_atomic(path, text.encode("utf-8"))


def save_figure(fig: Any, path: str | os.PathLike, **savefig_kwargs: Any) -> None:
    """A matplotlib figure written as a PNG by :func:`write_bytes_atomic` (never through a link)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", **savefig_kwargs)
    write_bytes_atomic(path, buf.getvalue())


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


def move_aside(folder: str | os.PathLike, fingerprint: str | None, paths: Iterable[str | os.PathLike]) -> Path:
    """Move ``paths`` (relpos's own files and folders of an earlier run, inside ``folder``) into a new
    ``folder/previous-<fingerprint>-<time>/``; returns it. Nothing is deleted: this is what ``--force`` does with
    the results of other settings."""
    import datetime
    import shutil

    dest = Path(folder) / f"previous-{fingerprint or 'unknown'}-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    dest.mkdir(parents=True)
    for p in paths:
        shutil.move(str(p), str(dest / Path(p).name))
    return dest


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Write JSON to a temporary file beside ``path``, flush it, then rename it into place.

    The file gets the usual permissions (0666 minus the umask, like every other
    file relpos writes); leftover temporary files of dead writers are removed.

    Raises:
        OutputDirError: ``path`` exists and is not a regular file (a symbolic link is
            neither followed nor replaced); nothing is written.
    """
    write_bytes_atomic(path, json.dumps(obj, indent=1, allow_nan=False).encode())  # refused NaN: nothing written
