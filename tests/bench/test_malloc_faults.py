"""``benchmarks/malloc_faults.py`` (issue 52): one job's steps in a process, and the table of both settings."""

from __future__ import annotations

import json

from tests.bench.scripts import load_script


def test_a_child_trains_one_job_and_the_run_writes_both_settings(tmp_path, monkeypatch):
    mod = load_script("malloc_faults")
    got = mod.child("ci-lm", "nope", 2, 3)
    assert got["malloc"] in ("set", "kept: RELPOS_MALLOC_DEFAULTS=1", "kept: the process set its own malloc options")
    assert got["cpu_ms"] > 0 and got["faults"] >= 0 and got["kernel_ms"] >= 0
    calls = []

    def fake(cell, scheme, default, args):  # the processes themselves: see test_malloc.py
        calls.append(default)
        return {"malloc": "kept: RELPOS_MALLOC_DEFAULTS=1" if default else "set", "cpu_ms": 12.0 if default else 10.0,
                "kernel_ms": 1.0 if default else 0.0, "faults": 500.0 if default else 2.0}

    monkeypatch.setattr(mod, "run_child", fake)
    assert mod.main(["--cells", "ci-lm", "--schemes", "nope", "--rounds", "2", "--out", str(tmp_path)]) == 0
    assert calls == [True, False, False, True]  # the order alternates round by round
    doc = json.loads((tmp_path / "malloc_faults.json").read_text())
    (row,) = doc["rows"]
    assert row["default"]["faults"] == 500 and row["set"]["cpu_ms"] == 10
    assert "| ci-lm | nope | 12.0 | 10.0 | 1.20x | 1.00 / 0.00 | 500 / 2 |" in (tmp_path / "malloc_faults.md").read_text()
