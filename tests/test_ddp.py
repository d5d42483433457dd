"""Data-parallel training: 2 CPU processes under torchrun (gloo) against one process.

The test launches this file as the torchrun worker (``python -m
torch.distributed.run --nproc_per_node 2 tests/test_ddp.py OUT``). Each worker
trains with :func:`relpos.training.loop.train` (the single-process code path) and writes
its final weights; the test checks that both replicas are identical and that
losses and weights match one process training on the same global batches. The
targets have an uneven number of ignored positions per row, so the two halves of
a batch carry different token counts: only a loss normalised by the global token
count makes the two agree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from relpos.data import IGNORE_INDEX, ByteLMSource, stdlib_corpus
from relpos.model import ModelConfig
from relpos.training.loop import TrainConfig, train

STEPS = 4


class UnevenSource:
    """Byte windows; row r keeps a different number of counted targets."""

    def __init__(self):
        self.src = ByteLMSource(stdlib_corpus("train", max_bytes=50_000), batch_size=5, seq_len=16, seed=2)

    def batch(self, step: int, micro: int = 0):
        x, y = self.src.batch(step, micro)
        y = y.clone()
        for r in range(y.shape[0]):
            y[r, 3 + (4 * r + step + micro) % 12:] = IGNORE_INDEX
        return x, y


def configs() -> tuple[ModelConfig, TrainConfig]:
    mc = ModelConfig(d_model=16, n_layers=2, n_heads=2, max_len=32, scheme="t5")
    tc = TrainConfig(steps=STEPS, batch_size=5, seq_len=16, accum_steps=2, warmup=1, lr=1e-2, progress=False,
                     device="cpu")
    return mc, tc


def _worker(out: str) -> None:
    from safetensors.torch import save_file

    torch.set_num_threads(1)
    mc, tc = configs()
    result = train(mc, tc, UnevenSource())
    rank = int(os.environ["RANK"])
    save_file({k: v.contiguous() for k, v in result.model.state_dict().items()}, f"{out}/rank{rank}.safetensors")
    Path(f"{out}/losses{rank}.json").write_text(json.dumps(result.losses))


@pytest.mark.slow
def test_two_processes_match_one(tmp_path):
    from safetensors.torch import load_file

    env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "0",
           "--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:0", str(Path(__file__).resolve()), str(tmp_path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    w0 = load_file(str(tmp_path / "rank0.safetensors"))
    w1 = load_file(str(tmp_path / "rank1.safetensors"))
    for k in w0:
        assert torch.equal(w0[k], w1[k]), f"replicas differ in {k}"
    l0 = json.loads((tmp_path / "losses0.json").read_text())
    l1 = json.loads((tmp_path / "losses1.json").read_text())
    assert l0 == l1 and len(l0) == STEPS

    mc, tc = configs()
    single = train(mc, tc, UnevenSource())
    torch.testing.assert_close(torch.tensor(l0), torch.tensor(single.losses), atol=1e-5, rtol=1e-5)
    for k, v in single.model.state_dict().items():
        torch.testing.assert_close(w0[k], v, atol=2e-5, rtol=1e-4, msg=k)
    # training moved the weights (the comparison is not between two initialisations)
    torch.manual_seed(tc.seed)
    from relpos.model import TransformerLM

    init = TransformerLM(mc).state_dict()
    assert not torch.allclose(init["tok_emb.weight"], w0["tok_emb.weight"])


if __name__ == "__main__":
    _worker(sys.argv[1])
