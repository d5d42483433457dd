"""Model layers and config checks: one default attention impl, one rule for bad input (TypeError vs ValueError)."""

from __future__ import annotations

import inspect

import pytest
import torch

from relpos.model import DEFAULT_ATTN_IMPL, ModelConfig, MultiHeadAttention, TransformerLM
from tests.helpers import attention_schemes, build


def test_mha_default_impl_agrees_with_model_config():
    assert inspect.signature(MultiHeadAttention).parameters["impl"].default == DEFAULT_ATTN_IMPL
    assert ModelConfig().attn_impl == DEFAULT_ATTN_IMPL == "auto"
    assert MultiHeadAttention(16, 2, causal=False).impl == TransformerLM(ModelConfig.preset("tiny")).blocks[0].attn.impl


@pytest.mark.parametrize("kw, exc, match", [
    ({"d_model": "32"}, TypeError, "d_model must be an int"),
    ({"d_model": 1 << 30}, ValueError, "d_model must be in"),
    ({"n_layers": 2.0}, TypeError, "n_layers must be an int"),
    ({"max_len": 10**12}, ValueError, "max_len must be in"),
    ({"causal": "yes"}, TypeError, "causal must be a bool"),
    ({"dropout": float("nan")}, ValueError, "dropout must be a finite number"),
    ({"dropout": 1.0}, ValueError, "dropout must be"),
    ({"share_encoding": 1}, TypeError, "share_encoding must be a bool"),
    ({"random_positions": 10**12}, ValueError, "random_positions must be in"),
    ({"attn_impl": 3}, TypeError, "attn_impl"),
])
def test_config_bad_input(kw, exc, match):
    with pytest.raises(exc, match=match):
        ModelConfig(**kw)


@pytest.mark.parametrize("args, kw, exc, match", [
    ((16, 0), {}, ValueError, "n_heads must be in"),
    ((16.0, 2), {}, TypeError, "d_model must be an int"),
    ((16, 2), {"causal": "yes"}, TypeError, "causal must be a bool"),
    ((16, 2), {"impl": "magic"}, ValueError, "impl must be one of"),
])
def test_mha_bad_input(args, kw, exc, match):
    with pytest.raises(exc, match=match):
        MultiHeadAttention(*args, **{"causal": False, **kw})


def test_generate_bad_input():
    m = TransformerLM(ModelConfig.preset("tiny", scheme="alibi"))
    x = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        m.generate(x, 2, temperature=0.0)
    with pytest.raises(ValueError, match="temperature must be a finite"):
        m.generate(x, 2, temperature=float("nan"))
    with pytest.raises(TypeError, match="max_new_tokens must be an int"):
        m.generate(x, 2.0)
    with pytest.raises(ValueError, match="max_new_tokens must be in"):
        m.generate(x, 10**12)
    with pytest.raises(TypeError, match="greedy must be a bool"):
        m.generate(x, 2, greedy="yes")


def test_public_names_still_import():
    import relpos.model as M

    for name in ("ModelConfig", "PRESETS", "MultiHeadAttention", "Block", "TransformerLM", "TransformerEncoder",
                 "KVCache", "Memory", "position_limit"):
        assert hasattr(M, name), name
    assert M.TransformerLM.logits is M.TransformerEncoder.logits  # one tied output layer


def test_model_layers_are_relpos_nn_layers_with_unchanged_checkpoint_keys():
    """One attention layer in the package; checkpoints keep their state_dict keys."""
    from relpos.nn import RelativeSelfAttention

    m = TransformerLM(ModelConfig.preset("tiny", scheme="t5"))
    assert all(type(b.attn) is RelativeSelfAttention for b in m.blocks)
    assert issubclass(MultiHeadAttention, RelativeSelfAttention)
    keys = set(m.state_dict())
    assert {"blocks.0.attn.qkv.weight", "blocks.0.attn.qkv.bias", "blocks.0.attn.proj.weight",
            "blocks.0.attn.proj.bias", "pos.0.table"} <= keys
    assert not any(".attn.encoding" in k for k in keys)
    assert m.blocks[0].attn.qkv.weight.shape == (3 * 32, 32)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", attention_schemes())
def test_every_impl_serves_a_layers_strided_heads(name, causal):
    """Inside a layer, q, k and v are (B, N, H, D) buffers seen as (B, H, N, D) (not contiguous): ``chunked``
    (each scheme's engine, in blocks of 5 rows) and ``dense`` give the reference's output and gradients."""
    from relpos.attention import chunked
    from relpos.model.layers import RelativeSelfAttention

    enc = build(name, n_heads=2, head_dim=8, causal=causal, max_len=32)
    if enc.causal_only and not causal:
        pytest.skip("causal-only scheme")
    torch.manual_seed(0)
    layer = RelativeSelfAttention(16, 2, enc, causal=causal, impl="reference").double()
    x = torch.randn(2, 13, 16, dtype=torch.float64)

    def run(impl):
        layer.impl = impl
        xi = x.clone().requires_grad_()
        out = layer(xi)
        out = out[0] if isinstance(out, tuple) else out
        w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
        return [out.detach(), *torch.autograd.grad((out * w).sum(), [xi, *layer.parameters()], allow_unused=True)]

    want = run("reference")
    old = chunked.FORCE_ROWS
    chunked.FORCE_ROWS = 5
    try:
        for impl in ("chunked", "dense"):
            for i, (a, b) in enumerate(zip(run(impl), want)):
                if b is None:
                    assert a is None or not a.any()
                    continue
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m, i=i: f"{impl} tensor {i}: {m}")
    finally:
        chunked.FORCE_ROWS = old
