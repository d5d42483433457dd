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
    assert err.startswith("relpos explore: error: ") and "Traceback" not in err
