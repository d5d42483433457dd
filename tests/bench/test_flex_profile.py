"""``benchmarks/flex_profile.py``: its CPU dry run end to end (so the GPU script does not rot), and its refusal
to run the real profile without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "flex_profile.py"


def _run(*args, timeout=240):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_dry_run_times_every_part_and_writes_the_json(tmp_path):
    p = _run("--dry-run", "--profile", "--out", str(tmp_path))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    doc = json.loads((tmp_path / "flex_profile.json").read_text())
    assert doc["kind"] == "relpos-flex-profile" and doc["N"] == 64
    names = [r["case"] for r in doc["rows"]]
    assert names == ["sdpa", "flex-mask", "flex-gather", "flex-inline", "relpos-t5", "relpos-alibi",
                     "relpos-kerple-log"]
    for r in doc["rows"]:
        assert r["fwd"] is not None and r["fwd"] > 0, r
        assert "fwd+bwd" not in r  # no FlexAttention backward on CPU
    assert set(doc["kernels"]) == {"relpos-t5", "relpos-alibi", "relpos-kerple-log"}
    assert all(ks and ks[0]["self_us"] > 0 for ks in doc["kernels"].values())
    assert "| relpos-alibi |" in p.stdout and "x1.00" in p.stdout  # sdpa's own ratio


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_refuses_without_a_gpu(tmp_path):
    p = _run("--out", str(tmp_path), timeout=60)
    assert p.returncode == 2 and "no CUDA device" in p.stderr
    assert not (tmp_path / "flex_profile.json").exists()
