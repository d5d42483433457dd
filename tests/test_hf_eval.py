"""Hugging Face checkpoints: RoPE-scaling conformance with relpos, and the zero-shot evaluation (nothing downloaded)."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from relpos.encodings.rope import RoPE  # noqa: E402
from relpos.pretrained.evaluate import (HF_SCALINGS, hf_rope_parameters, load_hf_model,  # noqa: E402
                                        relpos_rope_options, run_hf_job, run_hf_sweep)
from relpos.pretrained.scalings import APPLIED_SCALINGS  # noqa: E402
from tests.data_helpers import prose, tiny_llama  # noqa: E402

L0 = 64


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_llama(tmp_path_factory.mktemp("llama") / "tiny-llama", max_pos=L0)


def _qk_and_probs(model, x):
    """Layer-0 projected q, k (B, H, N, D) and HF's own layer-0 attention probabilities (B, H, N, N)."""
    attn = model.hf.model.layers[0].self_attn
    got = {}
    hooks = [attn.q_proj.register_forward_hook(lambda m, i, o: got.__setitem__("q", o)),
             attn.k_proj.register_forward_hook(lambda m, i, o: got.__setitem__("k", o))]
    try:
        out = model.hf(input_ids=x, output_attentions=True, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    cfg = model.config
    B, N = x.shape
    D = cfg.head_dim
    q = got["q"].view(B, N, -1, D).transpose(1, 2)
    k = got["k"].view(B, N, -1, D).transpose(1, 2)
    k = k.repeat_interleave(cfg.num_attention_heads // cfg.num_key_value_heads, dim=1)
    return q, k, out.attentions[0]


@pytest.mark.parametrize("scaling", APPLIED_SCALINGS)
@pytest.mark.parametrize("factor", [1.0, 2.5, 4.0])
def test_relpos_rope_gives_the_hf_models_attention_logits(model_dir, scaling, factor):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    model = load_hf_model(model_dir, device="cpu", attn_implementation="eager").set_scaling(scaling, factor)
    for N in (40, 3 * L0):  # inside and beyond the original context (dynamic NTK changes beyond it)
        x = torch.randint(0, 512, (2, N), generator=torch.Generator().manual_seed(N))
        with torch.no_grad():
            q, k, hf_probs = _qk_and_probs(model, x)
            pos = torch.arange(N)[None]
            cos, sin = model.hf.model.rotary_emb(q, pos)
            hq, hk = apply_rotary_pos_emb(q, k, cos, sin)
        D = q.shape[-1]
        hf_logits = hq @ hk.transpose(-1, -2) / math.sqrt(D)
        enc = RoPE(**relpos_rope_options(model.config, scaling, factor, L0))
        rq = enc.rotate(q, pos, is_query=True, seq_len=N)
        rk = enc.rotate(k, pos, is_query=False, seq_len=N)
        ours = rq @ rk.transpose(-1, -2) / math.sqrt(D)
        scale = hf_logits.abs().max()
        torch.testing.assert_close(ours, hf_logits, rtol=0, atol=2e-5 * float(scale) + 1e-6)
        # ... and the probabilities the HF model itself computed in its forward pass
        causal = torch.ones(N, N, dtype=torch.bool).tril()
        probs = torch.softmax(ours.masked_fill(~causal, float("-inf")), dim=-1)
        torch.testing.assert_close(probs, hf_probs, rtol=0, atol=2e-5)
        # the float64 reference of relpos agrees with HF too
        ref = enc.reference_rotate(q[:1, :1], pos, is_query=True, seq_len=N).float()
        torch.testing.assert_close(ref, hq[:1, :1], rtol=0, atol=2e-5 * float(q.abs().max()) + 1e-6)


def test_rope_parameters_describe_one_scaling(model_dir):
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
    assert hf_rope_parameters(cfg, "none", 3.0) == {"rope_type": "default", "rope_theta": 10000.0}
    y = hf_rope_parameters(cfg, "yarn", 3.0)
    assert y["factor"] == 3.0 and y["original_max_position_embeddings"] == L0
    o = relpos_rope_options(cfg, "llama3", 8.0)
    assert o["scaling"] == "llama3" and o["original_max_len"] == L0 and o["head_dim"] == 8
    with pytest.raises(ValueError, match="scaling must be one of"):
        hf_rope_parameters(cfg, "ntk-by-parts", 2.0)


def test_hf_sweep_end_to_end_resumable(model_dir, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(prose(400_000, seed=11))
    spec = {"model": str(model_dir), "corpus": str(corpus), "factors": [1, 2], "eval_tokens": 1024, "blocks": 16,
            "passkey_n": 2, "passkey_depths": [0.0, 1.0], "device": "cpu", "cache_dir": str(tmp_path / "cache")}
    logs = []
    runs = run_hf_sweep(tmp_path / "out", spec, log=logs.append)
    assert len(runs) == 2 * len(HF_SCALINGS)
    assert {(r["scheme"], r["variant"], r["task"]) for r in runs} == {  # "native": the checkpoint as shipped
        ("hf:tiny-llama", None if s == "none" else s, t) for s in HF_SCALINGS for t in ("lm", "passkey")}
    lm = {r["variant"]: r for r in runs if r["task"] == "lm"}
    for r in lm.values():
        assert r["train_len"] == L0
        protos = {(m["protocol"], m["eval_len"]) for m in r["measurements"]}
        assert {("window", L0), ("window", 2 * L0), ("fixed_target", L0), ("fixed_target", 2 * L0)} <= protos
        for m in r["measurements"]:
            # loss per token, bits per byte = loss / ln 2 / (bytes per token of the validation split)
            assert m["bpb"] == pytest.approx(_corpus(spec).bits_per_byte(m["loss"]))
    # at 1x every scaling is the plain model (factor 1)
    w1 = {v: next(m["loss"] for m in r["measurements"] if m["protocol"] == "window" and m["eval_len"] == L0)
          for v, r in lm.items()}
    assert max(w1.values()) - min(w1.values()) < 1e-5
    # at 2x linear differs from none
    w2 = {v: next(m["loss"] for m in r["measurements"] if m["protocol"] == "window" and m["eval_len"] == 2 * L0)
          for v, r in lm.items()}
    assert abs(w2["linear"] - w2[None]) > 1e-6
    pk = [r for r in runs if r["task"] == "passkey"][0]
    assert {m["bucket_start"] for m in pk["measurements"]} == {0, 100, -1}
    assert all(0 <= m["accuracy"] <= 1 for m in pk["measurements"])
    # a second run finds everything stored
    logs.clear()
    again = run_hf_sweep(tmp_path / "out", spec, log=logs.append)
    jobs = [line for line in logs if line.startswith("hf/")]
    assert len(again) == len(runs) and len(jobs) == len(HF_SCALINGS) and all("skipped" in line for line in jobs)
    assert any("documents" in line for line in logs) and any(line.startswith("corpus ") for line in logs)


def _corpus(spec):
    from relpos.pretrained.evaluate import HFEvalSpec, _lm_task

    return _lm_task(HFEvalSpec(**spec), L0, [L0, 2 * L0]).corpus


def test_hf_job_matches_the_store_format(model_dir, tmp_path):
    from relpos.compare.store import Store

    corpus = tmp_path / "c.txt"
    corpus.write_text(prose(300_000, seed=2))
    spec = {"model": str(model_dir), "corpus": str(corpus), "factors": [1], "eval_tokens": 512, "passkey_n": 0,
            "device": "cpu", "cache_dir": str(tmp_path / "cache")}
    res = run_hf_job(spec, "yarn")
    assert res["job"] == "hf/tiny-llama/yarn" and [r["task"] for r in res["runs"]] == ["lm"]
    with Store(tmp_path / "s" / "results.sqlite") as st:
        st.bind("abc", {})
        assert st.write_job("abc", res)
        (run,) = st.runs("abc")
        assert run["variant"] == "yarn" and len(run["measurements"]) == len(res["runs"][0]["measurements"])


def test_hf_bad_input(model_dir, tmp_path):
    with pytest.raises(ValueError, match="not a model folder"):
        load_hf_model(tmp_path)
    bare = tiny_llama(tmp_path / "bare", tokenizer=False)
    corpus = tmp_path / "c.txt"
    corpus.write_text(prose(300_000))
    with pytest.raises(ValueError, match="no tokenizer.json"):
        run_hf_job({"model": str(bare), "corpus": str(corpus), "device": "cpu",
                    "cache_dir": str(tmp_path / "cache")}, "none")
    small = tmp_path / "small.txt"
    small.write_text(prose(3000))
    with pytest.raises(ValueError, match="too small"):
        run_hf_sweep(tmp_path / "out", {"model": str(model_dir), "corpus": str(small), "device": "cpu",
                                        "cache_dir": str(tmp_path / "cache2")})
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache2").exists()
    with pytest.raises(ValueError, match="unknown scalings"):
        run_hf_job({"model": str(model_dir), "corpus": str(corpus), "scalings": ["ntk"]}, "ntk")


def test_hf_command_line_writes_report_and_heatmaps(model_dir, tmp_path, monkeypatch, capsys):
    from relpos.commands.hf import main

    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "c.jsonl"
    import json

    corpus.write_text("".join(json.dumps({"body": prose(2000, seed=s)}) + "\n" for s in range(200)))
    out = tmp_path / "out"
    argv = ["--hf-model", str(model_dir), "--corpus", str(corpus), "--text-field", "body", "--out", str(out),
            "--scalings", "none,yarn", "--hf-factors", "1,2", "--eval-tokens", "512", "--passkey", "1",
            "--device", "cpu", "--no-progress"]
    assert main(argv) == 0
    text = (out / "hf_report.md").read_text()
    assert "## hf:tiny-llama" in text and "| yarn |" in text and "passkey, none" in text
    assert (out / "passkey_tiny-llama_none.png").stat().st_size > 1000
    assert (out / "passkey_tiny-llama_yarn.png").is_file()
    assert main(argv) == 0 and "already stored, skipped" in capsys.readouterr().err
    bad = tmp_path / "bad_out"
    assert main(argv[:2] + ["--corpus", str(corpus), "--out", str(bad)]) == 2  # text field 'text' is missing
    assert "no text field 'text'" in capsys.readouterr().err and not bad.exists()


def test_plan_counts_every_forward_pass_at_each_length(model_dir, tmp_path):
    """``plan()["windows"]`` (what --dry-run's time estimate charges L**2 attention for) is what a job runs."""
    from relpos.pretrained.evaluate import plan

    corpus = tmp_path / "c.txt"
    corpus.write_text(prose(300_000, seed=3))
    spec = {"model": str(model_dir), "corpus": str(corpus), "factors": [2, 4], "eval_tokens": 600,
            "passkey_n": 2, "passkey_depths": [0.0, 1.0], "device": "cpu", "scalings": ["none"],
            "cache_dir": str(tmp_path / "cache")}
    model = load_hf_model(model_dir, device="cpu")
    seen: dict[int, int] = {}

    def count(_module, args, kwargs):
        x = kwargs.get("input_ids", args[0] if args else None)
        seen[x.shape[1]] = seen.get(x.shape[1], 0) + x.shape[0]

    model.hf.model.register_forward_pre_hook(count, with_kwargs=True)
    res = run_hf_job(spec, "none", model=model)
    assert [r["task"] for r in res["runs"]] == ["lm", "passkey"]
    p = plan(spec, model.base_config)
    assert p["windows"] == seen == {128: 2 * 2 + 16 + 4, 256: 2 + 16 + 4}
    assert p["tokens"]["lm"] + p["tokens"]["passkey"] == sum(n * w for n, w in seen.items())
