"""relpos.bench.results.write_results: the one way benchmark scripts write their JSON and table."""

from __future__ import annotations

import json

import pytest

from relpos.bench.results import write_results
from relpos.outdir import OutputDirError


def test_writes_json_and_table_and_prints(tmp_path, capsys):
    path = write_results(tmp_path / "new" / "sub", "bench", {"a": 1.5}, "| x |\n|---|")
    assert path == tmp_path / "new" / "sub" / "bench.json"
    assert json.loads(path.read_text()) == {"a": 1.5}
    assert (path.parent / "bench.md").read_text() == "| x |\n|---|\n"
    assert capsys.readouterr().out == "| x |\n|---|\n"


def test_refuses_a_link_and_writes_nothing_through_it(tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text("user's file")
    out = tmp_path / "out"
    out.mkdir()
    (out / "bench.json").symlink_to(outside)
    with pytest.raises(OutputDirError):
        write_results(out, "bench", {"a": 1}, "table", echo=False)
    assert outside.read_text() == "user's file"
    assert not (out / "bench.md").exists()


def test_refuses_nan_before_writing(tmp_path):
    with pytest.raises(ValueError):
        write_results(tmp_path, "bench", {"a": float("nan")}, "table", echo=False)
    assert list(tmp_path.iterdir()) == []
