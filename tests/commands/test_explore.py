"""``relpos explore``: export one HTML page; refuse bad ports and foreign export targets."""

from __future__ import annotations

from relpos.cli import main


def test_export_writes_a_page_and_may_replace_its_own(tmp_path, capsys):
    page = tmp_path / "explorer.html"
    assert main(["explore", "--export", str(page)]) == 0
    assert "wrote" in capsys.readouterr().out
    first = page.read_text()
    assert first.lstrip().lower().startswith("<!doctype html")
    assert main(["explore", "--export", str(page)]) == 0  # its own earlier page: replaced


def test_export_never_overwrites_a_foreign_file(tmp_path, capsys):
    page = tmp_path / "index.html"
    page.write_text("<html>my homepage</html>")
    assert main(["explore", "--export", str(page)]) == 2
    assert "not a page written by relpos explore" in capsys.readouterr().err
    assert page.read_text() == "<html>my homepage</html>"


def test_bad_port(capsys):
    assert main(["explore", "--port", "70000"]) == 2
    assert "--port must be in [0, 65535]" in capsys.readouterr().err


def test_unresolvable_host_is_one_line(capsys):
    assert main(["explore", "--host", "no-such-host.invalid", "--port", "0"]) != 0
    err = capsys.readouterr().err
    assert err.startswith("relpos explore: error: cannot listen on no-such-host.invalid port 0")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_port_in_use_is_one_line(capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        assert main(["explore", "--port", str(port)]) == 2  # a usage error, as the explorer server reports it
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1 port {port}" in err and "Traceback" not in err
