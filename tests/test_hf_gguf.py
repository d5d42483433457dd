"""``--hf-model model.gguf``: a GGUF file (llama.cpp, Ollama) loaded through transformers, tokenizer from the file.

The GGUF file is written by the test with the ``gguf`` package's writer from a
tiny random Llama (q/k permuted as llama.cpp's converter does), so the loaded
model must give the source model's logits.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
gguf = pytest.importorskip("gguf")

from relpos.pretrained.evaluate import load_hf_model  # noqa: E402
from relpos.pretrained.load import tokenizer_file  # noqa: E402
from tests.data_helpers import prose, tiny_llama  # noqa: E402


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's q/k row order (convert_hf_to_gguf.py: LlamaModel.permute)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(src: Path, dest: Path, dtype=np.float32) -> Path:
    """The Llama checkpoint folder ``src`` (safetensors + tokenizer.json) as one GGUF file."""
    from safetensors.numpy import load_file

    cfg = json.loads((src / "config.json").read_text())
    tok = json.loads((src / "tokenizer.json").read_text())
    w = load_file(str(src / "model.safetensors"))
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    wr = gguf.GGUFWriter(str(dest), "llama")
    wr.add_name("tiny-llama")
    wr.add_context_length(cfg["max_position_embeddings"])
    wr.add_embedding_length(cfg["hidden_size"])
    wr.add_block_count(cfg["num_hidden_layers"])
    wr.add_feed_forward_length(cfg["intermediate_size"])
    wr.add_head_count(H)
    wr.add_head_count_kv(KV)
    wr.add_rope_dimension_count(cfg["head_dim"])
    wr.add_rope_freq_base(float(cfg["rope_parameters"]["rope_theta"]))
    wr.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    wr.add_vocab_size(cfg["vocab_size"])
    vocab = [t for t, _ in sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])]
    special = {a["content"] for a in tok.get("added_tokens", [])}
    types = [3 if t in special else 1 for t in vocab]
    pad = cfg["vocab_size"] - len(vocab)  # the model's vocabulary is larger than the tokenizer's, as often
    vocab += [f"[PAD{i}]" for i in range(pad)]
    types += [5] * pad  # unused
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre("default")
    wr.add_token_list(vocab)
    wr.add_token_types(types)
    wr.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]])
    wr.add_bos_token_id(cfg["bos_token_id"])
    wr.add_eos_token_id(cfg["eos_token_id"])
    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    wr.add_tensor("token_embd.weight", w["model.embed_tokens.weight"].astype(dtype))
    for i in range(cfg["num_hidden_layers"]):
        for hf, gg in names.items():
            t = w[f"model.layers.{i}.{hf}.weight"]
            if gg == "attn_q":
                t = _permute(t, H)
            elif gg == "attn_k":
                t = _permute(t, KV)
            wr.add_tensor(f"blk.{i}.{gg}.weight", t.astype(np.float32 if t.ndim == 1 else dtype))
    wr.add_tensor("output_norm.weight", w["model.norm.weight"].astype(np.float32))
    wr.add_tensor("output.weight", w["lm_head.weight"].astype(dtype))
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return dest


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    src = tiny_llama(root / "tiny", max_pos=64)
    return src, write_gguf(src, root / "tiny.gguf")


def test_gguf_loads_as_the_source_model(pair, tmp_path):
    src, path = pair
    a = load_hf_model(src, device="cpu")
    b = load_hf_model(path, device="cpu")
    assert b.name == "tiny" and b.original == 64 and b.rope_type == "default"
    x = torch.randint(2, 512, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(b(x), a(x), rtol=1e-5, atol=1e-5)
    bf = load_hf_model(path, device="cpu", dtype="bfloat16")  # dequantised to the chosen dtype
    assert next(bf.hf.parameters()).dtype == torch.bfloat16


def test_gguf_tokenizer_comes_from_the_file(pair, tmp_path):
    from tokenizers import Tokenizer

    src, path = pair
    got = Tokenizer.from_file(tokenizer_file(path, cache_dir=str(tmp_path / "cache" / "corpora")))
    want = Tokenizer.from_file(str(src / "tokenizer.json"))
    text = prose(3000, seed=9)
    assert got.encode(text, add_special_tokens=False).ids == want.encode(text, add_special_tokens=False).ids
    assert (tmp_path / "cache" / "gguf-tokenizers").is_dir()


def test_compare_with_a_gguf_file(pair, tmp_path, monkeypatch, capsys):
    from relpos.cli import main

    src, path = pair
    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "c.txt"
    corpus.write_text(prose(300_000, seed=4))
    out = tmp_path / "o"
    argv = ["compare", "--hf-model", str(path), "--corpus", str(corpus), "--out", str(out), "--device", "cpu",
            "--hf-factors", "1,2", "--eval-tokens", "256", "--scalings", "native,yarn", "--passkey", "0"]
    assert main(argv) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert "de-quantizing" not in err and "%|" not in err  # no progress bars off a terminal
    text = (out / "hf_report.md").read_text()
    assert "## hf:tiny" in text and "| native (default, as shipped) |" in text and "| yarn |" in text
    # the same numbers as the folder it was made from
    out2 = tmp_path / "o2"
    assert main(argv[:2] + [str(src)] + argv[3:6] + [str(out2)] + argv[7:]) == 0
    t2 = (out2 / "hf_report.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| native")]
    assert rows == [line for line in t2.splitlines() if line.startswith("| native")]


def test_a_file_that_is_not_gguf_is_named(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(ValueError, match="does not read as a GGUF model"):
        load_hf_model(bad, device="cpu")
    txt = tmp_path / "weights.bin"
    txt.write_bytes(b"x")
    with pytest.raises(ValueError, match="not a .gguf file"):
        load_hf_model(txt, device="cpu")
