"""A small local web server for the explorer (standard library only).

It serves exactly three static files (``index.html``, ``app.js``, ``style.css``,
read from the package, never from a path taken from the request) and the JSON
API of :class:`relpos.explorer.api.Explorer` under ``/api/<route>``.

Safety:

* binds ``127.0.0.1`` unless told otherwise, on a free port by default;
* checks the ``Host`` header on loopback binds (so a web page elsewhere cannot
  reach it through DNS rebinding);
* caps the query string and request body sizes; the API caps sequence lengths,
  text lengths and head counts and answers with a clear message;
* sends a Content-Security-Policy that allows nothing but its own origin.
"""

from __future__ import annotations

import ipaddress
import json
import sys
import threading
import traceback
from functools import lru_cache
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from urllib.parse import parse_qsl, urlsplit

from relpos.explorer.api import ApiError, Explorer

__all__ = ["ExplorerServer", "make_server", "serve", "STATIC_FILES", "static_text"]

#: URL path -> (file in explorer/static, content type). Nothing else is served.
STATIC_FILES: dict[str, tuple[str, str]] = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


@lru_cache(maxsize=None)
def _static_bytes(name: str) -> bytes:
    return resources.files("relpos.explorer").joinpath("static", name).read_bytes()


def static_text(name: str) -> str:
    """One of the packaged static files, as text."""
    return _static_bytes(name).decode("utf-8")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ExplorerServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` carrying the :class:`Explorer` it answers for."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], explorer: Explorer, *, quiet: bool = True) -> None:
        self.explorer = explorer
        self.quiet = quiet
        super().__init__(address, _Handler)
        host, port = self.server_address[:2]
        self.loopback = _is_loopback(address[0])
        self.allowed_hosts = {f"{h}:{port}" for h in ("127.0.0.1", "localhost", "[::1]", address[0])}

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/"


class _Handler(BaseHTTPRequestHandler):
    server: ExplorerServer
    server_version = "relpos-explorer"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    # -------------------------------------------------------------- plumbing

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
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self.close_connection = True
            return self._error(ApiError("a POST needs a Content-Length", status=411))
        if length < 0 or length > lim.max_body_bytes:
            self.close_connection = True
            return self._error(ApiError(f"the upload is {length} bytes; the explorer accepts at most "
                                        f"{lim.max_body_bytes}", code="too_large", status=413,
                                        limit=lim.max_body_bytes, unit="bytes"))
        body = self.rfile.read(length)
        self._dispatch(body)

    def _not_allowed(self) -> None:
        self.close_connection = True
        self._error(ApiError("method not allowed", status=405), extra={"Allow": "GET, HEAD, POST"})

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed  # noqa: N815

    def _dispatch(self, body: bytes | None) -> None:
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
        except Exception as e:  # pragma: no cover - a bug; keep serving and say so
            traceback.print_exc(file=sys.stderr)
            return self._json(500, {"error": f"internal error: {e.__class__.__name__}: {e}", "code": "internal"})


def make_server(explorer: Explorer | None = None, host: str = "127.0.0.1", port: int = 0,
                *, quiet: bool = True) -> ExplorerServer:
    """Bind a server (not yet serving). ``port=0`` picks a free port; see ``server.url``."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an int in 0..65535, got {port!r}")
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
