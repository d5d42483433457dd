"""A tiny finished compare folder shared by the extend tests (language models of RoPE and ALiBi, two seeds)."""

from __future__ import annotations

import pytest

from tests.experiments.compare_support import run_tiny


@pytest.fixture(scope="session")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("cmp") / "cmp"
    run_tiny(d, tasks=["lm"], schemes=["rope", "alibi"], seeds=[0, 1], rope_variants=["pi"],
             lm={"train_len": 8, "eval_factors": [1, 16], "eval_tokens": 256, "train_bytes": 20_000})
    return d
