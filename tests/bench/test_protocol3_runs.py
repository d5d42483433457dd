"""``benchmarks/protocol3_runs.sh``: the full preset's tasks in order, restored from and copied back to a
snapshot in the repository, with ``relpos`` stubbed out (nothing trains)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from relpos.compare.presets import FULL_ALGORITHMIC
from relpos.compare.store import Store
from tests.bench.scripts import ROOT
from tests.bench.test_store_snapshot import _live

SCRIPT = ROOT / "benchmarks" / "protocol3_runs.sh"


def _stub(tmp_path):
    """A ``relpos`` that only appends its arguments to ``tmp_path/calls``."""
    stub = tmp_path / "relpos"
    stub.write_text("#!/bin/sh\necho \"$@\" >> \"" + str(tmp_path / "calls") + "\"\n")
    stub.chmod(0o755)
    return stub


def test_it_runs_the_full_presets_tasks():
    tasks = re.search(r"^for t in ([a-z -]+); do", SCRIPT.read_text(), re.M).group(1).split()
    assert tasks == ["lm", *FULL_ALGORITHMIC]


def test_it_restores_the_snapshot_and_copies_it_back(tmp_path):
    _live(tmp_path / "snap", ["a", "b"])
    stub = _stub(tmp_path)
    env = {**os.environ, "RELPOS": str(stub), "PYTHON": sys.executable, "SNAPSHOT": str(tmp_path / "snap"),
           "SKIP_SCALE": "1"}
    out = tmp_path / "out"
    subprocess.run(["bash", str(SCRIPT), str(out)], cwd=ROOT, env=env, check=True, timeout=120)
    with Store(out / "full" / "results.sqlite") as s:
        assert s.done_jobs("abc") == {"a", "b"}  # restored before anything ran
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [c.split("--tasks ")[1].split()[0] for c in calls if "--tasks" in c] == ["lm", *FULL_ALGORITHMIC]
    assert not any("scale" in c for c in calls)
    log = (out / "runs.log").read_text()
    assert log.count("snapshot: 2 finished jobs") == len(FULL_ALGORITHMIC) + 2  # after each task and at the end
    assert not any("--reuse" in c for c in calls)


def test_reuse_is_passed_to_every_full_preset_call(tmp_path):
    stub = _stub(tmp_path)
    env = {**os.environ, "RELPOS": str(stub), "PYTHON": sys.executable, "SKIP_SCALE": "1",
           "REUSE": str(tmp_path / "old full")}
    subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out")], cwd=ROOT, env=env, check=True, timeout=120)
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == len(FULL_ALGORITHMIC) + 2
    assert all(f"--reuse {tmp_path / 'old full'} " in c for c in calls)


def test_the_rerun_restores_the_shipped_store_once_and_reuses_it(tmp_path):
    """``benchmarks/protocol3_rerun.sh``: the shipped protocol-3 store becomes the ``--reuse`` source (language
    modelling and parity copied even though their validation differs), the rerun goes to its own snapshot."""
    stub = _stub(tmp_path)
    env = {**os.environ, "RELPOS": str(stub), "PYTHON": sys.executable, "SNAPSHOT": str(tmp_path / "snap")}
    out = tmp_path / "out"
    rerun = ROOT / "benchmarks" / "protocol3_rerun.sh"
    subprocess.run(["bash", str(rerun), str(out)], cwd=ROOT, env=env, check=True, timeout=300)
    fp = json.loads((out / "old_full" / "config.json").read_text())["fingerprint"]
    with Store(out / "old_full" / "results.sqlite") as s:
        assert s.integrity_check() == "ok" and len(s.done_jobs(fp)) == 216  # the finished protocol-3 preset
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls and not any("scale" in c for c in calls)
    assert all(f"--reuse {out / 'old_full'} --reuse-validated-before lm,parity " in c for c in calls)
    assert all(f"--out {out / 'run' / 'full'}" in c for c in calls)
