"""Paired initialisation and the token-embedding scale (issue 12, ModelConfig side).

Before: the scheme module was built before the token embedding, so a scheme with
learned parameters shifted the random stream of every other weight, and token
embeddings had no documented scale.
"""

from __future__ import annotations

import math

import pytest
import torch

from relpos.training import checkpoint
from relpos.model import ModelConfig, TransformerEncoder, TransformerLM


def shared_weights(model) -> dict[str, torch.Tensor]:
    """Every parameter that is not part of the position scheme."""
    return {k: v.detach().clone() for k, v in model.state_dict().items() if not k.startswith("pos.")}


def build(scheme, seed=0, **kw):
    torch.manual_seed(seed)
    return TransformerLM(ModelConfig.preset("tiny", scheme=scheme, n_layers=2, **kw))


def test_schemes_of_one_seed_share_their_non_position_weights():
    ref = shared_weights(build("nope"))
    assert {"tok_emb.weight", "blocks.0.attn.qkv.weight", "blocks.1.fc1.weight", "blocks.1.fc2.weight"} <= set(ref)
    for scheme in ("t5", "shaw", "learned", "dpb", "transformer-xl", "fire", "alibi", "rope"):
        got = shared_weights(build(scheme))
        assert set(got) == set(ref), scheme
        for k in ref:
            assert torch.equal(got[k], ref[k]), (scheme, k)


def test_other_seeds_differ_and_repeat():
    a, b, a2 = shared_weights(build("t5", 0)), shared_weights(build("t5", 1)), shared_weights(build("t5", 0))
    assert not torch.equal(a["tok_emb.weight"], b["tok_emb.weight"])
    assert all(torch.equal(a[k], a2[k]) for k in a)


def test_encoder_pairs_too():
    torch.manual_seed(3)
    x = shared_weights(TransformerEncoder(ModelConfig.preset("tiny", scheme="nope")))
    torch.manual_seed(3)
    y = shared_weights(TransformerEncoder(ModelConfig.preset("tiny", scheme="shaw")))
    assert all(torch.equal(x[k], y[k]) for k in x)


def test_init_statistics_are_unchanged():
    m = build("nope", d_model=64, n_heads=2)
    assert abs(float(m.tok_emb.weight.detach().std()) - 0.02) < 0.002
    fc2 = m.blocks[0].fc2.weight.detach()
    assert abs(float(fc2.std()) - 0.02 / math.sqrt(2 * 2)) < 0.002
    assert float(m.blocks[0].fc1.bias.detach().abs().max()) == 0.0


@pytest.mark.parametrize("scheme", ["sinusoidal", "nope"])
def test_embed_scale_sqrt_d(scheme):
    plain = build(scheme)
    scaled = build(scheme, embed_scale="sqrt_d")
    x = torch.randint(0, 256, (2, 5))
    torch.testing.assert_close(scaled.tok_emb.weight, plain.tok_emb.weight)
    h_plain, h_scaled = plain._embed(x, None), scaled._embed(x, None)
    tok = plain.tok_emb(x)
    C = plain.cfg.d_model
    torch.testing.assert_close(h_scaled - math.sqrt(C) * tok, h_plain - tok)  # same position term, scaled tokens
    assert not torch.allclose(plain(x), scaled(x))


def test_embed_scale_is_checked_and_saved(tmp_path):
    with pytest.raises(ValueError, match="embed_scale must be one of 'none', 'sqrt_d'"):
        ModelConfig(embed_scale="sqrt")
    with pytest.raises(TypeError, match="embed_scale"):
        ModelConfig(embed_scale=2.0)
    assert ModelConfig().embed_scale == "none"
    m = build("sinusoidal", embed_scale="sqrt_d")
    checkpoint.save(tmp_path / "ck", m)
    m2, cfg = checkpoint.load(tmp_path / "ck")
    assert cfg.embed_scale == "sqrt_d"
    x = torch.randint(0, 256, (1, 6))
    torch.testing.assert_close(m2(x), m.eval()(x))


def _assert_cached_decoding_is_exact(m, split):
    """Two cached steps (``split`` tokens, then the rest) equal one full forward pass; returns the input."""
    x = torch.randint(0, 256, (2, 9))
    with torch.no_grad():
        cache = m.init_cache(2)
        a, cache = m.step(x[:, :split], cache)
        b, cache = m.step(x[:, split:], cache)
        torch.testing.assert_close(torch.cat([a, b], 1), m(x), atol=2e-5, rtol=1e-4)
    return x


def test_cached_decoding_with_scaled_embeddings():
    m = build("sinusoidal", embed_scale="sqrt_d").eval()
    _assert_cached_decoding_is_exact(m, split=4)


def test_attention_only_blocks_have_no_mlp_and_decode_exactly(tmp_path):
    m = build("rope", d_ff=0).eval()
    names = set(dict(m.named_parameters()))
    assert not any(".fc1." in n or ".fc2." in n or ".ln2." in n for n in names)
    assert {"blocks.0.attn.qkv.weight", "blocks.1.attn.proj.weight"} <= names
    full = build("rope")
    assert sum(p.numel() for p in m.parameters()) < sum(p.numel() for p in full.parameters())
    x = _assert_cached_decoding_is_exact(m, split=5)
    checkpoint.save(tmp_path / "ck", m)
    m2, cfg = checkpoint.load(tmp_path / "ck")
    assert cfg.d_ff == 0
    torch.testing.assert_close(m2(x), m(x))
    with pytest.raises(ValueError, match="d_ff"):
        ModelConfig(d_ff=-1)


def test_fan_in_init_draws_pytorch_linear_ranges_and_still_pairs():
    m = build("nope", d_model=64, n_heads=2, init="fan_in")
    for w in (m.blocks[0].attn.qkv.weight, m.blocks[1].attn.proj.weight, m.blocks[0].fc2.weight):
        bound = 1 / math.sqrt(w.shape[1])
        assert float(w.detach().abs().max()) <= bound
        assert abs(float(w.detach().std()) - bound / math.sqrt(3)) < 0.1 * bound  # U(-b, b) has std b / sqrt(3)
    assert abs(float(m.tok_emb.weight.detach().std()) - 0.02) < 0.002  # the embedding keeps std 0.02
    assert float(m.blocks[0].attn.qkv.bias.detach().abs().max()) == 0.0
    a, b = shared_weights(m), shared_weights(build("t5", d_model=64, n_heads=2, init="fan_in"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    gpt2 = shared_weights(build("nope", d_model=64, n_heads=2))
    assert not torch.equal(a["blocks.0.attn.qkv.weight"], gpt2["blocks.0.attn.qkv.weight"])
    with pytest.raises(ValueError, match="init must be one of 'gpt2', 'fan_in'"):
        ModelConfig(init="xavier")
