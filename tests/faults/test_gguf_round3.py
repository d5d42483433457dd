"""GGUF files and checkpoints that must be refused by name, quickly, before anything large is built (issue 47).

Item 1: a metadata bomb (a million strings under an unused key) was parsed about
four times by ``gguf.GGUFReader`` before any bound was checked. Item 6: missing
weights were initialised at random and evaluated. Item 8: a GGUF's
``<arch>.rope.scaling.*`` keys were dropped. Minor: an out-of-range BOS id gave
an ``IndexError``; GGUF refusals said "config.json:"; GPT-2 and Mamba files were
refused with "hidden_size ... got None". Every file is built here (nothing downloaded).
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
gguf = pytest.importorskip("gguf")

from relpos.pretrained.evaluate import load_hf_model  # noqa: E402
from relpos.pretrained.load import load_config, model_source, tokenizer_file  # noqa: E402
from tests.data_helpers import tiny_llama  # noqa: E402
from tests.test_hf_gguf import write_gguf  # noqa: E402


def make_gguf(src: Path, dest: Path, *, arch: str = "llama", extra=None, drop: tuple[str, ...] = (),
              bos: int | None = None) -> Path:
    """``write_gguf`` of ``src`` with another architecture name, extra metadata, tensors left out."""

    class W(gguf.GGUFWriter):
        def __init__(self, path, _arch, *a, **kw):
            super().__init__(path, arch, *a, **kw)

        def add_tensor(self, name, *a, **kw):
            if not any(name.startswith(d) for d in drop):
                super().add_tensor(name, *a, **kw)

        def add_bos_token_id(self, i):
            super().add_bos_token_id(i if bos is None else bos)

        def write_header_to_file(self, *a, **kw):
            if extra:
                extra(self)
            super().write_header_to_file(*a, **kw)

    real = gguf.GGUFWriter
    gguf.GGUFWriter = W
    try:
        return write_gguf(src, dest)
    finally:
        gguf.GGUFWriter = real


def inject(path: Path, dest: Path, key: str, n: int, *, string_len: int = 0) -> Path:
    """``path`` with one more metadata key: an array of ``n`` strings of ``string_len`` bytes, written by hand.

    The entry is padded (by its key name) to a multiple of the alignment, so the
    tensor offsets stay valid.
    """
    data = path.read_bytes()
    body = (struct.pack("<Q", string_len) + b"x" * string_len) * n
    k = key.encode()
    while (8 + len(k) + 4 + 4 + 8 + len(body)) % 32:
        k += b"_"
    entry = struct.pack("<Q", len(k)) + k + struct.pack("<IIQ", 9, 8, n) + body
    n_kv = struct.unpack_from("<Q", data, 16)[0]
    dest.write_bytes(data[:16] + struct.pack("<Q", n_kv + 1) + entry + data[24:])
    return dest


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("g3")
    src = tiny_llama(root / "tiny", max_pos=64)
    return src, write_gguf(src, root / "tiny.gguf")


# ------------------------------------------------------------------ item 1: metadata bombs


def test_a_million_strings_under_an_unused_key_are_refused_before_parsing(tiny, tmp_path):
    src, path = tiny
    bomb = inject(path, tmp_path / "bomb.gguf", "general.unused", 1_000_000)
    assert bomb.stat().st_size > 8_000_000
    for call in (lambda: load_config(model_source(bomb)), lambda: load_hf_model(bomb, device="cpu"),
                 lambda: tokenizer_file(bomb, cache_dir=str(tmp_path / "c" / "corpora"))):
        with pytest.raises(ValueError, match=r"metadata key 'general\.unused_*' holds 1000000 values, more than "
                                             r"relpos reads") as e:
            call()
        assert "\n" not in str(e.value)


def test_the_loaded_file_is_parsed_once_and_gguf_reader_is_never_run(tiny, tmp_path, monkeypatch):
    """A file under the bounds (60,000 strings in an unused key) loads, and ``gguf.GGUFReader`` -- one numpy
    view per string, the cause of the minutes -- never runs; relpos's own parse runs once."""
    import relpos.pretrained.gguf as hg

    src, path = tiny
    f = inject(path, tmp_path / "big.gguf", "general.unused", 60_000)
    ran = []
    monkeypatch.setattr(gguf.GGUFReader, "__init__", lambda self, *a, **k: ran.append(a) or 1 / 0)
    parses = []
    real = hg._parse
    monkeypatch.setattr(hg, "_parse", lambda *a: parses.append(1) or real(*a))
    hg._CACHE.clear()
    m = load_hf_model(f, device="cpu")
    tokenizer_file(f, cache_dir=str(tmp_path / "c" / "corpora"))
    assert ran == [] and len(parses) == 1
    x = torch.randint(2, 512, (1, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(m(x), load_hf_model(src, device="cpu")(x), rtol=1e-5, atol=1e-5)


def test_counts_and_lengths_beyond_the_file_are_refused_in_one_line(tiny, tmp_path, monkeypatch):
    import relpos.pretrained.gguf as hg

    src, path = tiny
    data = path.read_bytes()
    cases = {
        "kv": (data[:16] + struct.pack("<Q", 10 ** 9) + data[24:], "declares 1000000000 metadata keys"),
        "tensors": (data[:8] + struct.pack("<Q", 10 ** 9) + data[16:], "declares 1000000000 tensors"),
        "fit": (data[:8] + struct.pack("<Q", 60_000) + data[16:], "more than its .* bytes can hold"),
        "truncated": (data[: len(data) // 2], "past the end of the file"),
        "header": (data[:20], "shorter than a GGUF header"),
        "magic": (b"GGUX" + data[4:], "does not start with the GGUF magic"),
    }
    for name, (blob, msg) in cases.items():
        f = tmp_path / f"{name}.gguf"
        f.write_bytes(blob)
        with pytest.raises(ValueError, match=msg) as e:
            load_config(model_source(f))
        assert "\n" not in str(e.value) and "out of bounds" not in str(e.value), name
    # a string claiming 2**60 bytes
    f = tmp_path / "long.gguf"
    i = data.index(b"general.architecture") + len(b"general.architecture") + 4
    f.write_bytes(data[:i] + struct.pack("<Q", 1 << 60) + data[i + 8:])
    with pytest.raises(ValueError, match="more than relpos reads"):
        load_config(model_source(f))
    # the total over every key: two arrays, each under its own bound
    monkeypatch.setattr(hg, "MAX_ITEMS", 1000)
    two = inject(inject(path, tmp_path / "a.gguf", "general.a", 600), tmp_path / "b.gguf", "general.b", 600)
    with pytest.raises(ValueError, match="more than 1000 values in all"):
        load_config(model_source(two))


# ------------------------------------------------------------------ item 6: missing weights, declared sizes


def test_a_gguf_with_no_tensors_or_a_missing_layer_is_refused_by_name(tiny, tmp_path):
    src, _ = tiny
    empty = make_gguf(src, tmp_path / "empty.gguf", drop=("",))
    with pytest.raises(ValueError, match="holds no tensors"):
        load_hf_model(empty, device="cpu")
    one = make_gguf(src, tmp_path / "norm.gguf", drop=("blk.1.ffn_norm",))
    with pytest.raises(ValueError, match=r"has no weight for model\.layers\.1\.post_attention_layernorm\.weight"):
        load_hf_model(one, device="cpu")
    layer = make_gguf(src, tmp_path / "layer.gguf", drop=("blk.1.",))
    with pytest.raises(ValueError, match="weights are missing|has no weight for model.layers.1"):
        load_hf_model(layer, device="cpu")


def test_a_gguf_tensor_the_model_has_no_parameter_for_is_refused_by_name(tiny, tmp_path):
    """A bias on a Llama built without biases was skipped by transformers' loader without a word."""
    src, _ = tiny
    f = make_gguf(src, tmp_path / "bias.gguf",
                  extra=lambda w: w.add_tensor("blk.0.attn_q.bias", np.zeros(32, dtype=np.float32)))
    with pytest.raises(ValueError, match=r"holds tensors the model does not have: blk\.0\.attn_q\.bias"):
        load_hf_model(f, device="cpu")


def test_a_small_gguf_declaring_a_large_model_is_refused_before_allocation(tiny, tmp_path):
    """10 KB declaring about 470M parameters: refused from the tensor table, before any weight is allocated."""
    src, _ = tiny

    def big(w):
        for k in ("context_length", "embedding_length", "block_count", "feed_forward_length"):
            w.kv_data[0].pop(f"llama.{k}", None)
        w.add_context_length(4096)
        w.add_embedding_length(2048)
        w.add_block_count(24)
        w.add_feed_forward_length(5632)

    f = make_gguf(src, tmp_path / "big.gguf", extra=big, drop=("blk.", "output."))
    assert f.stat().st_size < 200_000
    with pytest.raises(ValueError, match=r"describes about .* parameters but its tensors hold only"):
        load_hf_model(f, device="cpu")


def test_a_folder_with_missing_or_foreign_weights_is_refused_by_name(tiny, tmp_path):
    from safetensors.torch import load_file, save_file

    src, _ = tiny
    w = load_file(str(src / "model.safetensors"))

    def folder(name, tensors):
        d = tmp_path / name
        d.mkdir()
        for f in ("config.json", "tokenizer.json"):
            (d / f).write_bytes((src / f).read_bytes())
        save_file(tensors, str(d / "model.safetensors"))
        return d

    with pytest.raises(ValueError, match=r"describes about 5\.14e\+04 parameters but the weight files hold only"):
        load_hf_model(folder("none", {"foo": torch.zeros(3)}), device="cpu")  # before anything is allocated
    with pytest.raises(ValueError, match=r"has no weight for lm_head\.weight, model\.embed_tokens\.weight"):
        load_hf_model(folder("foreign", {"foo": torch.zeros(60_000)}), device="cpu")
    with pytest.raises(ValueError, match=r"has no weight for model\.layers\.1\."):
        load_hf_model(folder("layer", {k: v for k, v in w.items() if ".layers.1." not in k}), device="cpu")
    with pytest.raises(ValueError, match=r"holds weights the model does not have: model\.layers\.7\.extra"):
        load_hf_model(folder("extra", {**w, "model.layers.7.extra": torch.zeros(2)}), device="cpu")
    q = "model.layers.0.self_attn.q_proj.weight"
    with pytest.raises(ValueError, match=r"holds weights of the wrong shape: model\.layers\.0\.self_attn\.q_proj"
                                         r"\.weight \(\[16, 32\] in the file, \[32, 32\] in the model\)") as e:
        load_hf_model(folder("shape", {**w, q: torch.zeros(16, 32)}), device="cpu")
    assert "above report" not in str(e.value)


# ------------------------------------------------------------------ item 8: RoPE scaling keys


def _rope_keys(**kv):
    def extra(w):
        for k, v in kv.items():
            key = f"llama.rope.scaling.{k}"
            if isinstance(v, str):
                w.add_string(key, v)
            elif isinstance(v, int):
                w.add_uint32(key, v)
            else:
                w.add_float32(key, v)
    return extra


@pytest.mark.parametrize("rope", [{"rope_type": "linear", "factor": 4.0},
                                  {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}])
def test_a_gguf_rope_scaling_is_applied_as_shipped(tmp_path, rope):
    src = tiny_llama(tmp_path / "scaled", max_pos=64, rope_parameters={**rope, "rope_theta": 10000.0})
    keys = {"type": rope["rope_type"], "factor": rope["factor"]}
    if "original_max_position_embeddings" in rope:
        keys["original_context_length"] = rope["original_max_position_embeddings"]
    f = make_gguf(src, tmp_path / "scaled.gguf", extra=_rope_keys(**keys))
    a, b = load_hf_model(src, device="cpu"), load_hf_model(f, device="cpu")
    assert b.rope_type == rope["rope_type"] == a.rope_type
    x = torch.randint(2, 512, (1, 60), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(b(x), a(x), rtol=1e-5, atol=1e-5)
        plain = load_hf_model(make_gguf(src, tmp_path / "plain.gguf"), device="cpu")
        assert not torch.allclose(plain(x), a(x), atol=1e-4)  # the scaling changes the logits


@pytest.mark.parametrize("keys,msg", [
    ({"type": "linear", "factor": math.nan}, r"rope\.scaling\.factor must be a finite number > 0, got nan"),
    ({"type": "linear", "factor": -4.0}, r"rope\.scaling\.factor must be a finite number > 0, got -4"),
    ({"type": "linear", "factor": 0.5}, r"rope\.scaling\.factor must be >= 1"),
    ({"type": "ntk-by-parts", "factor": 4.0}, r"rope\.scaling\.type 'ntk-by-parts' is not a RoPE scaling"),
    ({"type": "linear"}, r"rope\.scaling\.factor is missing"),
    ({"type": "yarn", "factor": 4.0}, r"original_context_length is missing"),
    ({"type": "longrope", "factor": 4.0}, r"'longrope' needs factors"),
    ({"type": "yarn", "factor": 4.0, "original_context_length": 16, "yarn_log_multiplier": 0.1},
     r"yarn_log_multiplier is set, and relpos cannot apply it"),
])
def test_an_invalid_gguf_rope_scaling_is_refused_by_name(tiny, tmp_path, keys, msg):
    src, _ = tiny
    f = make_gguf(src, tmp_path / "bad.gguf", extra=_rope_keys(**keys))
    with pytest.raises(ValueError, match=msg) as e:
        load_hf_model(f, device="cpu")
    assert str(e.value).startswith(f"--hf-model {str(f)!r}") and "config.json" not in str(e.value)


# ------------------------------------------------------------------ minor: messages


def test_an_out_of_range_bos_id_is_one_line(tiny, tmp_path):
    src, _ = tiny
    f = make_gguf(src, tmp_path / "bos.gguf", bos=10 ** 6)
    for call in (lambda: tokenizer_file(f, cache_dir=str(tmp_path / "c" / "corpora")),
                 lambda: load_hf_model(f, device="cpu")):
        with pytest.raises(ValueError, match=r"tokenizer\.ggml\.bos_token_id is 1000000, outside the vocabulary "
                                             r"of 512 tokens"):
            call()


@pytest.mark.parametrize("arch", ["gpt2", "mamba", "bloom"])
def test_non_rotary_gguf_architectures_are_named(tiny, tmp_path, arch):
    src, _ = tiny
    f = make_gguf(src, tmp_path / f"{arch}.gguf", arch=arch)
    with pytest.raises(ValueError, match=f"is a '{arch}' model, not a Llama-family model"):
        load_hf_model(f, device="cpu")


def test_gguf_refusals_name_the_file_not_config_json(tiny, tmp_path):
    src, _ = tiny

    def nan_theta(w):
        w.kv_data[0].pop("llama.rope.freq_base", None)
        w.add_rope_freq_base(float("nan"))

    f = make_gguf(src, tmp_path / "theta.gguf", extra=nan_theta)
    with pytest.raises(ValueError, match="rope_theta must be a finite number") as e:
        load_config(model_source(f))
    assert str(f) in str(e.value) and "config.json" not in str(e.value)


def test_merges_out_of_proportion_to_the_vocabulary_are_refused(tiny, tmp_path):
    src, _ = tiny
    f = make_gguf(src, tmp_path / "merges.gguf", extra=lambda w: w.add_token_merges(["a b"] * 5000))
    with pytest.raises(ValueError, match="tokenizer.ggml.merges has 5000 entries for 512 tokens"):
        load_config(model_source(f))


def test_a_gguf_dry_run_reads_the_header_once_and_no_tensor(tiny, tmp_path, monkeypatch, capsys):
    """``--dry-run`` of a GGUF read its metadata with ``GGUFReader`` twice (81 s for a real file): now one
    bounded parse, the RoPE scaling as shipped in the plan, and no tensor data touched."""
    import relpos.pretrained.gguf as hg
    from relpos.cli import main

    src = tiny_llama(tmp_path / "lin", max_pos=64, rope_parameters={"rope_type": "linear", "factor": 4.0,
                                                                     "rope_theta": 10000.0})
    f = make_gguf(src, tmp_path / "lin.gguf", extra=_rope_keys(type="linear", factor=4.0))
    corpus = tmp_path / "c.txt"
    corpus.write_text("some text\n" * 100)
    monkeypatch.setattr(gguf.GGUFReader, "__init__", lambda self, *a, **k: 1 / 0)
    monkeypatch.setattr(gguf, "dequantize", lambda *a, **k: 1 / 0)
    parses = []
    real = hg._parse
    monkeypatch.setattr(hg, "_parse", lambda *a: parses.append(1) or real(*a))
    hg._CACHE.clear()
    rc = main(["compare", "--hf-model", str(f), "--corpus", str(corpus), "--dry-run", "--device", "cpu",
               "--out", str(tmp_path / "o")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "native rope_type linear" in out and len(parses) == 1 and not (tmp_path / "o").exists()
