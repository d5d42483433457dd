"""docs/use.md's code runs as written (issue 48): the layer example, the Hugging Face swap and the fine-tune, save
and reload recipe (with a tiny random Llama saved here in place of a checkpoint path). The nanoGPT block is run by
tests/nn/test_use_doc.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

DOC = Path(__file__).resolve().parents[2] / "docs" / "use.md"


def block(marker: str) -> str:
    found = [b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S) if b.startswith(f"# {marker}\n")]
    assert len(found) == 1, marker
    return found[0]


def run(marker: str, ns: dict) -> dict:
    exec(compile(block(marker), f"{DOC}:{marker}", "exec"), ns)
    return ns


def test_layer_example_runs_as_written():
    run("layer example", {})


def _tiny_llama():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return transformers.LlamaForCausalLM(cfg).eval()


def test_hf_swap_runs_as_written(tmp_path):
    _tiny_llama().save_pretrained(tmp_path / "llama")
    code = block("hf: swap the scheme").replace('"path/to/a/llama"', repr(str(tmp_path / "llama")))
    ids = torch.randint(3, 97, (2, 6))
    ns = {"input_ids": ids, "mask": torch.ones_like(ids)}
    exec(compile(code, str(DOC), "exec"), ns)
    assert ns["out"].shape == (2, 56) and ns["model"].config._attn_implementation == "relpos"


def test_hf_fine_tune_save_and_reload_runs_as_written(tmp_path, monkeypatch):
    import relpos.hf

    monkeypatch.chdir(tmp_path)
    model = _tiny_llama()
    g = torch.Generator().manual_seed(0)
    loader = [{"input_ids": torch.randint(3, 97, (2, 16), generator=g),
               "attention_mask": torch.ones(2, 16, dtype=torch.long)} for _ in range(3)]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ns = run("hf: fine-tune, save, reload", {"model": model, "loader": loader, "torch": torch, "relpos": relpos})
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items() if k in before)  # it trained
    ids = loader[0]["input_ids"]
    with torch.no_grad():
        want = model.eval()(ids).logits
        got = ns["model"](ids).logits
    torch.testing.assert_close(got, want, atol=0, rtol=0)
