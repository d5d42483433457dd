"""relpos against Hugging Face transformers: T5 buckets and bias, BLOOM ALiBi, LLaMA/NeoX/GPT-J RoPE.

transformers is a test-only dependency; every test imports it through
``pytest.importorskip``. Nothing here touches the network (models are built from
configs with random weights, never downloaded).
"""

from __future__ import annotations

import math

import pytest
import torch

import relpos
from relpos.distance import alibi_slopes, t5_bucket
from relpos.encodings.alibi import ALiBi
from relpos.encodings.rope import RoPE
from relpos.encodings.t5 import T5Bias
from tests.helpers import randomize_parameters


def _hf_t5():
    pytest.importorskip("transformers")
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    return T5Config, T5Attention


# ------------------------------------------------------------------------------ T5


@pytest.mark.parametrize("bidirectional,num_buckets,max_distance", [(True, 32, 8), (False, 32, 16), (False, 1, 128)])
def test_t5_bucket_refuses_what_transformers_cannot_bucket(bidirectional, num_buckets, max_distance):
    """Too few buckets, or max_distance inside the exact range: a ValueError naming the parameter."""
    with pytest.raises(ValueError, match="num_buckets|max_distance"):
        t5_bucket(torch.arange(-5, 5), bidirectional=bidirectional, num_buckets=num_buckets,
                  max_distance=max_distance)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (8, 20), (16, 9), (4, 3), (6, 50)])
def test_t5_buckets_match_transformers(bidirectional, num_buckets, max_distance):
    _, T5Attention = _hf_t5()
    rp = torch.arange(-600, 601)
    ours = t5_bucket(rp, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    theirs = T5Attention._relative_position_bucket(
        rp, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    assert torch.equal(ours, theirs.long())


@pytest.mark.parametrize("is_decoder", [False, True])
@pytest.mark.parametrize("past", [0, 5])
def test_t5_bias_matches_compute_bias(is_decoder, past):
    T5Config, T5Attention = _hf_t5()
    H, NB, MD = 3, 16, 20
    cfg = T5Config(d_model=24, d_kv=8, num_heads=H, relative_attention_num_buckets=NB,
                   relative_attention_max_distance=MD, is_decoder=is_decoder, num_layers=1)
    hf = T5Attention(cfg, has_relative_attention_bias=True, layer_idx=0)
    enc = T5Bias(n_heads=H, causal=is_decoder, num_buckets=NB, max_distance=MD)
    randomize_parameters(enc, std=1.0)
    with torch.no_grad():
        hf.relative_attention_bias.weight.copy_(enc.table)  # both (num_buckets, H)
    Nq, Nk = 7, 7 + past
    theirs = hf.compute_bias(Nq, Nk, past_seen_tokens=past)  # (1, H, Nq, Nk)
    qpos = torch.arange(past, past + Nq)[None]
    kpos = torch.arange(Nk)[None]
    torch.testing.assert_close(enc.bias(qpos, kpos), theirs, rtol=0, atol=0)
    torch.testing.assert_close(enc.reference_bias(qpos, kpos).float(), theirs, rtol=0, atol=1e-7)


# ---------------------------------------------------------------------------- ALiBi


@pytest.mark.parametrize("H", [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64])
def test_alibi_slopes_match_bloom(H):
    pytest.importorskip("transformers")
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes

    torch.testing.assert_close(alibi_slopes(H), _get_alibi_slopes(H, torch.device("cpu")), rtol=1e-6, atol=0)


@pytest.mark.parametrize("H", [4, 6])
def test_alibi_bias_matches_bloom_up_to_row_constant(H):
    pytest.importorskip("transformers")
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    B, N = 2, 9
    hf = build_alibi_tensor(torch.ones(B, N, dtype=torch.long), H, torch.float32).view(B, H, 1, N)
    enc = ALiBi(n_heads=H)
    ours = enc.bias(torch.arange(N)[None], torch.arange(N)[None])  # (1, H, N, N)
    # BLOOM adds +m*j; ALiBi is -m*(i - j) = m*j - m*i: they differ by -m*i, constant in each row.
    i = torch.arange(N, dtype=torch.float32)
    shifted = hf + (-alibi_slopes(H)[:, None, None] * i[:, None])[None]
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    torch.testing.assert_close(ours.expand(B, -1, -1, -1)[..., causal], shifted.expand(-1, -1, N, -1)[..., causal])
    # so causal attention is the same
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, N, 8, generator=g) for _ in range(3))
    logits = q @ k.transpose(-1, -2) / math.sqrt(8) + hf
    want = torch.softmax(logits.masked_fill(~causal, float("-inf")), -1) @ v
    got = relpos.attention(q, k, v, enc, causal=True)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- RoPE


def _llama(rope_parameters: dict, head_dim: int = 16, max_pos: int = 16):
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    cfg = LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                      max_position_embeddings=max_pos, rope_parameters=dict(rope_parameters))
    return LlamaRotaryEmbedding(cfg), apply_rotary_pos_emb


