"""Fixtures shared by the fault tests: a finished compare folder and a tiny Hugging Face checkpoint with a corpus
(each built once per test module)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished compare folder (alibi and rope language models, saved models kept)."""
    from tests.experiments.test_additions import cfg, run

    out = tmp_path_factory.mktemp("finished") / "run"
    run(cfg(), out)
    return out


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    """A tiny random Llama folder and a prose corpus."""
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from tests.data_helpers import prose, tiny_llama

    base = tmp_path_factory.mktemp("hf")
    corpus = base / "c.txt"
    corpus.write_text(prose(300_000, seed=3))
    return tiny_llama(base / "tiny", max_pos=64), corpus


def copy_folder(src: Path, dest: Path) -> Path:
    """A copy of ``src`` at ``dest`` that keeps links as links (a planted link stays planted)."""
    shutil.copytree(src, dest, symlinks=True)
    return dest


def nan_eps_model(model: Path, dest: Path) -> Path:
    """A copy of the checkpoint folder ``model`` at ``dest`` whose RMS-norm epsilon is NaN: loaded fine, refused at
    its first evaluation."""
    import json

    shutil.copytree(model, dest)
    cfg = json.loads((dest / "config.json").read_text())
    cfg["rms_norm_eps"] = float("nan")
    (dest / "config.json").write_text(json.dumps(cfg))
    return dest
