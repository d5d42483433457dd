"""ModelConfig, MultiHeadAttention, TransformerLM and TransformerEncoder (full forward)."""

from __future__ import annotations

import json

import pytest
import torch

import relpos
from relpos.encodings import get_scheme, scheme_names
from relpos.model import PRESETS, ModelConfig, MultiHeadAttention, TransformerEncoder, TransformerLM
from tests.helpers import randomize_parameters

SCHEMES = scheme_names()


def tiny(scheme: str, **kw) -> ModelConfig:
    base = dict(d_model=16, n_layers=2, n_heads=2, max_len=32, scheme=scheme)
    base.update(kw)
    return ModelConfig(**base)


def make(scheme: str, cls=TransformerLM, std=0.2, **kw):
    torch.manual_seed(0)
    m = cls(tiny(scheme, **kw)).eval()
    randomize_parameters(m, std=std)
    return m


# ----------------------------------------------------------------- config


def test_presets_and_round_trip():
    assert {"tiny", "small"} <= set(PRESETS)
    cfg = ModelConfig.preset("small", scheme="t5", scheme_options={"num_buckets": 16}, n_layers=3)
    assert cfg.d_model == PRESETS["small"]["d_model"] and cfg.n_layers == 3
    d = json.loads(json.dumps(cfg.to_dict()))
    assert ModelConfig.from_dict(d) == cfg


@pytest.mark.parametrize(
    "make_cfg, exc, match",
    [
        (lambda: ModelConfig.preset("huge"), ValueError, "unknown preset 'huge'.*tiny"),
        (lambda: ModelConfig(scheme="nonsense"), ValueError, "unknown scheme 'nonsense'"),
        (lambda: ModelConfig(scheme="t5", d_model=30, n_heads=4), ValueError, "n_heads \\(4\\) must divide d_model \\(30\\)"),
        (lambda: ModelConfig(scheme="t5", dropout=1.5), ValueError, "dropout"),
        (lambda: ModelConfig(scheme="t5", n_layers=0), ValueError, "n_layers"),
        (lambda: ModelConfig(scheme="t5", attn_impl="magic"), ValueError, "attn_impl"),
        (lambda: ModelConfig(scheme="t5", random_positions=0), ValueError, "random_positions"),
        (lambda: ModelConfig.preset("tiny", scheme="t5", colour="red"), TypeError, "colour"),
        (lambda: ModelConfig.from_dict({"scheme": "t5", "wat": 1}), ValueError, "wat"),
        (lambda: TransformerLM(ModelConfig(scheme="t5", scheme_options={"bogus": 1})), TypeError, "bogus"),
    ],
)
def test_config_errors_name_the_problem(make_cfg, exc, match):
    with pytest.raises(exc, match=match):
        make_cfg()


def test_scheme_options_reach_the_scheme():
    m = TransformerLM(tiny("t5", scheme_options={"num_buckets": 8}))
    assert m.pos[0].table.shape == (8, 2)


# ------------------------------------------------------ where params live


def test_sharing_defaults_and_overrides():
    t5 = TransformerLM(tiny("t5", n_layers=3))
    assert len(t5.pos) == 1 and all(t5.layer_encoding(i) is t5.pos[0] for i in range(3))
    t5_per_layer = TransformerLM(tiny("t5", n_layers=3, share_encoding=False))
    assert len(t5_per_layer.pos) == 3
    assert t5_per_layer.num_params() - t5.num_params() == 2 * t5.pos[0].num_params()
    assert len({id(t5_per_layer.layer_encoding(i)) for i in range(3)}) == 3
    xl = TransformerLM(tiny("transformer-xl", n_layers=3))
    assert len(xl.pos) == 3
    assert len(TransformerLM(tiny("transformer-xl", n_layers=3, share_encoding=True)).pos) == 1
    ab = TransformerLM(tiny("learned", n_layers=3))  # input-only scheme: one table, used at the input only
    assert len(ab.pos) == 1 and ab.input_encoding is ab.pos[0] and ab.layer_encoding(0) is None


def test_shared_table_is_used_by_every_layer():
    m = make("t5", n_layers=3)
    calls = []
    orig = m.pos[0].relative_bias
    m.pos[0].relative_bias = lambda d: (calls.append(1), orig(d))[1]
    x = torch.randint(0, 256, (1, 9))
    m(x).sum().backward()
    assert len(calls) == 3  # one table, consulted by each of the 3 layers
    assert m.pos[0].table.grad is not None and m.pos[0].table.grad.abs().sum() > 0


def test_tied_embeddings_and_no_duplicate_tensors():
    m = make("alibi")
    sd = m.state_dict()
    assert not any("head" in k for k in sd)
    x = torch.randint(0, 256, (2, 7))
    h = m.hidden_states(x)
    torch.testing.assert_close(m(x), h @ m.tok_emb.weight.T)


# ------------------------------------------------------- forward semantics


