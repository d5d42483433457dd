"""Fixtures for the explorer tests: a small results.json and a tiny checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

SCHEMES = ("alibi", "rope", "sinusoidal")


def make_results() -> dict:
    """A results.json (schema of docs/results-format.md) with 3 schemes x 2 seeds, plus a copy task."""
    runs = []
    for s_idx, scheme in enumerate(SCHEMES):
        for seed in (0, 1):
            metrics = []
            for L in (64, 128, 256, 512):
                growth = 0.0 if L <= 128 else (s_idx * 0.7) * (L / 128 - 1)
                bpb = 2.0 + growth + 0.01 * seed + 0.001 * L / 64
                metrics.append({"eval_len": L, "loss": bpb * 0.6931, "bpb": bpb, "ppl": None, "accuracy": None})
            runs.append({"scheme": scheme, "variant": None, "task": "lm", "seed": seed, "train_len": 128,
                         "metrics": metrics, "position_loss": []})
        runs.append({"scheme": scheme, "variant": None, "task": "copy", "seed": 0, "train_len": 32,
                     "metrics": [{"eval_len": L, "loss": None, "bpb": None, "ppl": None,
                                  "accuracy": 1.0 / (1 + s_idx * L / 64)} for L in (32, 64)],
                     "position_loss": []})
    runs.append({"scheme": "rope", "variant": "yarn", "task": "lm", "seed": 0, "train_len": 128,
                 "metrics": [{"eval_len": L, "loss": None, "bpb": 2.5, "ppl": None, "accuracy": None}
                             for L in (128, 512)], "position_loss": []})
    return {"version": 1, "config": {"steps": 1}, "runs": runs}


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("results")
    (d / "results.json").write_text(json.dumps(make_results()), encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory):
    """A tiny TransformerLM with random (but non-trivial) weights, saved with relpos.checkpoint.save."""
    from relpos import checkpoint
    from relpos.model import ModelConfig, TransformerLM

    torch.manual_seed(0)
    cfg = ModelConfig.preset("tiny", scheme="alibi", max_len=64)
    model = TransformerLM(cfg)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)
    d = tmp_path_factory.mktemp("ckpt") / "tiny-alibi"
    checkpoint.save(d, model, cfg)
    return d
