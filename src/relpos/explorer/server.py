"""A small local web server for the explorer (standard library only).

It serves the packaged static files (``index.html``, ``style.css`` and the
page's JavaScript modules, listed once at import from the package, never
looked up from a path taken from the request) and the JSON API of
:class:`relpos.explorer.api.Explorer` under ``/api/<route>``.

Safety:

* binds ``127.0.0.1`` unless told otherwise (IPv4 or IPv6, e.g. ``::1``), on a
  free port by default; an unresolvable host or a port in use is a clear error;
* checks the ``Host`` header on loopback binds (so a web page elsewhere cannot
  reach it through DNS rebinding);
* caps the query string and request body sizes; the API caps sequence lengths,
  text lengths and head counts, and the cost (parameters and arithmetic) a
  combination of options implies, and answers with a clear message;
* requests are read by one selector thread, without a handler thread: only a
  request that arrived whole (line, headers and its ``Content-Length`` body)
  within ``Limits.read_timeout_s`` is dispatched -- a half-sent one, or one whose
  client went away, is dropped unanswered, so slow or idle sockets cost no
  thread and never delay a normal request; at most ``Limits.listen_backlog``
  connections wait to be read (past that the oldest is dropped), at most
  ``Limits.max_connections`` requests are computed at once (more wait up to
  ``Limits.connection_wait_s``, then get a 503), and a kept-alive connection
  is closed after ``Limits.idle_timeout_s``;
* any method but GET, HEAD and POST (TRACE, CONNECT, ...) is answered with 405;
  a client that hangs up mid-answer is let go quietly (no traceback);
* sends a Content-Security-Policy that allows nothing but its own origin.
"""

from __future__ import annotations

import errno
import io
import ipaddress
import json
import socket
import sys
import threading
import time
import traceback
from functools import lru_cache
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from urllib.parse import parse_qsl, urlsplit

from relpos.explorer.api import ApiError, Explorer
from relpos.explorer.connections import Conn, Reader, close_socket, reject

__all__ = ["BindError", "ExplorerServer", "make_server", "serve", "serve_in_thread", "STATIC_FILES",
           "static_text", "resolve"]

_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8"}


def _list_static() -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    root = resources.files("relpos.explorer").joinpath("static")

    def walk(node, prefix: str) -> None:
        for child in node.iterdir():
            rel = prefix + child.name
            if child.is_dir():
                walk(child, rel + "/")
                continue
            ext = "." + child.name.rsplit(".", 1)[-1] if "." in child.name else ""
            if ext in _TYPES:
                out["/" + rel] = (rel, _TYPES[ext])

    walk(root, "")
    out["/"] = out["/index.html"]
    return out


#: URL path -> (file under explorer/static, content type). Nothing else is served.
STATIC_FILES: dict[str, tuple[str, str]] = _list_static()

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


@lru_cache(maxsize=None)
def _static_bytes(name: str) -> bytes:
    node = resources.files("relpos.explorer").joinpath("static")
    for part in name.split("/"):
        node = node.joinpath(part)
    return node.read_bytes()


def static_text(name: str) -> str:
    """One of the packaged static files (a path under ``static/``), as text."""
    return _static_bytes(name).decode("utf-8")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class BindError(OSError, ValueError):
    """The server cannot listen where asked (port in use, address not on this machine, permission).

    Both an ``OSError`` (what it is) and a ``ValueError`` (a bad ``--host`` /
    ``--port`` the user can fix), so a CLI that reports ValueErrors as one line
    reports this one too.
    """

    def __str__(self) -> str:
        return self.strerror or super().__str__()


def resolve(host: str, port: int) -> tuple[int, tuple]:
    """``(address family, socket address)`` to bind for ``host`` (a name, IPv4 or IPv6 address).

    Raises:
        ValueError: the host cannot be resolved (the message says what to pass instead).
    """
    if not isinstance(host, str) or not host.strip():
        raise ValueError(f"host must be a host name or an IP address, got {host!r}")
    name = host.strip().strip("[]")
    try:
        infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ValueError(f"cannot resolve host {host!r} ({e.strerror}); pass an IP address such as "
                         f"127.0.0.1 or ::1") from None
    except UnicodeError:
        raise ValueError(f"host {host!r} is not a valid host name") from None
    infos.sort(key=lambda i: i[0] != socket.AF_INET)  # prefer IPv4 when a name has both
    family, _, _, _, sockaddr = infos[0]
    return family, sockaddr


