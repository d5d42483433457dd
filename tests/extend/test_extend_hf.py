"""``relpos extend --hf-model`` (issue 50, part B) on tiny random Llama and Qwen2 checkpoints written by the test
(and a GGUF file when the gguf package is there): the three rows, the loadable folder whose transformers logits
equal relpos's evaluation, the swapped scheme restored by relpos's loader, resume after a kill. No network."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from relpos.extend import hf as ext  # noqa: E402
from relpos.extend.hf import hf_dry_run_lines, load_extended, run_hf_extend  # noqa: E402
from relpos.extend.hf_spec import HFExtendSpec  # noqa: E402
from tests.data_helpers import prose, tiny_llama, train_tokenizer  # noqa: E402

L0 = 32


def tiny_qwen2(folder, *, max_pos=L0, vocab_size=512):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(1)
    cfg = Qwen2Config(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_pos,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, bos_token_id=0,
                      eos_token_id=1, use_sliding_window=False, tie_word_embeddings=True)
    folder.mkdir(parents=True)
    Qwen2ForCausalLM(cfg).save_pretrained(str(folder))
    train_tokenizer(folder / "tokenizer.json", vocab_size=vocab_size)
    return folder


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("ext-hf")
    corpus = root / "corpus.txt"
    corpus.write_text(prose(400_000, seed=11))
    return {"llama": tiny_llama(root / "llama", max_pos=L0), "qwen2": tiny_qwen2(root / "qwen2"),
            "corpus": corpus, "cache": root / "cache"}


def _spec(setup, out, model="llama", **kw):
    kw = {"steps": 4, "lr": 1e-3, "eval_tokens": 512, "ckpt_every": 2, **kw}
    return HFExtendSpec(model=str(setup[model] if model in setup else model), corpus=str(setup["corpus"]),
                        out=str(out), cache_dir=str(setup["cache"]), **kw)


def _quiet(_):
    pass


@pytest.mark.parametrize("arch,scaling", [("llama", "yarn"), ("qwen2", "yarn"), ("llama", "dynamic"),
                                          ("llama", "linear")])
def test_three_rows_and_a_folder_transformers_loads_with_the_same_logits(setup, tmp_path, arch, scaling):
    from transformers import AutoModelForCausalLM

    from relpos.pretrained.evaluate import load_hf_model, run_hf_job

    spec = _spec(setup, tmp_path / "o", model=arch, scaling=scaling)
    data = run_hf_extend(spec, log=_quiet, progress=False)
    assert list(data["rows"]) == ["shipped", "zero-shot", "fine-tuned"]
    assert set(data["rows"]["fine-tuned"]["lengths"]) == {str(L0), str(4 * L0)}
    # fine-tuning changed the model; the scaling changed it beyond L0
    ft, zs = data["rows"]["fine-tuned"]["lengths"], data["rows"]["zero-shot"]["lengths"]
    assert ft[str(4 * L0)]["loss"] != zs[str(4 * L0)]["loss"]
    folder = tmp_path / "o" / "model"
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["rope_parameters"]["rope_type"] == scaling and cfg["rope_parameters"]["factor"] == 4.0
    hf = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True).eval()
    ours = load_hf_model(folder, device="cpu")
    x = torch.randint(0, 512, (2, 4 * L0), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(ours(x), hf(input_ids=x).logits.float(), rtol=0, atol=1e-5)
    # relpos's evaluation of the saved folder is the fine-tuned row
    job = run_hf_job(spec.eval_spec() | {"model": str(folder), "context": L0}, "native", progress=False)
    lm = next(r for r in job["runs"] if r["task"] == "lm")
    got = {str(m["eval_len"]): m["loss"] for m in lm["measurements"] if m["protocol"] == "window"}
    assert got == pytest.approx({n: v["loss"] for n, v in ft.items()}, abs=1e-6)
    assert "transformers.AutoModelForCausalLM.from_pretrained" in (folder / "README.md").read_text()
    assert "fine-tuned" in (tmp_path / "o" / "report.md").read_text()


def test_swapped_scheme_is_restored_by_relpos_loader(setup, tmp_path):
    data = run_hf_extend(_spec(setup, tmp_path / "a", scheme="alibi"), log=_quiet, progress=False)
    folder = tmp_path / "a" / "model"
    assert json.loads((folder / "relpos-scheme.json").read_text())["scheme"] == "alibi"
    assert "load_extended" in (folder / "README.md").read_text()
    model = load_extended(folder)
    assert model.config._attn_implementation == "relpos"
    from relpos.pretrained.evaluate import run_hf_job

    job = run_hf_job(_spec(setup, tmp_path / "x").eval_spec() | {"context": L0}, "native",
                     model=ext._wrap(model, "m", L0), progress=False)
    lm = next(r for r in job["runs"] if r["task"] == "lm")
    got = {str(m["eval_len"]): m["loss"] for m in lm["measurements"] if m["protocol"] == "window"}
    assert got == pytest.approx({n: v["loss"] for n, v in data["rows"]["fine-tuned"]["lengths"].items()}, abs=1e-6)
    assert "the change cost" in data["report"]


def test_killed_fine_tuning_resumes_to_the_same_model(setup, tmp_path, monkeypatch):
    clean = run_hf_extend(_spec(setup, tmp_path / "c", steps=6), log=_quiet, progress=False)
    real, calls = ext._chunked_loss, []

    def dies(*a, **k):
        calls.append(1)
        if len(calls) == 4:
            raise RuntimeError("killed")
        return real(*a, **k)

    monkeypatch.setattr(ext, "_chunked_loss", dies)
    with pytest.raises(RuntimeError):
        run_hf_extend(_spec(setup, tmp_path / "k", steps=6), log=_quiet, progress=False)
    monkeypatch.setattr(ext, "_chunked_loss", real)
    assert json.loads((tmp_path / "k" / "train-state.json").read_text())["step"] == 2
    lines = []
    again = run_hf_extend(_spec(setup, tmp_path / "k", steps=6), log=lines.append, progress=False)
    assert any("resuming fine-tuning at step 2" in s for s in lines)
    assert any("shipped: already measured" in s for s in lines)
    assert again["train"]["losses"] == clean["train"]["losses"]
    assert again["rows"]["fine-tuned"] == {**clean["rows"]["fine-tuned"],
                                           "eval_seconds": again["rows"]["fine-tuned"]["eval_seconds"]}
    # the training checkpoints are removed once the model is saved; a rerun changes nothing
    assert not list((tmp_path / "k").glob("train-state*"))
    lines = []
    third = run_hf_extend(_spec(setup, tmp_path / "k", steps=6), log=lines.append, progress=False)
    assert third["rows"] == again["rows"] and not any("resuming" in s for s in lines)


def test_fine_tuning_steps_flush_subnormal_floats_and_restore_the_setting(setup, tmp_path, monkeypatch):
    """Each fine-tuning step runs with subnormals flushed, as relpos's trainer runs its own (a CPU's slow path
    otherwise: ALiBi's chunked call took 2.8x as long at N = 2048); the caller's setting comes back after."""
    from relpos.training.denormals import flushing

    real, seen = ext._chunked_loss, []
    monkeypatch.setattr(ext, "_chunked_loss", lambda *a, **k: seen.append(flushing()) or real(*a, **k))
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush subnormal floats")
    torch.set_flush_denormal(False)
    run_hf_extend(_spec(setup, tmp_path / "f", steps=2), log=_quiet, progress=False)
    assert seen[:2] == [True, True]
    assert not flushing()


def test_dry_run_and_refusals(setup, tmp_path):
    lines = hf_dry_run_lines(_spec(setup, tmp_path / "d", steps=10, batch_size=2))
    text = "\n".join(lines)
    assert "10 steps of 2 x 128 tokens = 2,560 tokens" in text and "hours" in text
    assert not (tmp_path / "d").exists()
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "mine.txt").write_text("keep")
    from relpos.outdir import OutputDirError

    with pytest.raises(OutputDirError):
        run_hf_extend(_spec(setup, tmp_path / "f"), log=_quiet, progress=False)
    with pytest.raises(ValueError, match="--scaling"):
        _spec(setup, tmp_path / "g", scaling="longrope")
    with pytest.raises(ValueError, match="--scheme"):
        _spec(setup, tmp_path / "g", scheme="sinusoidal")
    run_hf_extend(_spec(setup, tmp_path / "h", steps=0), log=_quiet, progress=False)
    with pytest.raises(ValueError, match="other settings"):
        run_hf_extend(_spec(setup, tmp_path / "h", steps=1), log=_quiet, progress=False)


def test_gguf_input(setup, tmp_path):
    pytest.importorskip("gguf")
    from tests.test_hf_gguf import write_gguf

    g = write_gguf(setup["llama"], tmp_path / "tiny.gguf")
    data = run_hf_extend(_spec(setup, tmp_path / "o", model=str(g), steps=2), log=_quiet, progress=False)
    assert (tmp_path / "o" / "model" / "config.json").is_file() and "fine-tuned" in data["rows"]
    from transformers import AutoModelForCausalLM

    assert "quantization_config" not in json.loads((tmp_path / "o" / "model" / "config.json").read_text())
    AutoModelForCausalLM.from_pretrained(str(tmp_path / "o" / "model"), local_files_only=True)
    shipped = data["rows"]["shipped"]["lengths"][str(L0)]["loss"]
    src = run_hf_extend(_spec(setup, tmp_path / "p", steps=0), log=_quiet, progress=False)
    assert shipped == pytest.approx(src["rows"]["shipped"]["lengths"][str(L0)]["loss"], abs=1e-4)


@pytest.mark.parametrize("state", [{"dir": "../victim", "step": 2, "losses": []},
                                   {"dir": "train-state-2/../../victim", "step": 2, "losses": []},
                                   {"dir": "train-state-2", "step": "2", "losses": []}, "not json"])
def test_a_training_state_naming_another_folder_is_refused(tmp_path, state):
    """A train-state.json that names anything but a train-state-<step> folder of the run is refused by name, so
    a resume never loads from it and a later save never removes it (the folder it names stays)."""
    out, victim = tmp_path / "run", tmp_path / "victim"
    out.mkdir()
    victim.mkdir()
    (victim / "keep.txt").write_text("mine\n")
    (out / "train-state-2").mkdir()
    (out / "train-state.json").write_text(state if isinstance(state, str) else json.dumps(state))
    with pytest.raises(ValueError, match="train-state.json: not a training state of relpos extend"):
        ext._state(out)
    assert (victim / "keep.txt").read_text() == "mine\n"


def test_a_training_state_of_the_run_is_read(tmp_path):
    out = tmp_path / "run"
    (out / "train-state-4").mkdir(parents=True)
    (out / "train-state.json").write_text(json.dumps({"dir": "train-state-4", "step": 4, "losses": [1.0]}))
    assert ext._state(out) == {"dir": "train-state-4", "step": 4, "losses": [1.0]}
    assert ext._state(tmp_path / "nothing-here") is None