@pytest.mark.parametrize("scheme", SCHEMES)
def test_causal_lm_ignores_the_future(scheme):
    m = make(scheme)
    x = torch.randint(0, 256, (2, 12))
    y = x.clone()
    y[:, 8:] = torch.randint(0, 256, (2, 4))
    a, b = m(x), m(y)
    torch.testing.assert_close(a[:, :8], b[:, :8], atol=1e-5, rtol=1e-4)
    assert not torch.allclose(a[:, 8:], b[:, 8:])


@pytest.mark.parametrize("scheme", SCHEMES)
def test_encoder_padding_mask_matches_unpadded(scheme):
    cls, _ = get_scheme(scheme)
    if cls.causal_only:
        with pytest.raises(ValueError, match="causal"):
            TransformerEncoder(tiny(scheme))
        return
    m = make(scheme, cls=TransformerEncoder)
    x = torch.randint(0, 256, (2, 10))
    kpm = torch.ones(2, 10, dtype=torch.bool)
    kpm[1, 6:] = False  # row 1: 6 real tokens, then padding on the right
    out = m(x, key_padding_mask=kpm)
    ref = m(x[1:, :6])
    torch.testing.assert_close(out[1:, :6], ref, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out[:1], m(x[:1]), atol=1e-5, rtol=1e-4)
    assert torch.isfinite(out).all()


def test_encoder_is_bidirectional():
    m = make("t5", cls=TransformerEncoder)
    x = torch.randint(0, 256, (1, 8))
    y = x.clone()
    y[0, -1] = (y[0, -1] + 1) % 256
    assert not torch.allclose(m(x)[:, 0], m(y)[:, 0])


@pytest.mark.parametrize("scheme", SCHEMES)
def test_attention_maps_are_the_attention_used(scheme):
    m = make(scheme)
    x = torch.randint(0, 256, (1, 9))
    maps = m.attention_maps(x)
    assert len(maps) == 2
    for p in maps:
        assert p.shape == (1, 2, 9, 9) and p.dtype == torch.float32
        torch.testing.assert_close(p.sum(-1), torch.ones(1, 2, 9))
        assert torch.all(p.triu(1) == 0)  # causal
    # layer 0: p @ v (+ the scheme's value term) is exactly what attention returns
    blk = m.blocks[0]
    h = m._embed(x, None)
    q, k, v = blk.attn.project(blk.ln1(h))
    enc = m.layer_encoding(0)
    out = relpos.attention(q, k, v, enc, causal=True)
    want = maps[0] @ v
    if enc is not None and "value" in enc.acts_on:
        want = want + enc.value(maps[0], torch.arange(9)[None], torch.arange(9)[None])
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-4)


def test_learned_table_limits_are_clear_errors():
    m = make("learned", max_len=16)
    with pytest.raises(ValueError, match="max_len=16"):
        m(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="cache length.*max_len=16"):
        m.init_cache(1, max_len=40)
    with pytest.raises(ValueError, match="max_len=16"):
        m.generate(torch.zeros(1, 10, dtype=torch.long), 10)
    with pytest.raises(ValueError, match="random_positions"):
        TransformerLM(tiny("learned", max_len=16, random_positions=64))


def test_bad_inputs():
    m = make("alibi")
    with pytest.raises(TypeError, match="integer"):
        m(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="vocab_size"):
        m(torch.full((1, 3), 300))
    with pytest.raises(ValueError, match="shape"):
        m(torch.zeros(3, dtype=torch.long))


def test_random_positions_train_vs_eval():
    m = make("rope", random_positions=64)
    B, N = 3, 10
    m.train()
    pos = m._positions(None, B, N, "cpu")
    assert pos.shape == (B, N)
    assert torch.all(pos[:, 1:] > pos[:, :-1]) and int(pos.min()) >= 0 and int(pos.max()) < 64
    m.eval()
    assert m._positions(None, B, N, "cpu") is None  # eval: 0..N-1
    x = torch.randint(0, 256, (B, N))
    torch.manual_seed(1)
    m.train()
    tr = m(x)
    m.eval()
    ev = m(x)
    torch.testing.assert_close(ev, m(x, positions=torch.arange(N)))
    assert not torch.allclose(tr, ev)
    m.train()
    with pytest.raises(ValueError, match="random_positions"):
        m(torch.zeros(1, 65, dtype=torch.long))


def test_mha_takes_one_typed_scheme():
    x = torch.randn(2, 5, 16)
    enc = relpos.make_encoding("t5", n_heads=4, head_dim=4, causal=True)
    a = MultiHeadAttention(16, 4, enc, causal=True)
    assert a(x).shape == (2, 5, 16)
    assert any(p is enc.table for p in a.parameters())
    b = MultiHeadAttention(16, 4, "alibi", causal=False)
    kpm = torch.tensor([[True] * 5, [True, True, False, False, False]])
    assert torch.isfinite(b(x, key_padding_mask=kpm)).all()
    assert MultiHeadAttention(16, 4, None, causal=False)(x).shape == (2, 5, 16)
    with pytest.raises(TypeError, match="encoding"):
        MultiHeadAttention(16, 4, 3, causal=False)
    with pytest.raises(ValueError, match="divide"):
        MultiHeadAttention(16, 3, causal=False)
