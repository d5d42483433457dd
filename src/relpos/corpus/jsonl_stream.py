"""A JSONL record too long to hold: its text field read in bounded pieces, in two passes.

:mod:`relpos.corpus.readers` parses a JSONL line of at most :data:`LINE_LIMIT` bytes
with :func:`json.loads`. A longer line is never held whole: :func:`scan_record`
walks it in pieces of about 1 MiB with an explicit stack (no recursion, so any
nesting depth is fine) and yields the decoded text of the top-level string field
``text_field`` piece by piece. The reader runs it twice: once to hash the text (the
split key of a JSONL document is its text) and check the record, once to yield the
text. Nested values other than the text field are skipped by their brackets and
strings only (a malformed number deep inside one is not diagnosed here).
"""

from __future__ import annotations

import codecs
import re
from typing import Iterator

__all__ = ["LINE_LIMIT", "scan_record"]

#: Longest JSONL line parsed whole with json.loads; longer ones are streamed.
LINE_LIMIT = 2 << 20
_FLUSH = 1 << 18  # characters gathered before a piece is yielded
_STOP = re.compile(rb'["\\\x00-\x1f]')
_STRUCT = re.compile(rb'["\[\]{}]')
_LITERAL = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null")
_ESC = {ord('"'): '"', ord("\\"): "\\", ord("/"): "/", ord("b"): "\b", ord("f"): "\f", ord("n"): "\n",
        ord("r"): "\r", ord("t"): "\t"}
_MAX_LITERAL = 1 << 16


class _Bytes:
    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.it, self.buf, self.pos, self.eof = iter(chunks), b"", 0, False

    def more(self) -> bool:
        if self.eof:
            return False
        nxt = next(self.it, None)
        if nxt is None:
            self.eof = True
            return False
        self.buf = self.buf[self.pos:] + nxt
        self.pos = 0
        return True

    def need(self, n: int) -> bool:
        while len(self.buf) - self.pos < n:
            if not self.more():
                return False
        return True

    def peek(self) -> int | None:
        while True:
            b, p = self.buf, self.pos
            while p < len(b) and b[p] in b" \t\r\n":
                p += 1
            self.pos = p
            if p < len(b):
                return b[p]
            if not self.more():
                return None


def _bad(msg: str) -> ValueError:
    return ValueError(f"not a JSON line ({msg})")


def _string(s: _Bytes, keep: bool, limit: int | None = None) -> Iterator[str]:
    """After an opening quote: the string's text in pieces (nothing when ``keep`` is false)."""
    dec = codecs.getincrementaldecoder("utf-8")("strict")
    out: list[str] = []
    n = 0
    hi: int | None = None  # a high surrogate waiting for its low half

    def emit(t: str) -> None:
        nonlocal n
        if keep and t and (limit is None or n < limit):
            out.append(t)
            n += len(t)

    while True:
        m = _STOP.search(s.buf, s.pos)
        if m is None:
            try:
                text = dec.decode(s.buf[s.pos:])
            except UnicodeDecodeError:
                raise _bad("not UTF-8") from None
            if text and hi is not None:
                emit(chr(hi))
                hi = None
            emit(text)
            s.pos = len(s.buf)
            if not s.more():
                raise _bad("a string is not closed")
        else:
            i = m.start()
            try:
                text = dec.decode(s.buf[s.pos:i])
            except UnicodeDecodeError:
                raise _bad("not UTF-8") from None
            if text and hi is not None:
                emit(chr(hi))
                hi = None
            emit(text)
            c = s.buf[i]
            if c == 0x22:  # closing quote
                s.pos = i + 1
                try:
                    dec.decode(b"", final=True)
                except UnicodeDecodeError:
                    raise _bad("not UTF-8") from None
                if hi is not None:
                    emit(chr(hi))
                if out:
                    yield "".join(out)
                return
            if c < 0x20:
                raise _bad("a control character in a string")
            s.pos = i
            if not s.need(2):
                raise _bad("a string is not closed")
            e = s.buf[s.pos + 1]
            if e in _ESC:
                if hi is not None:
                    emit(chr(hi))
                    hi = None
                emit(_ESC[e])
                s.pos += 2
            elif e == ord("u"):
                if not s.need(6):
                    raise _bad("a string is not closed")
                h = s.buf[s.pos + 2: s.pos + 6]
                try:
                    code = int(h, 16)
                except ValueError:
                    raise _bad("a bad \\u escape") from None
                s.pos += 6
                if hi is not None and 0xDC00 <= code <= 0xDFFF:
                    emit(chr(0x10000 + ((hi - 0xD800) << 10) + (code - 0xDC00)))
                    hi = None
                else:
                    if hi is not None:
                        emit(chr(hi))
                        hi = None
                    if 0xD800 <= code <= 0xDBFF:
                        hi = code
                    else:
                        emit(chr(code))
            else:
                raise _bad("a bad escape in a string")
        if keep and n >= _FLUSH and out:
            yield "".join(out)
            out, n = [], 0 if limit is None else n


