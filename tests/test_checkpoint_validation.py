"""Checkpoint validation (issue 10): hostile or broken checkpoint files, damaged resume state, diverged training.

Each test failed before: unbounded reads, the model built before its shapes were
checked, edited configs and NaN/int64 weights loaded silently, a non-dict
``"files"`` skipped every check, a damaged training state gave a KeyError
traceback, and a NaN loss trained on and exited 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import time

import pytest
import torch
from safetensors.torch import load_file, save_file

from relpos.training import checkpoint
from relpos.training import loop as train_mod
from relpos.training.checkpoint import CheckpointError
from relpos.cli import main as cli
from relpos.data import stdlib_corpus
from relpos.model import ModelConfig, TransformerLM
from relpos.training.loop import TrainConfig, TrainingDivergedError, train


def resign(path, meta):
    meta["config_sha256"] = checkpoint._config_hash(meta)
    (path / "config.json").write_text(json.dumps(meta))


def rewrite_tensors(path, name, tensors):
    """Replace a tensor file and record its true size and hash (a 'valid' but hostile checkpoint)."""
    f = path / f"{name}.safetensors"
    save_file(tensors, str(f))
    data = f.read_bytes()
    meta = json.loads((path / "config.json").read_text())
    meta["files"][f.name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    resign(path, meta)


@pytest.fixture
def ck(tmp_path):
    torch.manual_seed(0)
    m = TransformerLM(ModelConfig.preset("tiny", scheme="alibi", max_len=32))
    return checkpoint.save(tmp_path / "ck", m)


def meta_of(path):
    return json.loads((path / "config.json").read_text())


def test_device_file_is_never_read(ck):
    f = ck / "model.safetensors"
    size = f.stat().st_size
    f.unlink()
    f.symlink_to("/dev/zero")
    t = time.perf_counter()
    with pytest.raises(CheckpointError, match="not a regular file"):
        checkpoint.load(ck)
    assert time.perf_counter() - t < 5
    assert size > 0


def test_file_larger_than_recorded_is_refused_unread(ck, monkeypatch):
    f = ck / "model.safetensors"
    with open(f, "ab") as fh:
        fh.write(b"\0" * 1_000_000)
    with pytest.raises(CheckpointError, match="expected"):
        checkpoint.load(ck)


def test_shapes_are_checked_before_the_model_is_built(ck, monkeypatch):
    meta = meta_of(ck)
    meta["model_config"]["d_model"] = 65536  # would be tens of GB of weights
    resign(ck, meta)
    built = []
    real_init = TransformerLM.__init__

    def spy(self, cfg):
        built.append(torch.empty(0).device.type)  # the default device while building
        real_init(self, cfg)

    monkeypatch.setattr(TransformerLM, "__init__", spy)
    t = time.perf_counter()
    with pytest.raises(CheckpointError, match="shape"):
        checkpoint.load(ck)
    assert time.perf_counter() - t < 20
    assert built == ["meta"]  # only the allocation-free shape model


def test_edited_config_is_refused(ck):
    meta = meta_of(ck)
    meta["model_config"]["scheme"] = "rope"
    (ck / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="edited"):
        checkpoint.load(ck)
    meta = meta_of(ck)
    del meta["config_sha256"]
    (ck / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="edited"):
        checkpoint.load(ck)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused(ck, bad):
    sd = load_file(str(ck / "model.safetensors"))
    sd["tok_emb.weight"][3, 1] = bad
    rewrite_tensors(ck, "model", sd)
    with pytest.raises(CheckpointError, match="tok_emb.weight.*NaN or infinite"):
        checkpoint.load(ck)


def test_integer_weights_are_refused(ck):
    sd = load_file(str(ck / "model.safetensors"))
    sd["tok_emb.weight"] = sd["tok_emb.weight"].to(torch.int64)
    rewrite_tensors(ck, "model", sd)
    with pytest.raises(CheckpointError, match="tok_emb.weight.*dtype torch.int64"):
        checkpoint.load(ck)


def test_half_precision_weights_still_load(ck):
    sd = load_file(str(ck / "model.safetensors"))
    rewrite_tensors(ck, "model", {k: v.half() if v.is_floating_point() else v for k, v in sd.items()})
    model, _ = checkpoint.load(ck)
    assert model.tok_emb.weight.dtype == torch.float32


@pytest.mark.parametrize("files", [["model.safetensors"], "model.safetensors", None,
                                   {"model.safetensors": {"bytes": "12", "sha256": "x"}},
                                   {"model.safetensors": {"sha256": "x"}},
                                   {"model.safetensors": 7}])
def test_malformed_file_table_is_refused(ck, files):
    meta = meta_of(ck)
    meta["files"] = files
    resign(ck, meta)
    with pytest.raises(CheckpointError, match="lists no|must give an int"):
        checkpoint.load(ck)


def test_odd_model_class_is_refused(ck):
    meta = meta_of(ck)
    meta["model_class"] = ["TransformerLM"]
    resign(ck, meta)
    with pytest.raises(CheckpointError, match="unknown model_class"):
        checkpoint.load(ck)


# ---------------------------------------------------------------- resume

TRAIN = ["train", "--preset", "tiny", "--scheme", "alibi", "--batch-size", "2", "--seq-len", "8",
         "--max-bytes", "4000", "--no-progress", "--device", "cpu"]


@pytest.fixture
def trained(tmp_path):
    out = tmp_path / "run"
    assert cli(TRAIN + ["--steps", "2", "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("field", ["losses", "step", "optimizer"])
def test_resume_with_damaged_training_state_names_the_file(trained, capsys, field):
    meta = meta_of(trained)
    del meta["extra"]["train"][field]
    resign(trained, meta)
    capsys.readouterr()
    assert cli(TRAIN + ["--steps", "3", "--out", str(trained), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "config.json" in err and "damaged" in err and "Traceback" not in err and "KeyError" not in err


def test_resume_with_hand_edited_training_state_is_refused(trained, capsys):
    meta = meta_of(trained)
    del meta["extra"]["train"]["losses"]
    (trained / "config.json").write_text(json.dumps(meta))  # not re-signed: caught as an edit
    assert cli(TRAIN + ["--steps", "3", "--out", str(trained), "--resume"]) == 2
    assert "config.json" in capsys.readouterr().err


def test_resume_with_damaged_optimizer_tensors_names_the_file(trained, capsys):
    opt = load_file(str(trained / "optimizer.safetensors"))
    opt = {k: v for i, (k, v) in enumerate(sorted(opt.items())) if i % 2}  # half the state is gone
    rewrite_tensors(trained, "optimizer", opt)
    assert cli(TRAIN + ["--steps", "3", "--out", str(trained), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "optimizer.safetensors" in err and "Traceback" not in err


# ---------------------------------------------------------------- divergence


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path):
    out = tmp_path / "run"

    def poison(info):
        if info.step == 2:
            with torch.no_grad():
                info.model.tok_emb.weight[0, 0] = float("nan")

    cfg = TrainConfig(steps=6, batch_size=2, seq_len=8, ckpt_dir=str(out), ckpt_every=1, progress=False)
    data = stdlib_corpus("train", max_bytes=4000)
    with pytest.raises(TrainingDivergedError, match="step 3.*nan"):
        train(ModelConfig.preset("tiny", scheme="alibi"), cfg, data, callback=poison)
    meta, tensors = checkpoint.read(out)
    assert meta["extra"]["train"]["step"] == 2
    assert all(bool(torch.isfinite(t).all()) for t in tensors["model"].values())
    checkpoint.load(out)


def test_nan_loss_gives_a_non_zero_exit(tmp_path, capsys, monkeypatch):
    real = train_mod.Trainer.step

    def step(self):
        if self.step_count == 1:
            with torch.no_grad():
                self.model.tok_emb.weight.fill_(float("inf"))
        return real(self)

    monkeypatch.setattr(train_mod.Trainer, "step", step)
    out = tmp_path / "run"
    assert cli(TRAIN + ["--steps", "4", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "diverged" in err and "Traceback" not in err
    assert not out.exists() or os.listdir(out) == []