# (HF rope_type, HF extra parameters, relpos options, HF max_position_embeddings)
ROPE_CASES = [
    ("default", {}, {}, 16),
    ("linear", {"factor": 4.0}, {"scaling": "linear", "factor": 4.0}, 16),
    ("dynamic", {"factor": 4.0}, {"scaling": "dynamic", "factor": 4.0, "original_max_len": 16}, 16),
    ("dynamic", {"factor": 2.5}, {"scaling": "dynamic", "factor": 2.5, "original_max_len": 16}, 16),
    ("yarn", {"factor": 4.0, "original_max_position_embeddings": 16},
     {"scaling": "yarn", "factor": 4.0, "original_max_len": 16}, 64),
    ("yarn", {"factor": 8.0, "original_max_position_embeddings": 2048},
     {"scaling": "yarn", "factor": 8.0, "original_max_len": 2048}, 16384),
    ("llama3", {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
     {"scaling": "llama3", "factor": 8.0, "original_max_len": 64}, 512),
]


@pytest.mark.parametrize("rope_type,hf_extra,opts,max_pos", ROPE_CASES, ids=lambda v: str(v) if isinstance(v, (str, int)) else None)
@pytest.mark.parametrize("head_dim", [16, 64])
def test_rope_matches_llama(rope_type, hf_extra, opts, max_pos, head_dim):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    assert rope_type == "default" or rope_type in ROPE_INIT_FUNCTIONS, f"transformers has no {rope_type!r} rope"
    emb, apply = _llama({"rope_type": rope_type, "rope_theta": 10000.0, **hf_extra}, head_dim, max_pos)
    enc = relpos.make_encoding("rope", n_heads=4, head_dim=head_dim, **opts)
    for N in (12, 40):  # within and beyond the original length (dynamic recomputes beyond)
        g = torch.Generator().manual_seed(N)
        q = torch.randn(2, 4, N, head_dim, generator=g)
        k = torch.randn(2, 4, N, head_dim, generator=g)
        pos = torch.arange(N)[None]
        cos, sin = emb(q, pos)
        torch.testing.assert_close(enc.inv_freq(N).float(), emb.inv_freq, rtol=2e-6, atol=0)
        assert enc.mscale == pytest.approx(emb.attention_scaling, rel=1e-12)
        want_q, want_k = apply(q, k, cos, sin)
        got_q = enc.rotate(q, pos, is_query=True, seq_len=N)
        got_k = enc.rotate(k, pos, is_query=False, seq_len=N)
        torch.testing.assert_close(got_q, want_q, rtol=1e-5, atol=2e-5)
        torch.testing.assert_close(got_k, want_k, rtol=1e-5, atol=2e-5)
        # the float64 reference agrees too
        torch.testing.assert_close(enc.reference_rotate(q, pos, is_query=True, seq_len=N).float(), want_q,
                                   rtol=1e-5, atol=2e-5)


def test_rope_ntk_is_default_rope_with_scaled_base():
    f, D = 4.0, 16
    emb, apply = _llama({"rope_type": "default", "rope_theta": 10000.0 * f ** (D / (D - 2))}, D)
    enc = RoPE(n_heads=4, head_dim=D, scaling="ntk", factor=f)
    torch.testing.assert_close(enc.inv_freq().float(), emb.inv_freq, rtol=2e-6, atol=0)
    q = torch.randn(1, 4, 10, D)
    pos = torch.arange(10)[None]
    cos, sin = emb(q, pos)
    torch.testing.assert_close(enc.rotate(q, pos, is_query=True, seq_len=10), apply(q, q, cos, sin)[0],
                               rtol=1e-5, atol=1e-5)


def test_rope_partial_rotary_matches_gpt_neox():
    pytest.importorskip("transformers")
    from transformers import GPTNeoXConfig
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding, apply_rotary_pos_emb

    D, frac = 32, 0.25
    cfg = GPTNeoXConfig(hidden_size=4 * D, num_attention_heads=4, max_position_embeddings=64,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": frac})
    emb = GPTNeoXRotaryEmbedding(cfg)
    enc = RoPE(n_heads=4, head_dim=D, rotary_fraction=frac)
    assert enc.rot_dim == int(D * frac)
    q, k = torch.randn(2, 4, 11, D), torch.randn(2, 4, 11, D)
    pos = torch.arange(3, 14)[None]
    cos, sin = emb(q, pos)
    wq, wk = apply_rotary_pos_emb(q, k, cos, sin)
    torch.testing.assert_close(enc.rotate(q, pos, is_query=True, seq_len=14), wq, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(enc.rotate(k, pos, is_query=False, seq_len=14), wk, rtol=1e-5, atol=1e-5)
    assert torch.equal(enc.rotate(q, pos, is_query=True, seq_len=14)[..., enc.rot_dim:], q[..., enc.rot_dim:])


def test_rope_interleaved_matches_gptj():
    pytest.importorskip("transformers")
    from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb, create_sinusoidal_positions

    D, N = 16, 9
    table = create_sinusoidal_positions(32, D)  # (32, D): [sin | cos]
    sin, cos = table[:N, : D // 2][None], table[:N, D // 2 :][None]  # (1, N, D/2)
    x = torch.randn(2, N, 3, D)  # GPT-J layout (B, N, H, D)
    want = apply_rotary_pos_emb(x, sin, cos)
    enc = RoPE(n_heads=3, head_dim=D, pairing="interleaved")
    got = enc.rotate(x.transpose(1, 2), torch.arange(N)[None], is_query=True, seq_len=N).transpose(1, 2)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_rope_bf16_model_uses_float32_tables():
    """A bf16 model rotates with float32 cos/sin: the result is the float32 rotation rounded once."""
    emb, apply = _llama({"rope_type": "default", "rope_theta": 10000.0}, 16)
    enc = RoPE(n_heads=4, head_dim=16).to(torch.bfloat16)
    q = torch.randn(1, 4, 300, 16)
    pos = torch.arange(300)[None]
    cos, sin = emb(q, pos)
    want = apply(q, q, cos, sin)[0].to(torch.bfloat16)
    got = enc.rotate(q.to(torch.bfloat16), pos, is_query=True, seq_len=300)
    assert got.dtype == torch.bfloat16
    # bf16 input rounding (~2^-8 relative) dominates; a bf16 angle table would be off by O(1) at n ~ 300
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=5e-2)
