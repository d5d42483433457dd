"""docs/use.md stays true: its nanoGPT-sized model (relpos.nn) imports, trains and decodes."""

from __future__ import annotations

import inspect
import json.decoder
import math
import re
import types
from pathlib import Path

import pytest
import torch

DOC = Path(__file__).resolve().parents[2] / "docs" / "use.md"


def _nanogpt() -> types.ModuleType:
    blocks = [b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S) if b.startswith("# nanogpt.py")]
    assert len(blocks) == 1
    mod = types.ModuleType("nanogpt")
    exec(compile(blocks[0], str(DOC), "exec"), mod.__dict__)
    return mod


def _data() -> torch.Tensor:
    return torch.tensor(list(inspect.getsource(json.decoder).encode()))


@pytest.mark.parametrize("scheme, options", [("alibi", {}), ("t5", {"num_buckets": 16})])
def test_doc_model_trains_and_decodes(scheme, options):
    ng = _nanogpt()
    torch.manual_seed(0)
    model = ng.GPT(d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, scheme=scheme, **options)
    losses = ng.train(model, _data(), steps=30, batch=8, length=64)
    assert abs(losses[0] - math.log(256)) < 0.5, losses[0]  # the tied N(0, 1) embedding started near 80 nats
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5
    model.eval()
    prompt = _data()[None, :20]
    out = model.generate(prompt, 6)
    with torch.no_grad():  # greedy decoding with the caches == argmax of full forward passes
        seq = prompt
        for _ in range(6):
            seq = torch.cat([seq, model(seq)[0][:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, seq)
    if scheme == "t5":
        assert model.blocks[0].attn.encoding is model.blocks[1].attn.encoding
