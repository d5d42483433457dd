"""Helpers of the ``relpos compare`` end-to-end tests (test_compare*.py): a tiny sweep and a folder digest."""

from __future__ import annotations

import hashlib
from pathlib import Path

from relpos.compare.sweep import compare
from relpos.compare.presets import preset
from relpos.compare.runner import SerialRunner

REPO = Path(__file__).resolve().parents[2]


def tiny(**kw):
    cfg = preset("ci")
    cfg.schemes = ["alibi", "rope"]
    cfg.tasks = ["lm", "copy"]
    cfg.steps = 3
    cfg.d_model, cfg.n_heads, cfg.n_layers = 16, 2, 1
    cfg.rope_variants = ["pi", "yarn"]
    cfg.lm = {"train_len": 8, "eval_factors": [1, 2], "eval_tokens": 64, "train_bytes": 20_000}
    cfg.algorithmic = {"train_len": 3, "eval_factors": [1, 2], "n_eval": 4}
    cfg.workers = 1
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg


def quiet(_msg):
    pass


def run_tiny(out, **kw):
    return compare(tiny(**kw), out, runner=SerialRunner(), progress=False, log=quiet)


def digest(folder: Path) -> dict:
    """Hashes of the files in a folder (SQLite's own -wal/-shm companions left out: a reader
    may create them empty; the database's contents are compared through results.sqlite)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())
            if p.is_file() and not p.name.endswith(("-wal", "-shm"))}