def _skip_container(s: _Bytes) -> None:
    """After an opening bracket: skip to its match (explicit stack, any depth)."""
    closers = [s.buf[s.pos - 1]]
    while closers:
        m = _STRUCT.search(s.buf, s.pos)
        if m is None:
            s.pos = len(s.buf)
            if not s.more():
                raise _bad("an object or array is not closed")
            continue
        c = s.buf[m.start()]
        s.pos = m.end()
        if c == 0x22:
            for _ in _string(s, keep=False):
                pass
        elif c in (0x5B, 0x7B):
            closers.append(c)
        else:
            if (closers[-1], c) not in ((0x5B, 0x5D), (0x7B, 0x7D)):
                raise _bad("brackets do not match")
            closers.pop()


def _literal(s: _Bytes) -> None:
    while True:
        m = _LITERAL.match(s.buf, s.pos)
        if m is not None and (m.end() < len(s.buf) or s.eof):
            s.pos = m.end()
            return
        if len(s.buf) - s.pos > _MAX_LITERAL or not s.more():
            if m is not None and s.eof:
                s.pos = m.end()
                return
            raise _bad("a value is not valid JSON")


def scan_record(chunks: Iterator[bytes], text_field: str) -> Iterator[tuple]:
    """Walk one JSON object; yield ``("text", k, piece)`` for the k-th top-level ``text_field`` that is a
    string, ``("type", k, name)`` for one that is not, ``("key", name)`` for the other top-level keys
    (their first 40 characters), and ``("blank",)`` for a line of white space only.

    Raises:
        ValueError: the line is not one JSON object.
    """
    s = _Bytes(chunks)
    c = s.peek()
    if c is None:
        yield ("blank",)
        return
    if c != 0x7B:
        raise ValueError("expected a JSON object")
    s.pos += 1
    k = 0
    first = True
    while True:
        c = s.peek()
        if c == 0x7D and first:
            s.pos += 1
            break
        if c != 0x22:
            raise _bad("expected a key")
        s.pos += 1
        key = "".join(_string(s, keep=True, limit=max(41, len(text_field) + 1)))
        if s.peek() != 0x3A:
            raise _bad("expected ':'")
        s.pos += 1
        c = s.peek()
        ours = key == text_field
        if not ours:
            yield ("key", key[:40])
        if c == 0x22:
            s.pos += 1
            for piece in _string(s, keep=ours):
                yield ("text", k, piece)
        elif c in (0x5B, 0x7B):
            s.pos += 1
            if ours:
                yield ("type", k, "list" if c == 0x5B else "dict")
            _skip_container(s)
        elif c is None:
            raise _bad("a value is missing")
        else:
            if ours:
                yield ("type", k, {0x74: "bool", 0x66: "bool", 0x6E: "NoneType"}.get(c, "number"))
            _literal(s)
        if ours:
            yield ("end", k)
            k += 1
        first = False
        c = s.peek()
        if c == 0x2C:
            s.pos += 1
            continue
        if c == 0x7D:
            s.pos += 1
            break
        raise _bad("expected ',' or '}'")
    if s.peek() is not None:
        raise _bad("extra data after the object")
