"""A checkpoint evaluated as shipped: the ``native`` row equals ``model(input_ids, labels=...)`` for every rope type.

Issue 31. Each tiny random Llama is built by the test, with larger-than-default
weights so that positions matter (the loss of a plain-RoPE reading of a llama3
or LongRoPE checkpoint differs from its own loss by far more than the tolerance).
"""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from relpos.pretrained.evaluate import HFCausalLM, load_hf_model  # noqa: E402
from relpos.pretrained.scalings import installed_rope_types  # noqa: E402
from relpos.tasks.base import IGNORE, token_losses  # noqa: E402
from tests.data_helpers import prose, train_tokenizer  # noqa: E402

L0 = 32
HD = 8  # head_dim
LONG = [1.0 + 0.25 * i for i in range(HD // 2)]
SHORT = [1.0 + 0.05 * i for i in range(HD // 2)]

#: rope_type -> (rope_parameters, max_position_embeddings)
ROPE_TYPES = {
    "default": ({"rope_type": "default", "rope_theta": 100.0}, L0),
    "linear": ({"rope_type": "linear", "rope_theta": 100.0, "factor": 2.0}, L0),
    "dynamic": ({"rope_type": "dynamic", "rope_theta": 100.0, "factor": 2.0}, L0),
    "yarn": ({"rope_type": "yarn", "rope_theta": 100.0, "factor": 4.0, "original_max_position_embeddings": L0},
             4 * L0),
    "longrope": ({"rope_type": "longrope", "rope_theta": 100.0, "short_factor": SHORT, "long_factor": LONG,
                  "original_max_position_embeddings": L0}, 4 * L0),
    "llama3": ({"rope_type": "llama3", "rope_theta": 100.0, "factor": 4.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": L0}, 4 * L0),
    "proportional": ({"rope_type": "proportional", "rope_theta": 100.0, "factor": 2.0,
                      "partial_rotary_factor": 0.5}, L0),
}


def sharp_llama(folder, rope_parameters: dict, max_pos: int, *, seed: int = 0, tokenizer: bool = False):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=HD, max_position_embeddings=max_pos,
                      rope_parameters=dict(rope_parameters), bos_token_id=0, eos_token_id=1, initializer_range=0.25)
    LlamaForCausalLM(cfg).save_pretrained(str(folder))
    if tokenizer:
        train_tokenizer(folder / "tokenizer.json", vocab_size=512)
    return folder


def test_every_installed_rope_type_is_covered():
    """A rope type that a newer transformers adds must get a conformance case here (or a refusal by name)."""
    assert installed_rope_types() <= set(ROPE_TYPES), installed_rope_types() - set(ROPE_TYPES)


def _as_shipped_loss(folder, x):
    """What a user of transformers gets: a fresh model, ``model(input_ids, labels=input_ids).loss``."""
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    with torch.no_grad():
        return float(m(input_ids=x, labels=x).loss)


def _relpos_loss(model: HFCausalLM, scaling: str, x):
    N = x.shape[1]
    y = torch.cat([x[:, 1:], torch.full_like(x[:, :1], IGNORE)], dim=1)  # next token; the last has none
    with torch.no_grad():
        m = model.set_scaling(scaling, max(1.0, N / model.original))
        return float(token_losses(m, x, y).nanmean())


@pytest.mark.parametrize("rope_type", sorted(ROPE_TYPES))
def test_native_row_is_the_checkpoint_as_shipped(rope_type, tmp_path, record_property):
    if rope_type not in installed_rope_types():
        pytest.skip(f"transformers here has no {rope_type}")
    rope, max_pos = ROPE_TYPES[rope_type]
    folder = sharp_llama(tmp_path / rope_type, rope, max_pos)
    model = load_hf_model(folder, device="cpu")
    assert model.rope_type == rope_type and model.original == L0
    diffs = {}
    for N in (L0 // 2, L0, 3 * L0):  # inside, at and beyond the original context (dynamic/longrope switch)
        x = torch.randint(2, 512, (2, N), generator=torch.Generator().manual_seed(N))
        shipped = _as_shipped_loss(folder, x)
        native = _relpos_loss(model, "native", x)
        plain = _relpos_loss(model, "none", x)
        assert native == pytest.approx(shipped, abs=2e-6), (N, native, shipped)
        diffs[N] = (native - shipped, plain - shipped)
    record_property("native_minus_shipped_and_plain_minus_shipped", diffs)
    print(rope_type, {N: (f"{a:.1e}", f"{b:.4f}") for N, (a, b) in diffs.items()})
    if rope_type in ("linear", "yarn", "longrope", "llama3", "proportional"):
        # the old reading (plain RoPE) is far from the checkpoint: the test above would catch it
        assert max(abs(b) for _, b in diffs.values()) > 1e-3


def test_native_is_the_first_row_and_plain_rope_is_named_none(tmp_path):
    from relpos.pretrained.scalings import HF_SCALINGS

    assert HF_SCALINGS[0] == "native"
    folder = sharp_llama(tmp_path / "l3", *ROPE_TYPES["llama3"])
    m = load_hf_model(folder, device="cpu")
    # the checkpoint's rotary embedding is its own (llama3), not plain RoPE
    assert m.hf.model.rotary_emb.rope_type == "llama3"
    m.set_scaling("none", 2.0)
    assert m.hf.model.rotary_emb.rope_type == "default"
    m.set_scaling("native", 2.0)
    assert m.hf.model.rotary_emb.rope_type == "llama3"


def test_hf_context_overrides_the_original_context(tmp_path):
    folder = sharp_llama(tmp_path / "d", *ROPE_TYPES["default"])
    assert load_hf_model(folder, device="cpu", original=16).original == 16
    with pytest.raises(ValueError, match="--hf-context"):
        load_hf_model(folder, device="cpu", original=0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_chunked_loss_equals_the_loss_from_full_logits(tmp_path, monkeypatch, dtype):
    import relpos.pretrained.evaluate as he

    folder = sharp_llama(tmp_path / "c", *ROPE_TYPES["llama3"])
    m = load_hf_model(folder, device="cpu", dtype=dtype)
    assert m.chunked
    monkeypatch.setattr(he, "_CHUNK_BYTES", 8 * 512 * 2 * 7)  # 7 positions per chunk: many chunks
    x = torch.randint(0, 512, (2, 50), generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 512, (2, 50), generator=torch.Generator().manual_seed(2))
    y[0, :9] = IGNORE
    with torch.no_grad():
        got = m.token_losses(x, y)
        lp = torch.log_softmax(m(x).double(), dim=-1)  # the plain way: full (B, N, V) logits
    want = -lp.gather(-1, y.clamp_min(0)[..., None])[..., 0]
    assert torch.isnan(got[0, :9]).all()
    # the same numbers up to the output layer's rounding (a chunk's matmul may block differently)
    tol = 1e-6 if dtype == "float32" else 5e-2
    torch.testing.assert_close(got[y != IGNORE], want[y != IGNORE], rtol=0, atol=tol)
    assert abs(float(got.nanmean()) - float(want[y != IGNORE].mean())) < tol / 10


# ------------------------------------------------------------------ command line in HF mode


@pytest.fixture(scope="module")
def l3(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    folder = sharp_llama(root / "l3", *ROPE_TYPES["llama3"], tokenizer=True)
    corpus = root / "c.txt"
    corpus.write_text(prose(400_000, seed=5))
    return folder, corpus


def _cli(argv, capsys):
    from relpos.cli import main

    rc = main(argv)
    o = capsys.readouterr()
    return rc, o.out, o.err


def test_dry_run_prints_the_plan_and_writes_nothing(l3, tmp_path, monkeypatch, capsys):
    folder, corpus = l3
    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "o"
    rc, so, se = _cli(["compare", "--hf-model", str(folder), "--corpus", str(corpus), "--out", str(out),
                       "--hf-factors", "1,2,4,8", "--max-eval-tokens", "128", "--dry-run"], capsys)
    assert rc == 0, se
    assert "llama3" in so and "L0 = 32" in so and "tokens per scaling" in so and "estimated time" in so
    assert "left out (above --max-eval-tokens 128): 256" in so
    assert not out.exists() and not (tmp_path / "cache").exists()


def test_passkey_zero_force_and_progress_only_on_a_terminal(l3, tmp_path, monkeypatch, capsys):
    folder, corpus = l3
    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "o"
    base = ["compare", "--hf-model", str(folder), "--corpus", str(corpus), "--out", str(out), "--device", "cpu",
            "--hf-factors", "1,2", "--eval-tokens", "256", "--scalings", "native,none"]
    rc, so, se = _cli(base + ["--passkey", "0"], capsys)
    assert rc == 0, se
    assert "passkey" not in so and "it/s" not in se and "%|" not in se  # not a terminal: no bars
    assert "documents" in se and "hash" in se and "Corpus:" in so
    assert "| native (llama3, as shipped) |" in so
    # another configuration: refused with the fix named, then --force moves the old one aside
    rc, so, se = _cli(base + ["--passkey", "1", "--eval-tokens", "320"], capsys)
    assert rc == 2 and "--force" in se
    assert "passkey is not evaluated: its prompt needs" in se  # lengths 32, 64 are too short for the prompt
    rc, so, se = _cli(base + ["--passkey", "1", "--eval-tokens", "320", "--force"], capsys)
    assert rc == 0, se
    assert list(out.glob("previous-*/results.sqlite"))
    # a new scaling evaluates only its own job
    rc, so, se = _cli(base[:-1] + ["native,none,yarn", "--passkey", "1", "--eval-tokens", "320"], capsys)
    assert rc == 0 and se.count("already stored, skipped") == 2 and "hf/l3/yarn:" in se


def test_progress_bar_never_passes_its_total(monkeypatch, capsys):
    from relpos.pretrained.evaluate import _Bar

    b = _Bar(3, "x", True)
    for _ in range(5):
        b.tick()
    assert b.bar.n == 3
    b.close()
    monkeypatch.setattr("sys.stderr.isatty", lambda: False, raising=False)
    assert _Bar(3, "x", None).bar is None


def test_lengths_above_max_eval_tokens_are_left_out_and_reported(l3):
    from relpos.pretrained.evaluate import plan

    folder, corpus = l3
    p = plan({"model": str(folder), "corpus": str(corpus), "factors": [1, 2, 4], "max_eval_tokens": 64})
    assert p["lengths"] == [32, 64] and p["left_out"] == [128] and p["rope_type"] == "llama3"
    with pytest.raises(ValueError, match="--max-eval-tokens"):
        plan({"model": str(folder), "corpus": str(corpus), "factors": [4], "max_eval_tokens": 64})
    assert math.isfinite(p["tokens"]["lm"])


def test_the_evaluation_runs_from_python_without_a_namespace(l3, tmp_path, monkeypatch, capsys):
    """The library takes typed values: the corpus spec from plain values, the evaluation from a spec dict;
    nothing below the command line is handed an argparse Namespace (the CLI gives the same report)."""
    import argparse

    from relpos.corpus.options import corpus_spec
    from relpos.pretrained import sweep

    folder, corpus = l3
    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    seen = []
    real_init = argparse.Namespace.__init__
    monkeypatch.setattr(argparse.Namespace, "__init__", lambda self, **kw: (seen.append(kw), real_init(self, **kw)))
    spec = {"model": str(folder), "corpus": corpus_spec(corpus), "device": "cpu", "factors": [1, 2],
            "eval_tokens": 256, "scalings": ["native", "none"], "passkey_n": 0}
    assert sweep.run_hf(spec, tmp_path / "py") == 0
    assert seen == []
    py = capsys.readouterr().out
    monkeypatch.setattr(argparse.Namespace, "__init__", real_init)
    rc, so, se = _cli(["compare", "--hf-model", str(folder), "--corpus", str(corpus), "--out", str(tmp_path / "cli"),
                       "--device", "cpu", "--hf-factors", "1,2", "--eval-tokens", "256", "--scalings", "native,none",
                       "--passkey", "0"], capsys)
    assert rc == 0, se
    assert (tmp_path / "py" / "hf_report.md").read_text() == (tmp_path / "cli" / "hf_report.md").read_text()
    assert "| native (llama3, as shipped) |" in py


def test_corpus_spec_takes_plain_values(tmp_path):
    from relpos.corpus.options import corpus_spec

    (tmp_path / "a.md").write_text("hello")
    assert corpus_spec(None) is None
    assert corpus_spec(tmp_path, glob="*.md", text_field="body")["glob"] == "*.md"
    with pytest.raises(ValueError, match="--tokenizer needs --corpus PATH"):
        corpus_spec(None, tokenizer="t.json")
    assert corpus_spec(None, tokenizer="t.json", tokenizer_alone=True) is None
