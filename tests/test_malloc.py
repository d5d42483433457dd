"""relpos.training.malloc: the thresholds are set once per process, they stop a training step's page faults, and
the user's own settings win."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")

_STATE = "import json; from relpos.training.malloc import keep_freed_memory as k; print(json.dumps([k(), k()]))"
#: Shaw at the full preset's copy shapes (64 x 33, d_model 64): minor page faults per training step after warm-up
_STEPS = """
import json, resource, torch
from relpos.training.malloc import keep_freed_memory
from relpos.model import ModelConfig, TransformerLM
state = keep_freed_memory()
torch.set_num_threads(1); torch.manual_seed(0)
m = TransformerLM(ModelConfig(vocab_size=11, d_model=64, n_layers=2, n_heads=4, scheme="shaw"))
opt = torch.optim.AdamW(m.parameters(), 1e-3)
x = torch.randint(0, 11, (64, 33))
faults = []
for i in range(14):
    r = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    loss = torch.nn.functional.cross_entropy(m(x).reshape(-1, 11), x.reshape(-1))
    opt.zero_grad(); loss.backward(); opt.step()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r)
print(json.dumps([state, sum(faults[6:]) / 8]))
"""


def _run(code: str, **env) -> list:
    base = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "RELPOS_MALLOC_DEFAULTS")
            and not (k.startswith("MALLOC_") and k.endswith("_"))}
    out = subprocess.run([sys.executable, "-c", code], env={**base, "OMP_NUM_THREADS": "1", **env},
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_set_once_and_the_users_settings_win():
    assert _run(_STATE) == ["set", "set"]
    mine = "kept: the process set its own malloc options"
    assert _run(_STATE, GLIBC_TUNABLES="glibc.malloc.mmap_threshold=131072")[0] == mine
    assert _run(_STATE, MALLOC_TRIM_THRESHOLD_="1000000")[0] == mine
    assert _run(_STATE, RELPOS_MALLOC_DEFAULTS="1")[0] == "kept: RELPOS_MALLOC_DEFAULTS=1"


def test_a_training_step_stops_faulting():
    default_state, default_faults = _run(_STEPS, RELPOS_MALLOC_DEFAULTS="1")
    state, faults = _run(_STEPS)
    assert (default_state, state) == ("kept: RELPOS_MALLOC_DEFAULTS=1", "set")
    if default_faults < 100:
        pytest.skip(f"this C library kept the step's buffers by itself ({default_faults:.0f} faults a step)")
    assert faults < default_faults / 3, (faults, default_faults)  # here: about 500 a step, and 60 with it set
