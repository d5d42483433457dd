"""``benchmarks/gpu_check.sh``: its CPU dry run end to end (so the GPU script does not rot), and its refusal
to run the real check without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def _run(*args, timeout=120):
    env = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS="1")
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_dry_run_checks_every_scheme_and_writes_the_report(tmp_path):
    from relpos.bench import attention_schemes

    p = _run("--dry-run", "--out", str(tmp_path))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    doc = json.loads((tmp_path / "gpu_check.json").read_text())
    assert doc["dry_run"] and doc["kind"] == "relpos-gpu-check"
    flex = {r["scheme"]: r for r in doc["flex"]}
    assert set(flex) == set(attention_schemes())
    for name, r in flex.items():
        if r["status"] == "unsupported":  # a value term cannot be a score_mod
            assert "value" in r["note"], r
            continue
        assert r["status"] == "ok" and r["out_err"] < 1e-3 and r["grad_err"] is None, r
    assert [r["N"] for r in doc["bench"]] == [32, 48]
    for run in doc["bench"]:
        assert run["status"] == "ok", run
        assert run["ratios"]["t5/auto/fwd+bwd"] > 0
        assert (tmp_path / run["json"]).exists()
    assert doc["ddp"]["status"] == "skipped"
    md = (tmp_path / "gpu_check.md").read_text()
    assert "## 1. flex against the reference" in md and "## 3. NCCL DDP step" in md


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_refuses_without_a_gpu(tmp_path):
    p = _run("--out", str(tmp_path), timeout=60)
    assert p.returncode == 2 and "no CUDA device" in p.stderr
    assert not (tmp_path / "gpu_check.json").exists()
