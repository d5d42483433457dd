"""The explorer server's connections: one selector thread reads each request whole before it is computed.

A connection costs a file descriptor and its bytes so far, never a thread, until its
request (line, headers and ``Content-Length`` body) is in: a half-sent request, or
one whose client went away, is dropped without an answer; one that is not whole by
its deadline (``Limits.read_timeout_s``; ``Limits.idle_timeout_s`` between the
requests of a kept-alive connection) is closed; at most ``Limits.listen_backlog``
wait (a new one pushes out the one that has waited longest). A whole request waits
up to ``Limits.connection_wait_s`` for a computing slot, then gets a 503. Used by
:mod:`relpos.explorer.server`.
"""

from __future__ import annotations

import collections
import json
import re
import selectors
import socket
import sys
import threading
import time
import traceback

__all__ = ["Conn", "Reader", "close_socket", "reject", "MAX_HEAD_BYTES"]


_HEAD_END = re.compile(rb"\r?\n\r?\n")
_CONTENT_LENGTH = re.compile(rb"^content-length[ \t]*:[ \t]*([0-9]{1,18})[ \t]*\r?$", re.I | re.M)
_EXPECT_CONTINUE = re.compile(rb"^expect[ \t]*:[ \t]*100-continue[ \t]*\r?$", re.I | re.M)
#: Largest request line plus headers read before the request is refused (431).
MAX_HEAD_BYTES = 64 * 1024


class Conn:
    """A connection being read: its socket, the bytes so far, and the time its request must be whole by."""

    __slots__ = ("sock", "addr", "buf", "deadline", "ready_at", "need", "continued")

    def __init__(self, sock: socket.socket, addr, deadline: float) -> None:
        self.sock, self.addr, self.deadline = sock, addr, deadline
        self.buf = bytearray()
        self.ready_at = 0.0
        self.need = 0  # bytes of buf that make the request (head + body) once it is whole
        self.continued = False

    def rearm(self, deadline: float) -> None:
        """After an answer on a kept-alive connection: keep what the client sent beyond the request."""
        del self.buf[: self.need]
        self.need, self.deadline, self.continued = 0, deadline, False

    def state(self, lim) -> str:
        """``"ready"`` (a whole request is in ``buf``), ``"more"`` or ``"too_large"``."""
        m = _HEAD_END.search(self.buf, 0, MAX_HEAD_BYTES + 4)
        if m is None:
            return "too_large" if len(self.buf) > MAX_HEAD_BYTES else "more"
        head = bytes(self.buf[: m.end()])
        cl = _CONTENT_LENGTH.search(head)
        length = int(cl.group(1)) if cl else 0
        if length > lim.max_body_bytes:  # the handler answers 413 from the head alone
            length = 0
        if len(self.buf) >= m.end() + length:
            self.need = m.end() + length
            return "ready"
        if not self.continued and len(self.buf) == m.end() and _EXPECT_CONTINUE.search(head):
            self.continued = True  # the client waits for this before it sends the body
            try:
                self.sock.send(b"HTTP/1.1 100 Continue\r\n\r\n")
            except OSError:
                pass
        return "more"

    def read_available(self, lim) -> str:
        """Read what the socket holds now (non-blocking); the :meth:`state`, or ``"gone"``."""
        if self.state(lim) == "ready":  # e.g. a second request already sent on a kept-alive connection
            return "ready"
        while True:
            try:
                data = self.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return self.state(lim)
            except OSError:
                return "gone"
            if not data:
                return "gone"  # closed before the request was whole: never dispatched
            self.buf += data
            st = self.state(lim)
            if st != "more":
                return st


