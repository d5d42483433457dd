"""--hf-model held to relpos's rules: no code from a model folder, the --out rule, bounded configs, clear errors.

Issue 29 items 1-3 and the Hugging Face parts of 13/14. Every model here is built
by the test (nothing downloaded).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from relpos.cli import main  # noqa: E402
from relpos.pretrained.load import check_config, load_config, model_source  # noqa: E402
from tests.data_helpers import prose, tiny_llama  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_llama(tmp_path_factory.mktemp("m") / "tiny", max_pos=64)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    p = tmp_path_factory.mktemp("c") / "c.txt"
    p.write_text(prose(300_000, seed=3))
    return p


def _evil(folder: Path, model_type: str, auto_map: bool = True) -> Path:
    folder.mkdir(parents=True)
    cfg = {"model_type": model_type, "architectures": ["EvilForCausalLM"], "vocab_size": 512, "hidden_size": 32,
           "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 64,
           "max_position_embeddings": 64}
    if auto_map:
        cfg["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig",
                           "AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}
    (folder / "config.json").write_text(json.dumps(cfg))
    for mod in ("configuration_evil", "modeling_evil"):
        marker = folder.parent / f"{folder.name}-{mod}.ran"
        (folder / f"{mod}.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                          "from transformers import PretrainedConfig as EvilConfig\n"
                                          "EvilForCausalLM = None\n")
    return folder


# ------------------------------------------------------------------ item 1: never run code from a model folder


def test_remote_code_never_runs_even_when_stdin_answers_yes(tmp_path, corpus):
    """A folder with auto_map and its own *.py: exit 2 naming the auto_map, no marker file, no prompt."""
    env = {**os.environ, "RELPOS_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT / "src")}
    for name, mt in (("remote_unknown", "evilmodel"), ("remote_llama", "llama")):
        folder = _evil(tmp_path / name, mt)
        r = subprocess.run([sys.executable, "-c", "import sys; from relpos.cli import main; sys.exit(main())",
                            "compare", "--hf-model", str(folder), "--corpus", str(corpus), "--eval-tokens", "1024",
                            "--device", "cpu", "--out", str(tmp_path / f"o-{name}")],
                           input="y\ny\ny\n", capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 2, r.stderr
        assert "auto_map" in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
        assert not list(tmp_path.glob("*.ran")), "code from the model folder ran"
        assert not (tmp_path / f"o-{name}").exists()


def test_unknown_model_type_refused_by_name_without_running_code(tmp_path):
    folder = _evil(tmp_path / "plain_unknown", "evilmodel", auto_map=False)
    with pytest.raises(ValueError, match="model_type 'evilmodel' is not a model type"):
        load_config(model_source(folder))
    assert not list(tmp_path.glob("*.ran"))


def test_every_transformers_call_passes_trust_remote_code_false():
    src = (ROOT / "src/relpos/pretrained/load.py").read_text()
    kw = model_source.__globals__["ModelSource"](Path("x"), Path("x")).kwargs()
    assert kw["trust_remote_code"] is False and kw["local_files_only"] is True
    assert src.count("from_pretrained(") == src.count("**src.kwargs()")


# ------------------------------------------------------------------ item 2: the --out rule


def _run(argv, capsys):
    rc = main(argv)
    return rc, capsys.readouterr().err


def test_hf_out_refuses_a_foreign_folder_and_keeps_the_users_file(tiny, corpus, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    base = ["compare", "--hf-model", str(tiny), "--corpus", str(corpus), "--eval-tokens", "512", "--device", "cpu",
            "--hf-factors", "1", "--passkey", "0", "--no-progress"]
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "hf_report.md").write_text("my notes")
    rc, err = _run(base + ["--out", str(foreign)], capsys)
    assert rc == 2 and "--out" in err and "Nothing was changed" in err
    assert (foreign / "hf_report.md").read_text() == "my notes" and sorted(os.listdir(foreign)) == ["hf_report.md"]
    # a train folder (a checkpoint) is foreign too
    ckpt = tmp_path / "trained"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"x")
    (ckpt / "config.json").write_text("{}")
    rc, err = _run(base + ["--out", str(ckpt)], capsys)
    assert rc == 2 and sorted(os.listdir(ckpt)) == ["config.json", "model.safetensors"]
    # the current folder
    monkeypatch.chdir(foreign)
    rc, err = _run(base + ["--out", "."], capsys)
    assert rc == 2 and "current folder" in err
    rc, err = _run(base + ["--out", ""], capsys)
    assert rc == 2 and "--out is empty" in err


def test_hf_out_never_overwrites_a_report_relpos_did_not_write(tiny, corpus, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "o"
    argv = ["compare", "--hf-model", str(tiny), "--corpus", str(corpus), "--eval-tokens", "512", "--device", "cpu",
            "--hf-factors", "1", "--passkey", "0", "--scalings", "native", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    assert (out / "hf_report.md").read_text().startswith("<!-- written by relpos")
    (out / "hf_report.md").write_text("my edits")
    rc, err = _run(argv, capsys)
    assert rc == 2 and "hf_report.md was not written by relpos" in err
    assert (out / "hf_report.md").read_text() == "my edits"


# ------------------------------------------------------------------ item 3: bounded before anything is built


def _cfg(**kw):
    c = {"model_type": "llama", "vocab_size": 512, "hidden_size": 32, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64}
    c.update(kw)
    return c


@pytest.mark.parametrize("key,value", [("num_hidden_layers", 1_000_000), ("hidden_size", 1 << 20),
                                       ("vocab_size", 0), ("num_attention_heads", -1), ("intermediate_size", 1.5),
                                       ("max_position_embeddings", True), ("vocab_size", None)])
def test_config_dimensions_are_bounded(key, value):
    with pytest.raises(ValueError, match=key):
        check_config(_cfg(**{key: value}))


def test_parameter_count_is_bounded_before_building(tmp_path, capsys):
    with pytest.raises(ValueError, match="parameters"):
        check_config(_cfg(num_hidden_layers=1000, hidden_size=16384, intermediate_size=65536))
    folder = tmp_path / "huge"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_cfg(num_hidden_layers=1_000_000)))
    t0 = time.perf_counter()
    rc, err = _run(["compare", "--hf-model", str(folder), "--corpus", str(folder / "config.json"), "--out",
                    str(tmp_path / "o")], capsys)
    assert rc == 2 and "num_hidden_layers" in err and len(err.strip().splitlines()) == 1
    assert time.perf_counter() - t0 < 30


def test_deeply_nested_config_is_a_clear_error(tmp_path):
    folder = tmp_path / "deep"
    folder.mkdir()
    (folder / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested too deeply|JSON object"):
        load_config(model_source(folder))


# ------------------------------------------------------------------ items 13/14: silent wrong results, generic errors


def test_nan_in_weights_is_refused_naming_the_tensor(tmp_path, corpus, monkeypatch, capsys):
    import torch
    from safetensors.torch import load_file, save_file

    folder = tiny_llama(tmp_path / "nan", max_pos=64)
    w = load_file(str(folder / "model.safetensors"))
    key = next(k for k in w if "layers.1.mlp" in k)
    w[key][0, 0] = math.nan
    save_file(w, str(folder / "model.safetensors"), metadata={"format": "pt"})
    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    rc, err = _run(["compare", "--hf-model", str(folder), "--corpus", str(corpus), "--eval-tokens", "512",
                    "--device", "cpu", "--hf-factors", "1", "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and key in err and "NaN" in err
    assert torch.isnan(w[key]).any()


@pytest.mark.parametrize("rope,match", [
    ({"rope_type": "default", "rope_theta": float("nan")}, "rope_theta"),
    ({"rope_type": "default", "rope_theta": -5.0}, "rope_theta"),
    ({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0, "original_max_position_embeddings": 0},
     "original_max_position_embeddings"),
    ({"rope_type": "linear", "rope_theta": 10000.0, "factor": float("inf")}, "factor"),
])
def test_bad_rope_settings_are_refused(tmp_path, rope, match):
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_cfg(rope_parameters=rope)))
    with pytest.raises(ValueError, match=match):
        load_config(model_source(folder))


@pytest.mark.parametrize("extra,match", [
    (["--hf-factors", "inf"], "--hf-factors"),
    (["--hf-factors", "1,abc"], "--hf-factors"),
    (["--hf-factors", "1e400"], "--hf-factors"),
    (["--eval-tokens", "0"], "--eval-tokens"),
    (["--hf-context", "0"], "--hf-context"),
    (["--max-eval-tokens", "0"], "--max-eval-tokens"),
    (["--scalings", "longrope"], "longrope"),
    (["--scalings", "ntk"], "--scalings"),
    (["--dtype", "int8"], "--dtype"),
    (["--passkey", "-1"], "--passkey"),
])
def test_bad_flags_name_the_flag(tiny, corpus, tmp_path, capsys, extra, match):
    out = tmp_path / "o"
    with pytest.raises(SystemExit) if extra[1] in ("1,abc",) else _nothing():
        rc, err = _run(["compare", "--hf-model", str(tiny), "--corpus", str(corpus), "--out", str(out)] + extra,
                       capsys)
        assert rc == 2 and match in err and "Traceback" not in err
    if extra[1] == "1,abc":
        assert match in capsys.readouterr().err
    assert not out.exists()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_paths_and_missing_packages_are_named(tmp_path, corpus, monkeypatch, capsys):
    rc, err = _run(["compare", "--hf-model", str(tmp_path / "no-such-model"), "--corpus", str(corpus), "--out",
                    str(tmp_path / "o")], capsys)
    assert rc == 2 and "does not exist" in err and "hub" not in err.lower()
    monkeypatch.setitem(sys.modules, "transformers", None)
    folder = _evil(tmp_path / "any", "llama", auto_map=False)
    rc, err = _run(["compare", "--hf-model", str(folder), "--corpus", str(corpus), "--out", str(tmp_path / "o")],
                   capsys)
    assert rc == 2 and "relpos[hf]" in err


def test_cuda_without_a_device_is_a_clear_error(tiny, corpus, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    rc, err = _run(["compare", "--hf-model", str(tiny), "--corpus", str(corpus), "--device", "cuda", "--out",
                    str(tmp_path / "o")], capsys)
    assert rc == 2 and "--device cuda" in err


def test_hf_only_flags_need_hf_model(capsys, tmp_path):
    rc, err = _run(["compare", "--preset", "ci", "--scalings", "yarn", "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and "--scalings needs --hf-model" in err


# ------------------------------------------------------------------ issue 31: passkey beyond the training length


def test_trained_compare_warns_when_every_passkey_length_exceeds_the_training_length(capsys, tmp_path):
    # evaluated long enough for the prompt to fit (the ci preset's own longest length is below it: the other warning)
    long = ["--eval-lengths", "256,512"]
    rc, out = main(["compare", "--preset", "ci", "--passkey", "2", *long, "--dry-run", "--out", str(tmp_path / "o")]), \
        capsys.readouterr().out
    assert rc == 0 and "passkey's prompt needs" in out and "--train-len" in out
    import re

    need = int(re.search(r"needs (\d+) bytes", out).group(1))
    rc = main(["compare", "--preset", "ci", "--passkey", "2", "--train-len", str(need), *long, "--dry-run",
               "--out", str(tmp_path / "o")])
    assert rc == 0 and "passkey's prompt needs" not in capsys.readouterr().out
