"""Checkpoints: safetensors + JSON, atomic writes, clear errors, exact resume, no pickle."""

from __future__ import annotations

import json
import os
import pickle
import shutil

import pytest
import torch
from safetensors.torch import save_file

from relpos.training import checkpoint
from relpos.training.checkpoint import CheckpointError
from relpos.data import stdlib_corpus
from relpos.model import ModelConfig, TransformerEncoder, TransformerLM
from relpos.training.loop import TrainConfig, train
from tests.helpers import randomize_parameters


def cfg(**kw) -> ModelConfig:
    base = dict(d_model=16, n_layers=2, n_heads=2, max_len=64, scheme="t5")
    base.update(kw)
    return ModelConfig(**base)


def model(seed=0, **kw) -> TransformerLM:
    torch.manual_seed(seed)
    m = TransformerLM(cfg(**kw))
    randomize_parameters(m, std=0.1, seed=seed)
    return m


@pytest.fixture()
def saved(tmp_path):
    m = model()
    path = checkpoint.save(tmp_path / "ck", m)
    return m, path


def resign(path, meta):
    """Write an edited config.json with a matching config_sha256 (to reach the checks behind it)."""
    meta["config_sha256"] = checkpoint._config_hash(meta)
    (path / "config.json").write_text(json.dumps(meta))


def test_round_trip(saved):
    m, path = saved
    assert sorted(os.listdir(path)) == ["config.json", "model.safetensors"]
    m2, c2 = checkpoint.load(path)
    assert isinstance(m2, TransformerLM) and c2 == m.cfg and not m2.training
    for (k, a), (_, b) in zip(m.state_dict().items(), m2.state_dict().items()):
        assert torch.equal(a, b), k
    x = torch.randint(0, 256, (2, 9))
    torch.testing.assert_close(m.eval()(x), m2(x))
    assert checkpoint.load(path / "config.json")[1] == c2  # a file inside the folder works too


def test_encoder_round_trip(tmp_path):
    torch.manual_seed(0)
    e = TransformerEncoder(cfg(scheme="alibi"))
    checkpoint.save(tmp_path / "enc", e)
    e2, _ = checkpoint.load(tmp_path / "enc")
    assert isinstance(e2, TransformerEncoder)


def test_crash_while_writing_keeps_the_previous_checkpoint(saved, monkeypatch):
    m, path = saved
    writes = []
    real = checkpoint._fsync_file

    def dying(p, data):
        writes.append(p)
        if len(writes) == 2:
            real(p, data[: len(data) // 2])
            raise OSError("disk full (simulated crash)")
        real(p, data)

    monkeypatch.setattr(checkpoint, "_fsync_file", dying)
    with pytest.raises(OSError, match="simulated"):
        checkpoint.save(path, model(seed=1), extra={"n": 2}, tensors={"optimizer": {"a": torch.ones(3)}})
    monkeypatch.undo()
    m2, _ = checkpoint.load(path)
    for a, b in zip(m.state_dict().values(), m2.state_dict().values()):
        assert torch.equal(a, b)
    assert [p.name for p in path.parent.iterdir()] == ["ck"]  # no temporary folder left behind


def test_crash_between_the_renames_is_recovered(saved, monkeypatch):
    m, path = saved
    real_rename = os.rename
    calls = []

    def rename(a, b):
        calls.append((a, b))
        if len(calls) == 2:
            raise OSError("power cut (simulated)")
        real_rename(a, b)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError, match="simulated"):
        checkpoint.save(path, model(seed=1))
    monkeypatch.undo()
    assert not path.exists()
    m2, _ = checkpoint.load(path)  # found under its .old name
    assert torch.equal(m2.tok_emb.weight, m.tok_emb.weight)
    m3 = model(seed=2)
    checkpoint.save(path, m3)  # the next save cleans up
    assert [p.name for p in path.parent.iterdir()] == ["ck"]
    assert torch.equal(checkpoint.load(path)[0].tok_emb.weight, m3.tok_emb.weight)


def test_corrupt_byte_is_detected(saved):
    _, path = saved
    f = path / "model.safetensors"
    b = bytearray(f.read_bytes())
    b[-5] ^= 0xFF
    f.write_bytes(bytes(b))
    with pytest.raises(CheckpointError, match="corrupt"):
        checkpoint.load(path)


def test_truncated_file_is_detected(saved):
    _, path = saved
    f = path / "model.safetensors"
    f.write_bytes(f.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="truncated"):
        checkpoint.load(path)


def test_truncated_config_is_detected(saved):
    _, path = saved
    c = path / "config.json"
    c.write_bytes(c.read_bytes()[:40])
    with pytest.raises(CheckpointError, match="not valid JSON"):
        checkpoint.load(path)


def test_foreign_config_is_refused(tmp_path):
    d = tmp_path / "hf"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 12}))
    save_file({"wte.weight": torch.zeros(2, 2)}, str(d / "model.safetensors"))
    with pytest.raises(CheckpointError, match="not a relpos checkpoint"):
        checkpoint.load(d)