def close_socket(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:  # pragma: no cover
        pass


def reject(conn: Conn, status: int, message: str) -> None:
    """Answer a short JSON error from the reader thread and close (never blocks for long)."""
    reason = {503: "Service Unavailable", 431: "Request Header Fields Too Large"}.get(status, "Error")
    code = "busy" if status == 503 else "too_large"
    body = json.dumps({"error": message, "code": code}).encode()
    extra = b"Retry-After: 1\r\n" if status == 503 else b""
    try:
        conn.sock.settimeout(0.05)
        conn.sock.sendall(b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n%sConnection: close\r\n"
                          b"Content-Length: %d\r\n\r\n" % (status, reason.encode(), extra, len(body)) + body)
    except OSError:
        pass
    close_socket(conn.sock)


class Reader:
    """One thread that reads every connection until its request is whole, then dispatches it.

    Connections waiting for bytes cost a file descriptor and a few bytes, never a thread; each must
    deliver its whole request by its deadline or is closed; at most ``Limits.listen_backlog`` wait
    (a new one pushes out the one that has waited longest). Whole requests wait for a computing slot
    for up to ``Limits.connection_wait_s``, then get a 503.
    """

    def __init__(self, server) -> None:  # an ExplorerServer
        self.server = server
        self.sel = selectors.DefaultSelector()
        self.lock = threading.Lock()
        self.inbox: list[tuple[Conn, bool]] = []
        self.waiting: dict[socket.socket, Conn] = {}
        self.ready: collections.deque[Conn] = collections.deque()
        self._r, self._w = socket.socketpair()
        self._r.setblocking(False)
        self._w.setblocking(False)
        self.sel.register(self._r, selectors.EVENT_READ, None)

    def add(self, conn: Conn, *, ready: bool) -> None:
        with self.lock:
            self.inbox.append((conn, ready))
        self.wake()

    def wake(self) -> None:
        try:
            self._w.send(b"x")
        except OSError:  # full (a wake-up is pending anyway) or closed
            pass

    def _drop(self, conn: Conn) -> None:
        if self.waiting.pop(conn.sock, None) is not None:
            try:
                self.sel.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass
        close_socket(conn.sock)

    def _take_inbox(self, now: float) -> None:
        with self.lock:
            new, self.inbox = self.inbox, []
        lim = self.server.explorer.limits
        for conn, ready in new:
            if ready:
                conn.ready_at = now
                self.ready.append(conn)
                continue
            st = "more"
            try:
                conn.sock.setblocking(False)
                st = conn.read_available(lim)
            except OSError:
                st = "gone"
            if st == "ready":
                conn.ready_at = now
                self.ready.append(conn)
            elif st == "more":
                while len(self.waiting) >= max(1, lim.listen_backlog):
                    self._drop(min(self.waiting.values(), key=lambda c: c.deadline))
                self.waiting[conn.sock] = conn
                self.sel.register(conn.sock, selectors.EVENT_READ, conn)
            elif st == "too_large":
                reject(conn, 431, "the request head is too large")
            else:
                close_socket(conn.sock)

    def _dispatch(self, now: float) -> None:
        lim = self.server.explorer.limits
        while self.ready:
            if self.server._slots.acquire(blocking=False):
                self.server._start(self.ready.popleft())
            elif now - self.ready[0].ready_at > lim.connection_wait_s:
                reject(self.ready.popleft(), 503, "the explorer is busy (too many connections); try again")
            else:
                break

    def run(self) -> None:
        try:
            while not self.server._closing.is_set():
                try:
                    self._once()
                except Exception:  # pragma: no cover - a bug; keep reading and say so
                    traceback.print_exc(file=sys.stderr)
                    time.sleep(0.05)
        finally:
            for conn in list(self.waiting.values()):
                self._drop(conn)
            while self.ready:
                close_socket(self.ready.popleft().sock)
            self.sel.close()
            self._r.close()
            self._w.close()

    def _once(self) -> None:
        """One turn: take new connections, dispatch whole requests, read, drop the late ones."""
        lim = self.server.explorer.limits
        now = time.monotonic()
        self._take_inbox(now)
        self._dispatch(now)
        nearest = min((c.deadline for c in self.waiting.values()), default=now + 0.25)
        timeout = max(0.0, min(nearest - now, 0.25 if self.ready else 1.0))
        for key, _ in self.sel.select(timeout):
            conn = key.data
            if conn is None:
                try:
                    while self._r.recv(4096):
                        pass
                except OSError:
                    pass
                continue
            st = conn.read_available(lim)
            if st == "more":
                continue
            try:
                self.sel.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass
            self.waiting.pop(conn.sock, None)
            if st == "ready":
                conn.ready_at = time.monotonic()
                self.ready.append(conn)
            elif st == "too_large":
                reject(conn, 431, "the request head is too large")
            else:
                close_socket(conn.sock)  # half-sent and closed: dropped, never dispatched
        now = time.monotonic()
        for conn in [c for c in self.waiting.values() if c.deadline < now]:
            self._drop(conn)  # not whole in time (slow, idle or trickling): dropped unanswered
        self._dispatch(now)
