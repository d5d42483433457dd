"""Reading a user's corpus as a stream of documents, one bounded piece at a time.

Four forms are recognised (:func:`detect_kind`):

* ``"text"`` -- one UTF-8 text file. It is cut into chunks of about
  ``chunk_size(file size)`` bytes, each ending at a line break where one exists;
  each chunk is a document.
* ``"folder"`` -- a folder; every file matching ``glob`` (default ``**/*``,
  recursive, sorted by relative path) is a document. Binary files (a NUL byte in
  their first 8 KiB) and files that are not valid UTF-8 are skipped and counted.
* ``"jsonl"`` -- an uncompressed ``.jsonl`` or ``.ndjson`` file; the string
  field ``text_field`` of each record is a document. Blank lines are skipped.
* ``"hf"`` -- a Hugging Face ``datasets`` folder written by ``save_to_disk``
  (a ``Dataset`` or a ``DatasetDict``, whose splits are read in sorted order);
  column ``text_field`` holds the documents. Needs the optional ``datasets``
  package (``pip install 'relpos[data]'``).

A :class:`Doc` carries its *split key* (the bytes whose hash decides train or
validation: the relative path for folder files, as for the built-in corpus; the
content for every other form, so duplicates never straddle the split) and an
iterator of ``str`` pieces of at most about 1 MiB each, so no reader ever holds a
whole large file in memory.
"""

from __future__ import annotations

import codecs
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

__all__ = ["Doc", "Skipped", "detect_kind", "read_docs", "chunk_size", "file_signature", "KINDS", "check_glob",
           "check_regular_file"]

KINDS = ("text", "folder", "jsonl", "hf")
_PIECE = 1 << 20  # bytes read per piece
_SNIFF = 8192


@dataclass
class Doc:
    """One document: ``split_key`` decides its split; ``pieces()`` yields its text."""

    split_key: bytes
    pieces: Callable[[], Iterator[str]]
    sep: str = "\n\n"  # appended after the document
    name: str = ""
    split: str | None = None  # the split, when it was worked out from a hash of a key too long to hold


@dataclass
class Skipped:
    """Files a folder reader left out, by reason (counted in the corpus report)."""

    binary: list[str] = field(default_factory=list)
    undecodable: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)

    def counts(self) -> dict:
        return {"binary": len(self.binary), "undecodable": len(self.undecodable), "unreadable": len(self.unreadable)}


class Undecodable(ValueError):
    """A file is not valid UTF-8 text."""


def _is_hf_folder(p: Path) -> bool:
    return p.is_dir() and ((p / "dataset_dict.json").is_file() or
                           ((p / "state.json").is_file() and (p / "dataset_info.json").is_file()))


