"""docs/use.md's "Masks and dropout" stays true: its packed-documents example runs as written and
each document attends as if alone."""

from __future__ import annotations

import re
from pathlib import Path

import torch

import relpos

DOC = Path(__file__).resolve().parents[2] / "docs" / "use.md"


def test_packed_documents_example_runs_and_keeps_documents_apart():
    section = DOC.read_text().split("### Masks and dropout", 1)[1]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    torch.manual_seed(0)
    attn = relpos.nn.RelativeSelfAttention(16, 4, "alibi", n_kv_heads=2, causal=True)
    x = torch.randn(2, 5, 16)
    ns = {"torch": torch, "attn": attn, "x": x}
    with torch.no_grad():
        exec(compile(code, "docs/use.md", "exec"), ns)
        alone = torch.cat([attn(x[:, :3])[0], attn(x[:, 3:])[0]], 1)
    torch.testing.assert_close(ns["y"], alone, atol=1e-5, rtol=1e-5)
