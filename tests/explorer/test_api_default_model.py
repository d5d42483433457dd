"""The model views 0 and 5 open on (``info()["default_model"]``): the user's own checkpoint when
``relpos explore --checkpoint`` gives one, else the shipped default model (T5); none when no model ships."""

from __future__ import annotations

import pytest
import torch

from relpos.explorer import Explorer


@pytest.fixture(scope="module")
def shipped_dirs(tmp_path_factory):
    """Two stand-ins for the shipped models (t5, the default, and rope), saved like them."""
    from relpos.training import checkpoint
    from relpos.model import ModelConfig, TransformerLM

    dirs = []
    for name in ("t5", "rope"):
        torch.manual_seed(0)
        cfg = ModelConfig.preset("tiny", scheme=name, max_len=64)
        d = tmp_path_factory.mktemp("shipped") / name
        checkpoint.save(d, TransformerLM(cfg), cfg)
        dirs.append(d)
    return dirs


@pytest.fixture
def shipped(monkeypatch, shipped_dirs):
    from relpos.explorer import models as models_mod

    monkeypatch.setattr(models_mod, "shipped_model_dirs", lambda: list(shipped_dirs))


def _compose_model(ex: Explorer) -> str:
    """The label of the model view 0 composes with when the page names none."""
    return ex.get("compose", {"text": "The cat sat on the mat"})["model"]["label"]


def test_views_0_and_5_open_on_the_users_checkpoint(shipped, checkpoint_dir):
    ex = Explorer(checkpoints=[checkpoint_dir])
    labels = [c["label"] for c in ex.info({})["checkpoints"]]
    assert labels == ["tiny-alibi", "t5", "rope"]  # the user's first, the shipped ones after
    assert ex.info({})["default_model"] == 0 == ex.default_model
    assert _compose_model(ex) == "tiny-alibi"
    assert ex.get("attention", {"text": "abc"})["checkpoint"] == "tiny-alibi"


def test_without_a_checkpoint_the_shipped_default_model(shipped):
    ex = Explorer()
    assert ex.info({})["default_model"] == 0 and ex.checkpoints[0].label == "t5" and ex.checkpoints[0].shipped
    assert _compose_model(ex) == "t5"


def test_without_shipped_models_view_0_opens_on_initial_values(checkpoint_dir):
    # conftest hides the shipped models: view 0 opens on initial values (no default model) with or without a
    # checkpoint, as before; view 5 (the attention route) reads the user's checkpoint
    for ex in (Explorer(), Explorer(checkpoints=[checkpoint_dir])):
        assert ex.info({})["default_model"] is None
        assert ex.get("compose", {"text": "The cat"})["model"] is None
    assert ex.get("attention", {"text": "abc"})["checkpoint"] == "tiny-alibi"


def test_a_checkpoint_not_over_bytes_is_refused_by_name(tmp_path, capsys):
    """A copy-task model (12 tokens) would fail on the bytes of the learner's text: refused at start, one line."""
    from relpos.training import checkpoint
    from relpos.cli import main
    from relpos.model import ModelConfig, TransformerLM

    cfg = ModelConfig(scheme="t5", vocab_size=12, d_model=16, n_layers=1, n_heads=2, max_len=64)
    d = tmp_path / "copy-model"
    checkpoint.save(d, TransformerLM(cfg), cfg)
    with pytest.raises(ValueError, match=r"--checkpoint .*copy-model: a model over 12 tokens.*vocab_size 256"):
        Explorer(checkpoints=[d], shipped_models=False)
    rc = main(["explore", "--checkpoint", str(d), "--export", str(tmp_path / "page.html")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "vocab_size 256" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "page.html").exists()
