"""relpos.hf.use_scheme on a tiny random Llama built here (no download; issue 32)."""

from __future__ import annotations

import copy
import inspect
import json.decoder

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

import relpos.hf  # noqa: E402
from tests.helpers import randomize_parameters  # noqa: E402

V = 97


def tiny_llama(seed=0, **kw) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    cfg.update(kw)
    return LlamaForCausalLM(LlamaConfig(**cfg)).eval()


def _bridged(model, name, **opts):
    m = relpos.hf.use_scheme(copy.deepcopy(model), name, **opts)
    for layer in m.model.layers:
        randomize_parameters(layer.self_attn.relpos_encoding, std=0.3, seed=layer.self_attn.layer_idx)
    return m


def _ids_and_mask(B=2, N=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, V, (B, N), generator=g)
    mask = torch.ones(B, N, dtype=torch.long)
    mask[1, :4] = 0  # left padding
    ids[1, :4] = 0
    return ids, mask


@pytest.mark.parametrize("rope_parameters", [None, {"rope_type": "default", "rope_theta": 500.0},
                                             {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
                                             {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                              "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                              "original_max_position_embeddings": 32},
                                             {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                              "original_max_position_embeddings": 32}])
def test_rope_through_the_bridge_reproduces_the_model(rope_parameters):
    """The conformance test: the model's own RoPE, through relpos, gives its logits (float32, 1e-5)."""
    model = tiny_llama(**({} if rope_parameters is None else {"rope_parameters": rope_parameters}))
    ids, mask = _ids_and_mask(N=20)
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        bridged = relpos.hf.use_scheme(copy.deepcopy(model), "rope")
        assert bridged.config._attn_implementation == "relpos"
        got = bridged(ids, attention_mask=mask).logits
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", relpos.hf.bridge_schemes())
def test_generate_equals_full_forward(name):
    model = _bridged(tiny_llama(), name)
    ids, mask = _ids_and_mask()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=0)
        step_logits = torch.stack(out.logits, 1)  # (B, 5, V)
        full_mask = torch.cat([mask, torch.ones(2, 5, dtype=torch.long)], 1)
        full = model(out.sequences, attention_mask=full_mask).logits
    N = ids.shape[1]
    torch.testing.assert_close(step_logits, full[:, N - 1:-1], atol=1e-4, rtol=1e-4)


def test_gqa_is_kept_and_right_padding_matches_unpadded():
    model = _bridged(tiny_llama(), "alibi")
    assert model.model.layers[0].self_attn.k_proj.out_features == 2 * 8  # 2 kv heads, not repeated
    ids, _ = _ids_and_mask()
    ids = ids[:1, 4:]
    padded = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], 1)
    mask = torch.cat([torch.ones_like(ids), torch.zeros(1, 3, dtype=torch.long)], 1)
    with torch.no_grad():
        a = model(ids).logits
        b = model(padded, attention_mask=mask).logits[:, :ids.shape[1]]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def _corpus_batches(steps, B=8, N=48, seed=0):
    text = inspect.getsource(json.decoder).encode()
    data = torch.tensor([b % (V - 3) + 3 for b in text])
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        starts = torch.randint(0, len(data) - N, (B,), generator=g)
        yield torch.stack([data[s:s + N] for s in starts])


@pytest.mark.parametrize("name", ["alibi", "t5", "fire"])
def test_bridged_llama_trains(name):
    model = relpos.hf.use_scheme(tiny_llama(seed=1), name).train()
    params = list(model.parameters())
    assert any(p is q for p in params for q in model.model.layers[0].self_attn.relpos_encoding.parameters()) \
        or name == "alibi"
    opt = torch.optim.AdamW(params, lr=3e-3)
    losses = []
    for x in _corpus_batches(50):
        loss = model(x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 0.5, (first, last)


@pytest.mark.parametrize("name", ["sinusoidal", "learned"])
def test_embedding_only_schemes_are_refused_by_name(name):
    with pytest.raises(ValueError, match=f"scheme '{name}' adds absolute positions"):
        relpos.hf.use_scheme(tiny_llama(), name)
    assert name not in relpos.hf.bridge_schemes()


def test_unservable_models_and_options_are_refused():
    with pytest.raises(ValueError, match="share_att_key=True"):
        relpos.hf.use_scheme(tiny_llama(), "deberta", share_att_key=True)
    with pytest.raises(ValueError, match="unknown scheme"):
        relpos.hf.use_scheme(tiny_llama(), "no-such-scheme")
    from transformers import MistralConfig, MistralForCausalLM

    mistral = MistralForCausalLM(MistralConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                               num_attention_heads=4, num_key_value_heads=2, sliding_window=8))
    with pytest.raises(ValueError, match="sliding-window"):
        relpos.hf.use_scheme(mistral, "alibi")
    with pytest.raises(ValueError, match="rope_type 'longrope'"):
        relpos.hf.rope_options(type("C", (), {"rope_parameters": {"rope_type": "longrope", "rope_theta": 1.0}})())


