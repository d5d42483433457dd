"""The bridge keeps what fine-tuning needs (issue 48): saving and reloading, the model's RoPE settings under
options, and packed rows (position_ids that restart) kept apart as documents."""

from __future__ import annotations

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")

import relpos.hf  # noqa: E402
from tests.hf_bridge.test_bridge import V, _bridged, _ids_and_mask, tiny_llama  # noqa: E402

LLAMA3 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 32}


def _options(name):
    return {"num_buckets": 32, "max_distance": 1024} if name == "t5" else {}


@pytest.mark.parametrize("name", relpos.hf.bridge_schemes())
def test_bridged_model_saves_and_reloads_to_identical_logits(name, tmp_path):
    """Item 1: T5 (a table shared by the layers) raised 'shared tensors' in save_pretrained."""
    model = _bridged(tiny_llama(), name, **_options(name))
    ids, mask = _ids_and_mask()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
    model.save_pretrained(tmp_path)
    loaded = relpos.hf.load_bridged(tmp_path)
    assert loaded.config.relpos_bridge["scheme"] == model.config.relpos_bridge["scheme"]
    with torch.no_grad():
        got = loaded(ids, attention_mask=mask).logits
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    if name == "t5":
        encs = [layer.self_attn.relpos_encoding for layer in loaded.model.layers]
        assert encs[0] is encs[1]


def test_rope_bridged_model_reloads_natively_with_transformers(tmp_path):
    model = tiny_llama(rope_parameters=LLAMA3)
    ids, mask = _ids_and_mask()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
    relpos.hf.use_scheme(model, "rope").save_pretrained(tmp_path)
    from transformers import AutoModelForCausalLM

    with torch.no_grad():
        got = AutoModelForCausalLM.from_pretrained(tmp_path)(ids, attention_mask=mask).logits
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


def test_load_bridged_refuses_a_folder_without_its_record(tmp_path):
    tiny_llama().save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="no relpos_bridge record"):
        relpos.hf.load_bridged(tmp_path)


@pytest.mark.parametrize("rope_parameters, options", [
    ({"rope_type": "default", "rope_theta": 1e5}, {"pairing": "half"}),
    (LLAMA3, {"pairing": "half"}),
    (LLAMA3, {"impl_hint": None}),
])
def test_rope_options_are_merged_over_the_models_settings(rope_parameters, options):
    """Item 2: any option for 'rope' threw away rope_theta (1e5 -> 1e4: a 0.378 difference) and the scaling."""
    options = {k: v for k, v in options.items() if k != "impl_hint"}
    model = tiny_llama(rope_parameters=rope_parameters, initializer_range=0.25)  # large weights: positions matter
    ids, mask = _ids_and_mask()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        got = relpos.hf.use_scheme(copy.deepcopy(model), "rope", **options)(ids, attention_mask=mask).logits
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-5, rtol=1e-5)


def test_an_option_replaces_only_its_own_setting():
    model = relpos.hf.use_scheme(tiny_llama(rope_parameters=LLAMA3), "rope", base=1000.0)
    enc = model.model.layers[0].self_attn.relpos_encoding
    assert enc.base == 1000.0 and enc.scaling == "llama3" and enc.factor == 8.0
    model = relpos.hf.use_scheme(tiny_llama(rope_parameters=LLAMA3), "rope", scaling="linear", factor=2.0)
    enc = model.model.layers[0].self_attn.relpos_encoding
    assert enc.base == 500000.0 and enc.scaling == "linear" and enc.factor == 2.0


