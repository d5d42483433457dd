"""``relpos train``: a checkpoint and a one-line summary; flags reach the configs."""

from __future__ import annotations

import argparse

import pytest

from relpos.training import checkpoint
from relpos.cli import main
from relpos.commands.train import _option

BASE = ["train", "--steps", "2", "--batch-size", "2", "--seq-len", "8", "--max-bytes", "4000", "--no-progress",
        "--device", "cpu"]


def test_train_writes_a_checkpoint_and_a_summary(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(BASE + ["--scheme", "t5", "-o", "num_buckets=8", "--share-encoding", "no", "--dropout", "0.0",
                        "--max-len", "64", "--out", str(out)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("scheme=t5 preset=tiny steps=2 ") and f"checkpoint={out}" in line
    model, cfg = checkpoint.load(out)
    assert cfg.scheme_options == {"num_buckets": 8} and cfg.share_encoding is False and cfg.max_len == 64
    assert len(model.pos) == cfg.n_layers


def test_resume_continues(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(BASE + ["--out", str(out)]) == 0
    assert main(BASE[:2] + ["3"] + BASE[3:] + ["--out", str(out), "--resume"]) == 0
    meta, _ = checkpoint.read(out)
    assert meta["extra"]["train"]["step"] == 3


def test_seq_len_above_max_len(tmp_path, capsys):
    assert main(BASE + ["--seq-len", "300", "--out", str(tmp_path / "r")]) == 2
    assert "exceeds the model's max_len" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_option_parsing():
    assert _option("num_buckets=16") == ("num_buckets", 16)
    assert _option("scaling=yarn") == ("scaling", "yarn")
    assert _option(" k = [1, 2]") == ("k", [1, 2])
    with pytest.raises(argparse.ArgumentTypeError):
        _option("nokey")