def test_attention_dropout_applies_in_training_only():
    """The model's own attention_dropout reaches relpos.attention in train() mode; eval() is the model without it."""
    torch.manual_seed(0)
    model = relpos.hf.use_scheme(tiny_llama(attention_dropout=0.5), "alibi")
    plain = relpos.hf.use_scheme(tiny_llama(attention_dropout=0.0), "alibi")
    plain.load_state_dict(model.state_dict())
    x = torch.randint(0, V, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(x).logits, plain.eval()(x).logits)
        model.train()
        torch.manual_seed(1)
        a = model(x).logits
        torch.manual_seed(1)
        b = model(x).logits
        torch.manual_seed(2)
        c = model(x).logits
    torch.testing.assert_close(a, b)  # a seed fixes the draw
    assert (a - c).abs().max() > 1e-3 and (a - plain(x).logits).abs().max() > 1e-3


def test_t5_table_is_shared_and_saved():
    model = relpos.hf.use_scheme(tiny_llama(), "t5")
    encs = [layer.self_attn.relpos_encoding for layer in model.model.layers]
    assert encs[0] is encs[1]
    assert any("relpos_encoding" in k for k in model.state_dict())


@pytest.mark.parametrize("family", ["qwen2", "mistral"])
def test_other_llama_family_models(family):
    """Qwen2 and Mistral (without a sliding window) through the bridge: generate == full forward."""
    small = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0, eos_token_id=2)
    torch.manual_seed(0)
    if family == "qwen2":
        from transformers import Qwen2Config, Qwen2ForCausalLM

        base = Qwen2ForCausalLM(Qwen2Config(**small)).eval()
    else:
        from transformers import MistralConfig, MistralForCausalLM

        base = MistralForCausalLM(MistralConfig(sliding_window=None, **small)).eval()
    ids, mask = _ids_and_mask()
    with torch.no_grad():
        want = base(ids, attention_mask=mask).logits
        rope = relpos.hf.use_scheme(copy.deepcopy(base), "rope")
        torch.testing.assert_close(rope(ids, attention_mask=mask).logits[mask.bool()], want[mask.bool()],
                                   atol=1e-5, rtol=1e-5)
        model = relpos.hf.use_scheme(base, "kerple-log")
        out = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=0)
        full = model(out.sequences, attention_mask=torch.cat([mask, torch.ones(2, 4, dtype=torch.long)], 1)).logits
    torch.testing.assert_close(torch.stack(out.logits, 1), full[:, ids.shape[1] - 1:-1], atol=1e-4, rtol=1e-4)


def test_static_cache_is_refused():
    """A static cache pre-allocates keys: attending to its empty slots would be a silent wrong answer."""
    model = relpos.hf.use_scheme(tiny_llama(), "alibi")
    ids = torch.randint(3, V, (1, 5))
    with pytest.raises(ValueError, match="dynamic cache"), torch.no_grad():
        model.generate(ids, max_new_tokens=2, do_sample=False, pad_token_id=0, cache_implementation="static")


def test_missing_transformers_names_the_extra(monkeypatch):
    import builtins

    from relpos.hf import bridge

    real = builtins.__import__

    def fake(name, *a, **kw):
        if name == "transformers" or name.startswith("transformers."):
            raise ImportError(name)
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(ImportError, match=r"relpos\[hf\].*transformers>=4.56"):
        bridge._transformers()
