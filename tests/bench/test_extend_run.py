"""``benchmarks/extend_run.sh``: restored from a snapshot, compare then extend (``relpos`` stubbed out: nothing
trains), and both stores copied back as self-contained files."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

from relpos.compare.store import Store
from tests.bench.scripts import ROOT
from tests.bench.test_store_snapshot import _live

SCRIPT = ROOT / "benchmarks" / "extend_run.sh"


def test_it_restores_runs_both_steps_and_copies_back(tmp_path):
    snap = tmp_path / "snap"
    _live(snap / "cmp", ["a", "b"])
    (snap / "cmp" / "models" / "lm").mkdir(parents=True)
    (snap / "cmp" / "models" / "lm" / "w.bin").write_bytes(b"weights")
    (snap / "ext").mkdir()
    con = sqlite3.connect(snap / "ext" / "extend.sqlite")
    con.execute("CREATE TABLE runs (k TEXT)")
    con.execute("INSERT INTO runs VALUES ('direct/0')")
    con.commit()
    con.close()
    stub = tmp_path / "relpos"
    stub.write_text("#!/bin/sh\necho \"$@\" >> \"" + str(tmp_path / "calls") + "\"\n")
    stub.chmod(0o755)
    env = {**os.environ, "RELPOS": str(stub), "PYTHON": sys.executable, "SNAPSHOT": str(snap)}
    out = tmp_path / "out"
    subprocess.run(["bash", str(SCRIPT), str(out)], cwd=ROOT, env=env, check=True, timeout=120)
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [c.split()[0] for c in calls] == ["compare", "extend"]
    assert f"--out {out / 'cmp'}" in calls[0] and f"--from {out / 'cmp'} --out {out / 'ext'}" in calls[1]
    with Store(out / "cmp" / "results.sqlite") as s:  # restored before anything ran
        assert s.done_jobs("abc") == {"a", "b"}
    assert (out / "cmp" / "models" / "lm" / "w.bin").read_bytes() == b"weights"
    con = sqlite3.connect(snap / "ext" / "extend.sqlite")  # copied back
    assert con.execute("SELECT k FROM runs").fetchall() == [("direct/0",)]
    con.close()
    assert not (snap / "cmp" / "results.sqlite-wal").exists() and not (snap / "ext" / "extend.sqlite-wal").exists()