def test_pickle_files_are_never_opened(tmp_path):
    d = tmp_path / "torch"
    d.mkdir()
    (d / "pytorch_model.bin").write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(CheckpointError, match="never unpickles"):
        checkpoint.load(d)


def test_foreign_safetensors_with_valid_hashes(saved):
    _, path = saved
    # a well-formed file whose tensors belong to another model
    f = path / "model.safetensors"
    save_file({"transformer.wte.weight": torch.zeros(4, 4)}, str(f))
    meta = json.loads((path / "config.json").read_text())
    import hashlib

    data = f.read_bytes()
    meta["files"]["model.safetensors"] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    resign(path, meta)
    with pytest.raises(CheckpointError, match="does not fit this model.*missing tensors"):
        checkpoint.load(path)


def test_shape_mismatch_names_the_tensor(saved):
    _, path = saved
    meta = json.loads((path / "config.json").read_text())
    meta["model_config"]["scheme_options"] = {"num_buckets": 8}
    resign(path, meta)
    with pytest.raises(CheckpointError, match="pos.0.table.*shape"):
        checkpoint.load(path)


def test_missing_and_bad_config(tmp_path, saved):
    with pytest.raises(CheckpointError, match="no checkpoint"):
        checkpoint.load(tmp_path / "nothing-here")
    _, path = saved
    meta = json.loads((path / "config.json").read_text())
    meta["model_config"]["n_heads"] = 3
    resign(path, meta)
    with pytest.raises(CheckpointError, match="invalid model config.*n_heads"):
        checkpoint.load(path)
    assert issubclass(CheckpointError, ValueError)


def test_loading_never_unpickles(saved, monkeypatch):
    _, path = saved

    def forbidden(*a, **k):
        raise AssertionError("unpickling attempted")

    monkeypatch.setattr(torch, "load", forbidden)
    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "loads", forbidden)
    checkpoint.load(path)


# ----------------------------------------------------------------- resume


class Crash(RuntimeError):
    pass


def test_resume_reaches_the_uninterrupted_loss(tmp_path):
    data = stdlib_corpus("train", max_bytes=40_000)
    mc = cfg(dropout=0.1)
    base = dict(steps=6, batch_size=4, seq_len=16, warmup=2, lr=1e-2, progress=False, accum_steps=2)
    full = train(mc, TrainConfig(**base), data)

    ck = tmp_path / "run"

    def crash_after_4(info):
        if info.step == 4:
            raise Crash("simulated crash")

    with pytest.raises(Crash):
        train(mc, TrainConfig(**base, ckpt_dir=str(ck), ckpt_every=3), data, callback=crash_after_4)
    meta = json.loads((ck / "config.json").read_text())
    assert meta["extra"]["train"]["step"] == 3 and (ck / "optimizer.safetensors").exists()
    resumed = train(mc, TrainConfig(**base, ckpt_dir=str(ck), ckpt_every=3, resume=True), data)
    assert resumed.losses == full.losses
    for (k, a), (_, b) in zip(full.model.state_dict().items(), resumed.model.state_dict().items()):
        assert torch.equal(a, b), k
    # the final checkpoint loads as a plain model
    m, _ = checkpoint.load(ck)
    assert torch.equal(m.tok_emb.weight, full.model.tok_emb.weight)


def test_resume_from_another_config_is_refused(tmp_path):
    data = stdlib_corpus("train", max_bytes=20_000)
    ck = tmp_path / "run"
    tc = dict(steps=1, batch_size=2, seq_len=8, progress=False, ckpt_dir=str(ck))
    train(cfg(), TrainConfig(**tc), data)
    with pytest.raises(CheckpointError, match="another model config.*d_model"):
        train(cfg(d_model=32), TrainConfig(**tc, resume=True), data)
    # a plain model checkpoint has no training state
    shutil.rmtree(ck)
    checkpoint.save(ck, TransformerLM(cfg()))
    with pytest.raises(CheckpointError, match="no training state"):
        train(cfg(), TrainConfig(**tc, resume=True), data)


def test_resume_without_a_checkpoint_starts_fresh(tmp_path):
    data = stdlib_corpus("train", max_bytes=20_000)
    tc = dict(steps=2, batch_size=2, seq_len=8, progress=False)
    a = train(cfg(), TrainConfig(**tc), data)
    b = train(cfg(), TrainConfig(**tc, ckpt_dir=str(tmp_path / "new"), resume=True), data)
    assert a.losses == b.losses