class _Once:
    """Call ``fn`` on the first call only (thread-safe)."""

    def __init__(self, fn) -> None:
        self.fn, self.done, self.lock = fn, False, threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            if self.done:
                return
            self.done = True
        self.fn()


class ExplorerServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` carrying the :class:`Explorer` it answers for, with the limits above."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], explorer: Explorer, *, quiet: bool = True) -> None:
        self.explorer = explorer
        self.quiet = quiet
        lim = explorer.limits
        self.request_queue_size = lim.listen_backlog
        self._slots = threading.BoundedSemaphore(lim.max_connections)
        self._deadlines: dict[socket.socket, float] = {}
        self._deadline_lock = threading.Lock()
        self._closing = threading.Event()
        self._reader = Reader(self)
        host, port = address
        self.address_family, sockaddr = resolve(host, port)
        try:
            super().__init__(sockaddr, _Handler)
        except OSError as e:
            raise _bind_error(e, host, port) from None
        bound_host, bound_port = self.server_address[:2]
        self.loopback = _is_loopback(host) or _is_loopback(bound_host)
        self.allowed_hosts = {f"{h}:{bound_port}" for h in ("127.0.0.1", "localhost", "[::1]", host,
                                                            f"[{bound_host}]" if ":" in bound_host else bound_host)}
        threading.Thread(target=self._watchdog, name="relpos-explorer-watchdog", daemon=True).start()
        threading.Thread(target=self._reader.run, name="relpos-explorer-reader", daemon=True).start()

    def server_bind(self) -> None:
        # like HTTPServer.server_bind, without the reverse DNS lookup of getfqdn()
        import socketserver

        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = host
        self.server_port = port

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/"

    # ------------------------------------------------------- connection limits

    def process_request(self, request, client_address) -> None:
        """Hand a new connection to the reader; never blocks the accept loop.

        A request that is already whole (the usual case for a local client) is dispatched here and now.
        """
        conn = Conn(request, client_address, time.monotonic() + self.explorer.limits.read_timeout_s)
        try:
            request.setblocking(False)
            state = conn.read_available(self.explorer.limits)
        except OSError:
            state = "gone"
        if state == "ready" and self._slots.acquire(blocking=False):
            self._start(conn)
        elif state in ("ready", "more"):
            self._reader.add(conn, ready=state == "ready")
        elif state == "too_large":
            reject(conn, 431, "the request head is too large")
        else:
            close_socket(request)  # went away before a whole request arrived: nothing is dispatched

    def _start(self, conn: "Conn") -> None:
        """Compute ``conn``'s request in a handler thread; a slot is already held."""
        # the slot is released exactly once: by the handler thread when it ends, or here if starting
        # it was interrupted (Ctrl+C can arrive while Thread.start waits for the thread; releasing
        # twice raised ValueError, which socketserver logged in place of the KeyboardInterrupt, and
        # the server kept running)
        release = _Once(self._release)
        t = threading.Thread(target=self._serve_one, args=(conn, conn.addr, release), daemon=True)
        try:
            t.start()
        except BaseException:
            release()
            raise

    def _release(self) -> None:
        self._slots.release()
        self._reader.wake()  # a request waiting for a slot may go now

    def _serve_one(self, conn, client_address, release) -> None:
        keep = False
        try:
            conn.sock.setblocking(True)
            conn.sock.settimeout(self.explorer.limits.read_timeout_s)  # bounds each write to a slow reader
            handler = _Handler(conn, client_address, self)
            keep = not handler.close_connection and not self._closing.is_set()
        except OSError:  # the client went away mid-answer
            keep = False
        except Exception:  # pragma: no cover - a bug; keep serving and say so
            traceback.print_exc(file=sys.stderr)
        finally:
            release()
            if keep:
                conn.rearm(time.monotonic() + self.explorer.limits.idle_timeout_s)
                self._reader.add(conn, ready=False)
            else:
                close_socket(conn.sock)

    def watch(self, sock: socket.socket, seconds: float) -> None:
        """Drop ``sock`` unless :meth:`unwatch` is called within ``seconds``."""
        with self._deadline_lock:
            self._deadlines[sock] = time.monotonic() + seconds

    def unwatch(self, sock: socket.socket) -> None:
        with self._deadline_lock:
            self._deadlines.pop(sock, None)

    def _watchdog(self) -> None:
        while not self._closing.wait(0.25):
            now = time.monotonic()
            with self._deadline_lock:
                late = [s for s, t in self._deadlines.items() if t < now]
                for s in late:
                    del self._deadlines[s]
            for s in late:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def server_close(self) -> None:
        self._closing.set()
        self._reader.wake()
        super().server_close()


def _bind_error(e: OSError, host: str, port: int) -> BindError:
    if e.errno == errno.EADDRINUSE:
        msg = f"port {port} on {host} is already in use; pick another --port, or 0 for a free one"
    elif e.errno == errno.EADDRNOTAVAIL:
        msg = f"{host} is not an address of this machine; use 127.0.0.1 or ::1"
    elif e.errno in (errno.EACCES, errno.EPERM):
        msg = f"no permission to listen on port {port} (ports below 1024 need root); pick one above 1023, or 0"
    elif e.errno == errno.EAFNOSUPPORT:
        msg = f"this machine cannot listen on {host} (address family not supported)"
    else:
        msg = f"cannot listen on {host} port {port}: {e.strerror or e}"
    return BindError(e.errno or 0, msg)


class _Handler(BaseHTTPRequestHandler):
    server: ExplorerServer
    server_version = "relpos-explorer"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    # -------------------------------------------------------------- plumbing

    def setup(self) -> None:
        # the reader has the whole request in memory: parse it from there, answer on the socket
        conn: Conn = self.request
        self.request = self.connection = conn.sock
        self.rfile = io.BytesIO(bytes(conn.buf[: conn.need]))
        self.wfile = self.connection.makefile("wb", buffering=0)

    def handle(self) -> None:
        # one request; the server gives a kept-alive connection back to the reader for the next one
        self.close_connection = True
        self.handle_one_request()

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except (ConnectionError, TimeoutError, OSError):
            self.close_connection = True

    def __getattr__(self, name: str):
        if name.startswith("do_"):  # TRACE, CONNECT, any unknown method: 405, not 501
            return self._not_allowed
        raise AttributeError(name)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib signature
        if not self.server.quiet:
            super().log_message(format, *args)

    def _send(self, status: int, body: bytes, ctype: str, *, extra: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj: dict, **kw) -> None:
        body = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
        self._send(status, body, "application/json; charset=utf-8", **kw)

    def _error(self, err: ApiError, **kw) -> None:
        self._json(err.status, err.to_json(), **kw)

    def parse_request(self) -> bool:  # noqa: D102 - the stdlib's, then one header of each of these at most
        if not super().parse_request():
            return False
        for name in ("Host", "Content-Length"):  # two of them: which one a proxy and the explorer read may differ
            if len(self.headers.get_all(name) or ()) > 1:
                self.close_connection = True
                self._error(ApiError(f"the {name} header is given more than once", code="bad_request", status=400))
                return False
        return True

    def _host_ok(self) -> bool:
        if not self.server.loopback:
            return True
        return (self.headers.get("Host") or "").lower() in self.server.allowed_hosts

    def _params(self, query: str) -> dict[str, str]:
        lim = self.server.explorer.limits
        if len(query.encode("utf-8")) > lim.max_query_bytes:
            raise ApiError(f"the request is too long (over {lim.max_query_bytes} bytes)", code="too_large",
                           status=414, limit=lim.max_query_bytes, unit="bytes")
        try:
            pairs = parse_qsl(query, keep_blank_values=True, max_num_fields=64, errors="strict")
        except (ValueError, UnicodeDecodeError):
            raise ApiError("the request parameters cannot be read (bad encoding or too many fields)") from None
        out: dict[str, str] = {}
        for k, v in pairs:
            if k in out:
                raise ApiError(f"parameter {k[:40]!r} is given twice", field=k)
            out[k] = v
        return out

    # -------------------------------------------------------------- methods

    def do_HEAD(self) -> None:  # noqa: N802 - stdlib naming
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802
        self._dispatch(None)

    def do_POST(self) -> None:  # noqa: N802
        lim = self.server.explorer.limits
        try:
            raw_length = self.headers.get("Content-Length", "")
            if len(raw_length) > 20:
                raise ValueError(raw_length)
            length = int(raw_length)
        except ValueError:
            self.close_connection = True
            return self._error(ApiError("a POST needs a Content-Length", status=411))
        if length < 0 or length > lim.max_body_bytes:
            self.close_connection = True
            return self._error(ApiError(f"the upload is {length} bytes; the explorer accepts at most "
                                        f"{lim.max_body_bytes}", code="too_large", status=413,
                                        limit=lim.max_body_bytes, unit="bytes"))
        body = self.rfile.read(length)
        if len(body) != length:  # the client went away or was dropped by the read deadline
            self.close_connection = True
            return None
        self._dispatch(body)

    def _not_allowed(self) -> None:
        self.close_connection = True
        self._error(ApiError("method not allowed", status=405), extra={"Allow": "GET, HEAD, POST"})

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed  # noqa: N815

    def _dispatch(self, body: bytes | None) -> None:
        self.server.unwatch(self.connection)  # the request is in; computing it is not bounded by the read deadline
        if not self._host_ok():
            self.close_connection = True
            return self._error(ApiError("unexpected Host header; open the address relpos explore printed",
                                        code="bad_host", status=421))
        if len(self.path) > 16384:
            return self._error(ApiError("the request is too long", code="too_large", status=414))
        parts = urlsplit(self.path)
        path = parts.path
        try:
            if path in STATIC_FILES:
                if body is not None:
                    raise ApiError("method not allowed", status=405)
                name, ctype = STATIC_FILES[path]
                return self._send(200, _static_bytes(name), ctype)
            if path.startswith("/api/"):
                route = path[len("/api/"):]
                params = self._params(parts.query)
                ex = self.server.explorer
                data = ex.get(route, params) if body is None else ex.post(route, body, params)
                return self._json(200, data)
            raise ApiError("not found", code="not_found", status=404)
        except ApiError as e:
            return self._error(e)
        except (ConnectionError, TimeoutError):  # the client hung up mid-answer: nothing to say, no traceback
            self.close_connection = True
            return None
        except Exception as e:  # pragma: no cover - a bug; keep serving and say so
            traceback.print_exc(file=sys.stderr)
            return self._json(500, {"error": f"internal error: {e.__class__.__name__}: {e}", "code": "internal"})


def make_server(explorer: Explorer | None = None, host: str = "127.0.0.1", port: int = 0,
                *, quiet: bool = True) -> ExplorerServer:
    """Bind a server (not yet serving). ``port=0`` picks a free port; see ``server.url``.

    Raises:
        TypeError: ``port`` is not an int.
        ValueError: ``port`` outside 0..65535, or ``host`` cannot be resolved.
        BindError: (an OSError and a ValueError) the port is in use, the address is
            not on this machine, or binding is not permitted; the message says what to do.
    """
    from relpos.validation import check_int

    check_int("port", port, 0, 65535)
    return ExplorerServer((host, port), explorer or Explorer(), quiet=quiet)


def serve_in_thread(server: ExplorerServer) -> threading.Thread:
    """Run ``server.serve_forever`` in a daemon thread (tests, screenshots)."""
    t = threading.Thread(target=server.serve_forever, name="relpos-explorer", daemon=True)
    t.start()
    return t


def serve(explorer: Explorer, host: str = "127.0.0.1", port: int = 0, *, open_browser: bool = False,
          quiet: bool = True) -> None:
    """Serve until interrupted (Ctrl+C)."""
    server = make_server(explorer, host, port, quiet=quiet)
    print(f"relpos explorer: serving on {server.url}  (Ctrl+C to stop)", flush=True)
    if not server.loopback:
        print("relpos explorer: warning: listening on a non-loopback address; anyone who can reach it can use it",
              file=sys.stderr, flush=True)
    if open_browser:
        import webbrowser

        webbrowser.open(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("\nrelpos explorer: stopped", flush=True)
    finally:
        server.server_close()
