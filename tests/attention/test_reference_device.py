"""The float64 references run on the device of their inputs.

A CUDA run found three references (ALiBi, FIRE, Sandwich) building a tensor without naming
a device, so they mixed CPU and CUDA tensors and failed there. CI has no second device, so
this test makes one stand in: with the default device set to ``meta``, a tensor built
inside a reference without an explicit device lands on ``meta`` and cannot mix with the
CPU inputs, while a reference that follows its inputs' device gives the CPU answer.
"""

from __future__ import annotations

import pytest
import torch

import relpos
from tests.helpers import attention_schemes, build


@pytest.mark.parametrize("name", attention_schemes())
def test_reference_builds_every_tensor_on_its_inputs_device(name):
    enc = build(name, n_heads=2, head_dim=8)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8, generator=g) for _ in range(3))
    expected = relpos.attention(q, k, v, enc, impl="reference", causal=True)
    torch.set_default_device("meta")
    try:
        out = relpos.attention(q, k, v, enc, impl="reference", causal=True)
    finally:
        torch.set_default_device(None)
    assert out.device.type == "cpu"
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
