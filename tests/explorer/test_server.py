"""Server limits (issue 10): cost caps, byte-bounded caches, no global lock, read timeouts,
bounded connections, hostile results files, IPv6 and clear bind errors.

Every test here failed on the explorer before these limits existed.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from relpos.explorer import ApiError, Explorer, Limits
from relpos.explorer import cache as cache_mod
from relpos.explorer.server import BindError, make_server, serve_in_thread, static_text
from tests.explorer.conftest import make_results




@pytest.fixture
def serve():
    """``srv = serve(explorer)``: a running loopback server, shut down after the test."""
    started = []

    def go(ex=None, host="127.0.0.1"):
        srv = make_server(ex or Explorer(), host=host)
        serve_in_thread(srv)
        started.append(srv)
        return srv

    yield go
    for srv in started:
        srv.shutdown()
        srv.server_close()


def request(srv, method, path, body=None, timeout=30):
    host, port = srv.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        hdrs = {"Host": f"127.0.0.1:{port}"} if ":" not in host else {"Host": f"[{host}]:{port}"}
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


# ------------------------------------------------------------------ cost caps


def test_costly_options_are_refused_before_allocating_and_name_the_fields():
    ex = Explorer()
    with pytest.raises(ApiError) as e:
        ex.get("bias", {"scheme": "dpb", "opt.hidden": "4096", "opt.depth": "16"})
    err = e.value
    assert err.status == 400 and err.code == "too_costly" and err.unit == "parameters"
    assert {"opt.hidden", "opt.depth"} <= set(err.fields) and "opt.hidden" in str(err)
    assert err.value > ex.limits.max_state_elems
    with pytest.raises(ApiError) as e:  # each field is within its own cap; the product is not
        ex.get("bias", {"scheme": "dpb", "opt.depth": "4096"})
    assert e.value.code == "too_costly" and "opt.depth" in e.value.fields
    assert len(ex.encodings.lru) == 0  # nothing was built


def test_arithmetic_cap_names_the_length():
    ex = Explorer(limits=Limits(max_flops=1e6))
    with pytest.raises(ApiError) as e:
        ex.get("bias", {"scheme": "fire", "n": "256"})
    assert e.value.code == "too_costly" and e.value.unit == "operations" and "n" in e.value.fields
    ex.get("bias", {"scheme": "fire", "n": "4"})  # the same scheme at a small length is fine


def test_cost_refusal_is_a_400_over_http(serve):
    srv = serve()
    status, body = request(srv, "GET", "/api/bias?scheme=dpb&opt.hidden=4096&opt.depth=16")
    err = json.loads(body)
    assert status == 400 and err["code"] == "too_costly" and "opt.hidden" in err["fields"]


def test_encoding_cache_is_bounded_in_bytes():
    lim = Limits(cache_bytes=2 * 1024 * 1024)
    ex = Explorer(limits=lim)
    for seed in range(6):  # each DPB with a 512-wide hidden layer holds about 1 MiB
        ex.get("bias", {"scheme": "dpb", "opt.hidden": "512", "n_heads": "16", "seed": str(seed)})
        assert ex.encodings.lru.used <= lim.cache_bytes
    assert 0 < len(ex.encodings.lru) < 6


def test_byte_lru_evicts_oldest_and_skips_oversize():
    lru = cache_mod.ByteLRU(100)
    lru.put("a", 1, 60)
    lru.put("b", 2, 30)
    assert lru.get("a") == 1  # a is now the newest
    lru.put("c", 3, 30)  # evicts b (oldest)
    assert lru.get("b") is None and lru.get("a") == 1 and lru.used == 90
    lru.put("huge", 4, 101)
    assert lru.get("huge") is None and lru.used == 90


def test_attention_cache_lives_on_the_instance(checkpoint_dir):
    a, b = Explorer(checkpoints=[checkpoint_dir]), Explorer(checkpoints=[checkpoint_dir])
    a.get("attention", {"text": "ab"})
    assert len(a.attention_cache) == 1 and len(b.attention_cache) == 0
    import relpos.explorer.api as api_mod

    assert not hasattr(api_mod, "_ATTN_CACHE")


# -------------------------------------------------------------- no global lock


def test_a_slow_build_does_not_stall_a_cached_request(monkeypatch):
    ex = Explorer()
    ex.get("bias", {"scheme": "alibi", "n": "8"})  # cached
    real = cache_mod._build

    def slow(name, options, *a):
        if name == "t5":
            time.sleep(3.0)
        return real(name, options, *a)

    monkeypatch.setattr(cache_mod, "_build", slow)
    t = threading.Thread(target=ex.get, args=("bias", {"scheme": "t5", "n": "8", "seed": "7"}))
    t.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    ex.get("bias", {"scheme": "alibi", "n": "8"})
    ex.get("offsets", {"text": "a b"})
    fast = time.monotonic() - t0
    t.join()
    assert fast < 1.0, f"a cached request waited {fast:.2f} s behind a slow build"


def test_concurrent_requests_for_one_scheme_build_it_once(monkeypatch):
    ex = Explorer()
    calls = []
    real = cache_mod.EncodingCache._construct

    def counted(*a):
        calls.append(a)
        time.sleep(0.5)
        return real(*a)

    monkeypatch.setattr(cache_mod.EncodingCache, "_construct", staticmethod(counted))
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda _: ex.get("bias", {"scheme": "t5", "n": "8", "seed": "3"}), range(4)))
    assert len(calls) == 1 and all(o["matrix"] == outs[0]["matrix"] for o in outs)


# ------------------------------------------------------------ connections


def test_half_sent_request_is_dropped_after_the_read_timeout(serve):
    srv = serve(Explorer(limits=Limits(read_timeout_s=1.0)))
    host, port = srv.server_address[:2]
    s = socket.create_connection((host, port), timeout=10)
    try:
        s.sendall(b"GET /api/info HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % port)  # no blank line: never finished
        t0 = time.monotonic()
        assert s.recv(1024) == b""  # the server closed it
        assert time.monotonic() - t0 < 5
    finally:
        s.close()


def test_trickled_request_is_dropped_although_each_byte_is_in_time(serve):
    srv = serve(Explorer(limits=Limits(read_timeout_s=1.5)))
    host, port = srv.server_address[:2]
    s = socket.create_connection((host, port), timeout=10)
    closed = False
    try:
        for ch in b"GET /api/info HTTP/1.1\r\nX-Slow: " + b"a" * 40:
            try:
                s.sendall(bytes([ch]))
            except OSError:
                closed = True
                break
            time.sleep(0.1)
            if time.monotonic() > 0 and s.fileno() < 0:
                break
        if not closed:
            s.settimeout(5)
            closed = s.recv(1024) == b""
    except OSError:
        closed = True
    finally:
        s.close()
    assert closed


def test_connections_are_bounded_and_busy_is_a_503_not_a_hang(serve):
    """Half-sent requests hold no computing slot (issue 29); requests that are computing do, and a
    request that finds them all taken waits connection_wait_s, then gets a 503."""
    lim = Limits(max_connections=3, connection_wait_s=0.3, read_timeout_s=2.0)
    ex = Explorer(limits=lim)
    srv = serve(ex)
    host, port = srv.server_address[:2]
    idle = [socket.create_connection((host, port), timeout=10) for _ in range(3)]
    try:
        for s in idle:
            s.sendall(b"GET /")  # half a request line: read by the reader, holds no slot
        time.sleep(0.3)
        status, _ = request(srv, "GET", "/api/offsets?text=a")
        assert status == 200
        real_get, gate = ex.get, threading.Event()

        def slow_get(route, params):
            if params.get("text") == "slow":
                gate.wait(10)
            return real_get(route, params)

        ex.get = slow_get
        with ThreadPoolExecutor(3) as pool:
            busy = [pool.submit(request, srv, "GET", "/api/offsets?text=slow") for _ in range(3)]
            time.sleep(0.5)
            t0 = time.monotonic()
            status, body = request(srv, "GET", "/api/offsets?text=a")
            assert status == 503 and json.loads(body)["code"] == "busy" and time.monotonic() - t0 < 2
            gate.set()
            assert [f.result()[0] for f in busy] == [200, 200, 200]
        status, _ = request(srv, "GET", "/api/offsets?text=a")
        assert status == 200
    finally:
        for s in idle:
            s.close()


def test_two_hundred_concurrent_requests_all_answered(serve):
    srv = serve()
    assert srv.request_queue_size >= 1024

    def one(k):
        return request(srv, "GET", f"/api/offsets?text=a%20b%20{k}", timeout=60)[0]

    with ThreadPoolExecutor(200) as pool:
        statuses = list(pool.map(one, range(200)))
    assert statuses.count(200) == 200, {s: statuses.count(s) for s in set(statuses)}


# -------------------------------------------------------- hostile results


HOSTILE = [
    (b"[" * 100000 + b"]" * 100000, "results", "nested"),
    (b'{"version": 1, "runs": [{"scheme": "x", "seed": [1], "metrics": []}]}', "runs[0].seed", "integer"),
    (b'{"version": 1, "runs": [{"scheme": "x", "metrics": [{"eval_len": 1, "bpb": 1' + b"0" * 400 + b"}]}]}",
     "results", "digits"),
    (b'{"version": 1, "runs": [{"scheme": "x", "metrics": [{"eval_len": 1, "bpb": ' + b"7" * 5000 + b"}]}]}",
     "results", "digits"),
    (b'{"version": 1, "runs": [{"scheme": "x", "metrics": [{"eval_len": 1, "bpb": 1e400}]}]}', "results",
     "range"),
    (b'{"version": 1, "runs": [{"scheme": "x", "metrics": [{"eval_len": 1, "bpb": NaN}]}]}', "results", "null"),
    (b'{"version": 1, "runs": [{"scheme": "x", "metrics": [{"eval_len": "64"}]}]}', "runs[0].metrics[0].eval_len",
     "integer"),
    (b'{"version": 1, "runs": [{"scheme": "x", "metrics": [{"eval_len": 8, "bpb": "2.0"}]}]}',
     "runs[0].metrics[0].bpb", "number"),
    (b'{"version": 1, "runs": [{"scheme": ["x"], "metrics": []}]}', "runs[0].scheme", "string"),
    (b'{"version": 1, "runs": [{"scheme": "x", "train_len": true, "metrics": []}]}', "runs[0].train_len", "integer"),
    (b'{"version": [1], "runs": []}', "version", "version"),
    (b'{"runs": [1]}', "runs[0]", "object"),
    (b'[]', "results", "object"),
    (b"\xff\xfe", "results", "UTF-8"),
]


@pytest.mark.parametrize("body,field,words", HOSTILE, ids=[f"{i}-{h[1]}" for i, h in enumerate(HOSTILE)])
def test_hostile_results_upload_is_a_400_naming_the_field(serve, body, field, words):
    srv = serve()
    status, out = request(srv, "POST", "/api/results", body=body)
    err = json.loads(out)
    assert status == 400, (status, err)
    assert err["field"] == field and words.lower() in err["error"].lower(), err


@pytest.mark.parametrize("body,field,words", HOSTILE[:6], ids=[h[1] for h in HOSTILE[:6]])
def test_hostile_results_folder_is_a_clear_cli_error(tmp_path, capsys, body, field, words):
    from relpos.cli import main

    (tmp_path / "results.json").write_bytes(body)
    assert main(["explore", "--export", str(tmp_path / "x.html"), "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and words.lower() in err.lower() and str(tmp_path) in err


def test_valid_results_with_extra_fields_still_load():
    data = make_results()
    data["future_field"] = {"x": 1}
    data["runs"][0]["new"] = [1, 2]
    out = Explorer().post("results", json.dumps(data).encode(), {})
    assert out["series"]


# ------------------------------------------------------------ host and port


def _ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_ipv6_loopback_serves(serve):
    srv = serve(host="::1")
    assert srv.url.startswith("http://[::1]:") and srv.loopback
    status, body = request(srv, "GET", "/api/offsets?text=a%20b")
    assert status == 200 and json.loads(body)["offsets"] == [[0, 1], [-1, 0]]


def test_unresolvable_host_is_a_clear_value_error():
    with pytest.raises(ValueError, match="cannot resolve host 'no-such-host.invalid'"):
        make_server(host="no-such-host.invalid")


def test_port_in_use_is_a_clear_error(serve):
    srv = serve()
    port = srv.server_address[1]
    with pytest.raises(BindError) as e:
        make_server(host="127.0.0.1", port=port)
    assert isinstance(e.value, ValueError) and isinstance(e.value, OSError)
    assert f"port {port}" in str(e.value) and "already in use" in str(e.value)


def test_port_type_and_range():
    with pytest.raises(TypeError, match="port"):
        make_server(port="80")
    with pytest.raises(ValueError, match="port"):
        make_server(port=70000)


def test_cli_host_and_port_errors_are_one_line(serve, capsys):
    from relpos.cli import main

    assert main(["explore", "--host", "no-such-host.invalid"]) == 2
    err = capsys.readouterr().err
    assert "cannot resolve host" in err and "Traceback" not in err
    srv = serve()
    assert main(["explore", "--port", str(srv.server_address[1])]) == 2
    err = capsys.readouterr().err
    assert "already in use" in err and "Traceback" not in err


# ------------------------------------------------------- HTTP basics (moved from test_api.py)


@pytest.fixture(scope="module")
def ex(results_dir, checkpoint_dir):
    return Explorer(results=[results_dir], checkpoints=[checkpoint_dir])


@pytest.fixture(scope="module")
def server(ex):
    srv = make_server(ex)
    serve_in_thread(srv)
    yield srv
    srv.shutdown()
    srv.server_close()


def _raw(server, method: str, path: str, *, body: bytes | None = None, headers: dict | None = None):
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        hdrs = {"Host": f"127.0.0.1:{port}"}
        hdrs.update(headers or {})
        if body is not None:
            hdrs.setdefault("Content-Length", str(len(body)))
        for k, v in hdrs.items():
            conn.putheader(k, v)
        conn.endheaders()
        if body is not None:
            conn.send(body)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()



def test_server_binds_loopback_on_a_free_port(server):
    host, port = server.server_address[:2]
    assert host == "127.0.0.1" and port > 0
    assert server.url == f"http://127.0.0.1:{port}/"


def test_static_files_and_headers(server):
    for path, ctype in (("/", "text/html"), ("/app.js", "text/javascript"), ("/style.css", "text/css")):
        status, headers, body = _raw(server, "GET", path)
        assert status == 200 and headers["Content-Type"].startswith(ctype)
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        assert headers["X-Content-Type-Options"] == "nosniff"
    status, _, body = _raw(server, "GET", "/")
    assert body.decode() == static_text("index.html")


@pytest.mark.parametrize("path", [
    "/../pyproject.toml", "/%2e%2e/%2e%2e/pyproject.toml", "/static/app.js", "/app.js/../../api.py",
    "//etc/passwd", "/api.py", "/server.py", "/..%2fapi.py", "/index.html%00.js", "/static/../api.py",
    "/api/../server.py", "/api/info/../../x",
])
def test_no_path_traversal(server, path):
    status, headers, body = _raw(server, "GET", path)
    assert status == 404, (path, status)
    assert b"import" not in body and b"root:" not in body


def test_api_over_http(server):
    status, _, body = _raw(server, "GET", "/api/offsets?text=a%20b%20c&clip=1")
    assert status == 200 and json.loads(body)["clipped"] == [[0, 1, 1], [-1, 0, 1], [-1, -1, 0]]
    status, _, body = _raw(server, "GET", "/api/bias?n=100000")
    err = json.loads(body)
    assert status == 400 and err["code"] == "too_large" and err["limit"] == 256
    status, _, body = _raw(server, "GET", "/api/offsets?text=a&text=b")
    assert status == 400 and "twice" in json.loads(body)["error"]
    status, _, _ = _raw(server, "GET", "/api/" + "x" * 30)
    assert status == 404
    status, _, body = _raw(server, "GET", "/api/offsets?text=" + "a" * 9000)
    assert status == 414 and json.loads(body)["code"] == "too_large"


def test_host_header_checked(server):
    status, _, body = _raw(server, "GET", "/api/info", headers={"Host": "evil.example:80"})
    assert status == 421 and json.loads(body)["code"] == "bad_host"
    port = server.server_address[1]
    status, _, _ = _raw(server, "GET", "/api/info", headers={"Host": f"localhost:{port}"})
    assert status == 200


def test_methods_and_upload_limits(server):
    status, headers, _ = _raw(server, "PUT", "/api/info", body=b"")
    assert status == 405
    status, _, body = _raw(server, "POST", "/api/results?task=lm", body=json.dumps(make_results()).encode())
    assert status == 200 and json.loads(body)["source"] == "upload"
    big = server.explorer.limits.max_body_bytes + 1
    status, _, body = _raw(server, "POST", "/api/results", body=b"", headers={"Content-Length": str(big)})
    assert status == 413 and json.loads(body)["code"] == "too_large"
    status, _, _ = _raw(server, "POST", "/api/info", body=b"{}")
    assert status == 405
    status, _, _ = _raw(server, "POST", "/", body=b"{}")
    assert status == 405


def test_ctrl_c_while_a_handler_thread_starts_stops_the_server_and_frees_the_slot_once(monkeypatch):
    """Ctrl+C arriving inside Thread.start (after the handler ran) must reach serve_forever; it used to
    release the connection slot a second time, and the ValueError that raised replaced the
    KeyboardInterrupt, so `relpos explore` kept serving."""
    srv = make_server(Explorer())
    real_start = threading.Thread.start

    def start_then_interrupt(self):
        # read the target first: Thread.run deletes it when the thread ends
        handler = getattr(getattr(self, "_target", None), "__name__", "") == "_serve_one"
        real_start(self)
        if handler:
            self.join(10)  # the handler has run and released its slot
            raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", start_then_interrupt)
    try:
        c = socket.create_connection(srv.server_address[:2], timeout=5)
        host, port = srv.server_address[:2]
        c.sendall(f"GET /api/offsets?text=a HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        with pytest.raises(KeyboardInterrupt):
            srv._handle_request_noblock()
        assert b"200" in c.recv(100)
        c.close()
        assert srv._slots._value == srv.explorer.limits.max_connections  # released exactly once
    finally:
        monkeypatch.undo()
        srv.server_close()