def detect_kind(path: str | os.PathLike) -> str:
    """The form of the corpus at ``path`` (one of :data:`KINDS`).

    Raises:
        FileNotFoundError: nothing at ``path``.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"corpus {str(p)!r} does not exist")
    if p.is_dir():
        return "hf" if _is_hf_folder(p) else "folder"
    check_regular_file(p, "--corpus")
    if p.suffix.lower() in (".jsonl", ".ndjson"):
        return "jsonl"
    return "text"


def check_regular_file(path: str | os.PathLike, flag: str) -> None:
    """Raise ValueError unless ``path`` is a regular file (a named pipe or device would block a read).

    Only ``stat``-ed, never opened.
    """
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        kind = ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "a folder" if stat.S_ISDIR(mode) else "a device")
        raise ValueError(f"{flag} {str(path)!r} is {kind}; relpos reads only regular files and folders")


def check_glob(glob: str, flag: str = "--corpus-glob") -> str:
    """Return ``glob`` if it names files inside the corpus folder: relative, without ``..``.

    Raises:
        ValueError: an empty, absolute or ``~`` pattern, or one with a ``..`` part (it would read
            files outside the corpus folder).
    """
    if not isinstance(glob, str) or not glob.strip():
        raise ValueError(f"{flag} must be a non-empty pattern relative to the corpus folder, e.g. '**/*.txt'")
    parts = glob.replace("\\", "/").split("/")
    if glob.startswith(("/", "~")) or os.path.isabs(glob) or ".." in parts:
        raise ValueError(f"{flag} {glob!r} reaches outside the corpus folder; give a pattern relative to it "
                         f"without '..' (e.g. '**/*.txt')")
    return glob


def chunk_size(nbytes: int) -> int:
    """Chunk length of a single text file: about 1/256 of it, between 1 KiB and 1 MiB."""
    return min(_PIECE, max(1024, nbytes // 256))


def _folder_files(root: Path, glob: str) -> list[Path]:
    check_glob(glob)
    files = [p for p in root.glob(glob) if p.is_file()]  # is_file: regular files only, never a pipe or device
    return sorted(files, key=lambda q: q.relative_to(root).as_posix())


def file_signature(path: str | os.PathLike, kind: str, glob: str | None = None) -> list:
    """(relative path, size, mtime_ns) of every file the corpus is read from (the cache key)."""
    p = Path(path)
    if kind == "folder":
        files = _folder_files(p, glob or "**/*")
    elif kind == "hf":
        files = sorted((q for q in p.rglob("*") if q.is_file()), key=lambda q: q.as_posix())
    else:
        st = p.stat()
        return [[p.name, st.st_size, st.st_mtime_ns]]
    out = []
    for q in files:
        st = q.stat()
        out.append([q.relative_to(p).as_posix(), st.st_size, st.st_mtime_ns])
    return out


def _decode_stream(f, name: str) -> Iterator[str]:
    """UTF-8 pieces of a binary file object, each ending at a line break where possible."""
    dec = codecs.getincrementaldecoder("utf-8")("strict")
    carry = ""
    while True:
        raw = f.read(_PIECE)
        try:
            text = dec.decode(raw, final=not raw)
        except UnicodeDecodeError as e:
            raise Undecodable(f"{name} is not UTF-8 text ({e.reason} at a byte near offset {f.tell()})") from None
        if not raw:
            if carry or text:
                yield carry + text
            return
        text = carry + text
        cut = text.rfind("\n") + 1
        if cut == 0:  # no line break in a whole piece: cut anywhere
            cut = len(text)
        carry = text[cut:]
        if cut:
            yield text[:cut]


def _folder_docs(root: Path, glob: str, skipped: Skipped) -> Iterator[Doc]:
    for p in _folder_files(root, glob):
        rel = p.relative_to(root).as_posix()
        try:
            with open(p, "rb") as f:
                head = f.read(_SNIFF)
        except OSError:
            skipped.unreadable.append(rel)
            continue
        if b"\x00" in head:
            skipped.binary.append(rel)
            continue

        def pieces(p=p, rel=rel):
            with open(p, "rb") as f:
                yield from _decode_stream(f, rel)

        yield Doc(rel.encode("utf-8"), pieces, name=rel)


def _text_docs(path: Path) -> Iterator[Doc]:
    size = path.stat().st_size
    with open(path, "rb") as f:
        if b"\x00" in f.read(_SNIFF):
            raise ValueError(f"corpus {str(path)!r} is a binary file, not text")
    target = chunk_size(size)
    with open(path, "rb") as f:
        buf = ""
        for piece in _decode_stream(f, str(path)):
            buf += piece
            while len(buf) >= target:
                cut = buf.rfind("\n", 0, target) + 1 or buf.find("\n", target) + 1 or len(buf)
                chunk, buf = buf[:cut], buf[cut:]
                yield Doc(chunk.encode("utf-8", "surrogatepass"), lambda c=chunk: iter([c]), sep="")
        if buf:
            yield Doc(buf.encode("utf-8", "surrogatepass"), lambda c=buf: iter([c]), sep="")


def _text_of(rec, text_field: str, where: str) -> str:
    if not isinstance(rec, dict):
        raise ValueError(f"{where}: expected a JSON object with a {text_field!r} field, got {type(rec).__name__}")
    if text_field not in rec:
        keys = ", ".join(sorted(map(str, rec))[:12]) or "none"
        raise ValueError(f"{where}: no text field {text_field!r} (fields: {keys}); choose one with --text-field")
    t = rec[text_field]
    if not isinstance(t, str):
        raise ValueError(f"{where}: field {text_field!r} must be a string, got {type(t).__name__}")
    return t


def _jsonl_lines(f) -> Iterator[tuple[int, bytes | None, int, int]]:
    """``(line number, line or None, start, end)``: a line over LINE_LIMIT bytes is not read into memory."""
    from relpos.corpus.jsonl_stream import LINE_LIMIT

    i = 0
    while True:
        start = f.tell()
        line = f.readline(LINE_LIMIT + 1)
        if not line:
            return
        i += 1
        if len(line) <= LINE_LIMIT or line.endswith(b"\n"):
            yield i, line, start, start + len(line)
            continue
        while True:  # find the end of the long line, a piece at a time
            part = f.readline(_PIECE)
            if not part or part.endswith(b"\n"):
                break
        yield i, None, start, f.tell()


def _byte_range(path: Path, start: int, end: int) -> Iterator[bytes]:
    with open(path, "rb") as f:
        f.seek(start)
        left = end - start
        while left > 0:
            b = f.read(min(_PIECE, left))
            if not b:
                return
            left -= len(b)
            yield b


def _long_record(path: Path, i: int, start: int, end: int, text_field: str) -> Doc | None:
    """The document of a JSONL line too long to hold: hashed in a first pass, read in a second."""
    import hashlib

    from relpos.corpus.jsonl_stream import scan_record
    from relpos.data import split_of_sha1

    where = f"{path}:{i}"
    hashes: dict[int, tuple] = {}
    types: dict[int, str] = {}
    keys: list[str] = []
    try:
        for ev in scan_record(_byte_range(path, start, end), text_field):
            if ev[0] == "blank":
                return None
            if ev[0] == "text":
                h, n = hashes.get(ev[1], (hashlib.sha1(), 0))
                h.update(ev[2].encode("utf-8", "surrogatepass"))
                hashes[ev[1]] = (h, n + len(ev[2]))
            elif ev[0] == "type":
                types[ev[1]] = ev[2]
            elif ev[0] == "end":
                hashes.setdefault(ev[1], (hashlib.sha1(), 0))
            elif ev[0] == "key" and len(keys) < 12:
                keys.append(ev[1])
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    if not hashes:
        raise ValueError(f"{where}: no text field {text_field!r} (fields: {', '.join(sorted(keys)) or 'none'}); "
                         "choose one with --text-field")
    last = max(hashes)  # as json.loads: the last of a repeated key wins
    if last in types:
        raise ValueError(f"{where}: field {text_field!r} must be a string, got {types[last]}")
    h, n = hashes[last]
    if n == 0:
        return None

    def pieces():
        for ev in scan_record(_byte_range(path, start, end), text_field):
            if ev[0] == "text" and ev[1] == last:
                yield ev[2]

    return Doc(b"", pieces, name=f"line {i}", split=split_of_sha1(h.digest()))


def _jsonl_docs(path: Path, text_field: str) -> Iterator[Doc]:
    with open(path, "rb") as f:
        for i, line, start, end in _jsonl_lines(f):
            if line is None:
                doc = _long_record(path, i, start, end, text_field)
                if doc is not None:
                    yield doc
                continue
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise ValueError(f"{path}:{i}: not a JSON line ({e})") from None
            except RecursionError:
                raise ValueError(f"{path}:{i}: the JSON record is nested too deeply for Python's parser; "
                                 "give flat records with a string text field") from None
            t = _text_of(rec, text_field, f"{path}:{i}")
            if t:
                yield Doc(t.encode("utf-8", "surrogatepass"), lambda t=t: iter([t]), name=f"line {i}")


def check_hf_folder(path: Path, text_field: str):
    """Open a ``save_to_disk`` folder and check the text column; returns the datasets, sorted by split."""
    try:
        import datasets
    except ImportError:
        raise ValueError(
            f"{path} is a Hugging Face datasets folder; reading it needs the optional 'datasets' package "
            "(pip install 'relpos[data]')"
        ) from None
    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as e:  # noqa: BLE001 - any failure to open is bad input
        raise ValueError(f"could not open the datasets folder {path}: {e}") from None
    parts = [ds[k] for k in sorted(ds)] if isinstance(ds, datasets.DatasetDict) else [ds]
    for d in parts:
        if text_field not in d.column_names:
            raise ValueError(f"{path}: no text field {text_field!r} (columns: {', '.join(d.column_names)}); "
                             "choose one with --text-field")
    return parts


def _hf_docs(path: Path, text_field: str) -> Iterator[Doc]:
    for part in check_hf_folder(path, text_field):
        i = 0
        for batch in part.select_columns([text_field]).iter(batch_size=512):
            for t in batch[text_field]:
                i += 1
                if t is None:
                    continue
                if not isinstance(t, str):
                    raise ValueError(f"{path}: row {i}: field {text_field!r} must be a string, got {type(t).__name__}")
                if t:
                    yield Doc(t.encode("utf-8", "surrogatepass"), lambda t=t: iter([t]), name=f"row {i}")


def read_docs(path: str | os.PathLike, kind: str, *, glob: str | None = None, text_field: str = "text",
              skipped: Skipped | None = None) -> Iterator[Doc]:
    """The documents of a corpus, in a fixed order. See the module docstring."""
    p = Path(path)
    if kind == "folder":
        return _folder_docs(p, glob or "**/*", skipped if skipped is not None else Skipped())
    if kind == "text":
        return _text_docs(p)
    if kind == "jsonl":
        return _jsonl_docs(p, text_field)
    if kind == "hf":
        return _hf_docs(p, text_field)
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
