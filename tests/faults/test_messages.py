"""Fault class "generic messages": bad input ends in one line naming the flag or file, exit 2, never a
traceback, a bare exception name or a misleading diagnosis.

Issue 29 item 14 (the parts outside Hugging Face): ``--device cuda`` without CUDA, deeply nested JSONL,
``--corpus-glob '/etc/*'`` (tested with the glob checks in test_bypass.py), a wrong-shaped optimizer tensor
on ``--resume``, NaN in the optimizer state reported as "training diverged, try a lower --lr".
"""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from relpos.training import checkpoint
from relpos.cli import main

TRAIN = ["train", "--preset", "tiny", "--scheme", "alibi", "--batch-size", "2", "--seq-len", "8",
         "--max-bytes", "4000", "--no-progress", "--device", "cpu"]


@pytest.fixture
def trained(tmp_path):
    out = tmp_path / "run"
    assert main(TRAIN + ["--steps", "2", "--out", str(out)]) == 0
    return out


def _rewrite_optimizer(path, edit):
    f = path / "optimizer.safetensors"
    opt = edit(load_file(str(f)))
    save_file(opt, str(f))
    data = f.read_bytes()
    meta = json.loads((path / "config.json").read_text())
    meta["files"][f.name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    meta["config_sha256"] = checkpoint._config_hash(meta)
    (path / "config.json").write_text(json.dumps(meta))


def _one_line(capsys, *needles):
    err = capsys.readouterr().err.strip().splitlines()
    assert err and "Traceback" not in "\n".join(err), err
    assert all(n in err[-1] for n in needles), err[-1]
    return err[-1]


def test_resume_with_a_wrong_shaped_optimizer_tensor(trained, capsys):
    def edit(opt):
        k = next(k for k in sorted(opt) if k.endswith("exp_avg") and opt[k].dim() == 2)
        opt[k] = torch.zeros(opt[k].shape[0] + 1, opt[k].shape[1])
        return opt

    _rewrite_optimizer(trained, edit)
    capsys.readouterr()
    assert main(TRAIN + ["--steps", "3", "--out", str(trained), "--resume"]) == 2
    _one_line(capsys, "optimizer.safetensors", "has shape")


def test_resume_with_nan_in_the_optimizer_state_is_not_called_divergence(trained, capsys):
    def edit(opt):
        k = next(k for k in sorted(opt) if k.endswith("exp_avg_sq"))
        opt[k] = opt[k].clone()
        opt[k].view(-1)[0] = float("nan")
        return opt

    _rewrite_optimizer(trained, edit)
    capsys.readouterr()
    assert main(TRAIN + ["--steps", "3", "--out", str(trained), "--resume"]) == 2
    line = _one_line(capsys, "optimizer.safetensors", "NaN or inf")
    assert "diverged" not in line and "--lr" not in line


def test_device_cuda_without_cuda(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for argv in (TRAIN[:-2] + ["--device", "cuda", "--steps", "1", "--out", str(tmp_path / "r")],
                 ["generate", "--checkpoint", str(tmp_path / "none"), "--device", "cuda"]):
        assert main(argv) == 2, argv
        _one_line(capsys, "--device cuda", "no usable CUDA")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("depth", [100_000])
def test_deeply_nested_jsonl_names_the_line(tmp_path, depth):
    from relpos.corpus import load_corpus

    f = tmp_path / "c.jsonl"
    f.write_text(json.dumps({"text": "fine " * 50}) + "\n" + '{"text": "x", "a": ' + "[" * depth + "]" * depth
                 + "}\n")
    with pytest.raises(ValueError, match=r"c.jsonl:2: .*nested"):
        load_corpus(f, cache_dir=tmp_path / "cache")