def _packed(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    docs = [torch.randint(3, V, (n,), generator=g) for n in lengths]
    ids = torch.cat(docs)[None]
    pos = torch.cat([torch.arange(n) for n in lengths])[None]
    return docs, ids, pos


@pytest.mark.parametrize("name", ["rope", "alibi", "t5", "fire", "cope", "kerple-log"])
def test_packed_row_equals_each_document_alone(name):
    """Item 4: position_ids that restart were ignored, and the documents attended across (0.60 off)."""
    model = _bridged(tiny_llama(), name) if name != "rope" else relpos.hf.use_scheme(tiny_llama(), "rope")
    docs, ids, pos = _packed([5, 7, 4])
    with torch.no_grad():
        packed = model(ids, position_ids=pos, use_cache=False).logits[0]
        alone = torch.cat([model(d[None], use_cache=False).logits[0] for d in docs])
    torch.testing.assert_close(packed, alone, atol=1e-5, rtol=1e-5)


def test_packed_rope_equals_transformers_own_attention():
    base = tiny_llama()
    docs, ids, pos = _packed([6, 9])
    with torch.no_grad():
        want = base(ids, position_ids=pos, use_cache=False).logits
        got = relpos.hf.use_scheme(copy.deepcopy(base), "rope")(ids, position_ids=pos, use_cache=False).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_position_ids_are_the_positions():
    """A document at positions 2000.. is seen there: FIRE's normaliser reads the query position beyond its
    threshold (512 at init), so it differs from the same tokens at 0.. and equals them at index 2000.."""
    model = _bridged(tiny_llama(), "fire")
    ids = torch.randint(3, V, (1, 8))
    with torch.no_grad():
        at0 = model(ids, use_cache=False).logits
        at2000 = model(ids, position_ids=torch.arange(2000, 2008)[None], use_cache=False).logits
    assert (at0 - at2000).abs().max() > 1e-4
    enc = model.model.layers[0].self_attn.relpos_encoding
    q = torch.randn(1, 4, 8, 8)
    k, v = torch.randn(1, 2, 8, 8), torch.randn(1, 2, 8, 8)
    shifted = relpos.attention(q, k, v, enc, causal=True, positions=torch.arange(2000, 2008)[None])
    plain = relpos.attention(q, k, v, enc, causal=True)
    assert (shifted - plain).abs().max() > 1e-5  # the scheme itself tells the two apart


def test_a_cache_filled_with_packed_documents_is_not_continued():
    model = _bridged(tiny_llama(), "alibi")
    _, ids, pos = _packed([5, 7])
    with torch.no_grad():
        out = model(ids, position_ids=pos, use_cache=True)
        with pytest.raises(ValueError, match="cache filled with packed documents"):
            model(ids[:, -1:], position_ids=pos[:, -1:] + 1, cache=out.past_key_values)


def test_generate_with_left_padding_sees_the_models_position_ids():
    """The cached keys are read as positions up to the new token's position_ids: with FIRE past its threshold
    (positions matter, not only offsets), generate equals a full pass given the position_ids generate uses."""
    model = _bridged(tiny_llama(), "fire", init_L=2.0)
    ids, mask = _ids_and_mask()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=0)
        full_mask = torch.cat([mask, torch.ones(2, 3, dtype=torch.long)], 1)
        pid = (full_mask.cumsum(-1) - 1).clamp_min(0)
        full = model(out.sequences, attention_mask=full_mask, position_ids=pid).logits
    N = ids.shape[1]
    torch.testing.assert_close(torch.stack(out.logits, 1), full[:, N - 1:-1], atol=1e-5, rtol=1e-5)


def test_a_second_use_scheme_reads_the_models_own_rope_again():
    """After T5 (its rotary embedding already off, its table on the base model), 'rope' still reproduces the model
    and the shared table is gone from the state dict."""
    model = tiny_llama(rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    ids, mask = _ids_and_mask()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        twice = relpos.hf.use_scheme(relpos.hf.use_scheme(copy.deepcopy(model), "t5"), "rope")
        got = twice(ids, attention_mask=mask).logits
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-5, rtol=1e-5)
    assert not any("relpos_encoding.table" in k for k in twice.state_dict())


def test_load_bridged_still_warns_about_weights_other_than_the_schemes(tmp_path):
    import warnings

    from safetensors.torch import load_file, save_file

    relpos.hf.use_scheme(tiny_llama(), "t5").save_pretrained(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        relpos.hf.load_bridged(tmp_path)  # the scheme's own tensors: no warning
    state = load_file(tmp_path / "model.safetensors")
    state["model.extra_weight"] = torch.zeros(2)
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.warns(UserWarning, match="model.extra_weight"):
        relpos.hf.load_bridged(tmp_path)
