"""Issue 47, medium and minor items of the output-folder and store area: a store left behind by a refused
``--hf-model`` run, a ``--scalings`` entry given twice, and the explorer's reading of a repeated ``Host`` or
``Content-Length`` header."""

from __future__ import annotations

import json
import os
import socket

import pytest

from relpos.explorer import Explorer
from relpos.explorer.server import make_server, serve_in_thread


# ------------------------------------------------------------------ HTTP: one Host, one Content-Length


@pytest.fixture(scope="module")
def server():
    srv = make_server(Explorer(), host="127.0.0.1")
    serve_in_thread(srv)
    yield srv
    srv.shutdown()
    srv.server_close()


def _raw(srv, data: bytes) -> bytes:
    s = socket.create_connection(srv.server_address[:2], timeout=10)
    try:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out
    finally:
        s.close()


def _status(resp: bytes) -> int:
    return int(resp.split(b" ", 2)[1])


def test_a_repeated_host_header_is_a_400(server):
    port = server.server_address[1]
    good = b"GET /api/info HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n" % port
    assert _status(_raw(server, good)) == 200
    for second in (b"evil.example", b"127.0.0.1:%d" % port):  # the first Host won before, whatever followed
        req = (b"GET /api/info HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nHost: %s\r\nConnection: close\r\n\r\n"
               % (port, second))
        resp = _raw(server, req)
        assert _status(resp) == 400 and b"Host header is given more than once" in resp


def test_a_repeated_content_length_is_a_400(server):
    port = server.server_address[1]
    body = b'{"scheme": "rope"}'
    req = (b"POST /api/info HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: %d\r\nContent-Length: 0\r\n"
           b"Connection: close\r\n\r\n%s" % (port, len(body), body))
    resp = _raw(server, req)
    assert _status(resp) == 400 and b"Content-Length header is given more than once" in resp


# ------------------------------------------------------------------ --hf-model: --scalings twice, no empty store


def _argv(model, corpus, out, scalings="native"):
    return ["compare", "--hf-model", str(model), "--corpus", str(corpus), "--eval-tokens", "512", "--device", "cpu",
            "--hf-factors", "1", "--passkey", "0", "--scalings", scalings, "--no-progress", "--out", str(out)]


def test_a_scaling_given_twice_is_refused_by_name(hf, tmp_path, capsys):
    from relpos.cli import main

    out = tmp_path / "o"
    with pytest.raises(SystemExit) as e:
        main(_argv(*hf, out, scalings="native,yarn,native"))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--scalings" in err and "native given more than once" in err
    assert not out.exists()


def test_a_refused_hf_run_leaves_no_results_database(hf, tmp_path, monkeypatch, capsys):
    """A model whose norm epsilon is NaN is refused at its first evaluation; the store was created before it."""
    from relpos.cli import main
    from tests.faults.conftest import nan_eps_model

    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    model = nan_eps_model(hf[0], tmp_path / "nan-eps")
    out = tmp_path / "o"
    rc = main(_argv(model, hf[1], out))
    err = capsys.readouterr().err
    assert rc in (1, 2) and "Traceback" not in err
    assert not (out / "results.sqlite").exists(), "a refused run left an empty results.sqlite"
    assert not out.exists() or os.listdir(out) == []
