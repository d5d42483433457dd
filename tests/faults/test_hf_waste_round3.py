"""``--hf-model`` tokenized the whole training split of the corpus (4.66M tokens, about 190 s) for a zero-shot
evaluation that never reads it (issue 47, wasted work). Now the training split is read and hashed, not
tokenized; the corpus is a cache entry of its own, and its summary says so."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from relpos.cli import main  # noqa: E402
from tests.data_helpers import prose, tiny_llama  # noqa: E402


def test_hf_evaluation_does_not_tokenize_the_training_split(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    model = tiny_llama(tmp_path / "m", max_pos=64)
    corpus = tmp_path / "c.txt"
    corpus.write_text(prose(300_000, seed=4))
    rc = main(["compare", "--hf-model", str(model), "--corpus", str(corpus), "--out", str(tmp_path / "o"),
               "--device", "cpu", "--hf-factors", "1", "--eval-tokens", "256", "--scalings", "native",
               "--passkey", "0", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 0, err
    metas = list((tmp_path / "cache" / "corpora").glob("*/meta.json"))
    assert len(metas) == 1
    meta = json.loads(metas[0].read_text())
    folder = metas[0].parent
    assert meta["eval_only"] is True and meta["splits"]["train"]["bytes"] > 200_000
    assert (folder / "train.bin").stat().st_size == 0 and meta["splits"]["train"]["tokens"] == 0
    assert meta["splits"]["test"]["tokens"] > 0 and (folder / "test.bin").stat().st_size > 0
    assert "train: " in err and "not tokenized (an evaluation never reads it)" in err
    assert "not applied (the training split is not tokenized)" in err


def test_an_eval_only_corpus_is_never_trained_on(tmp_path):
    from relpos.corpus import load_corpus

    f = tmp_path / "c.txt"
    f.write_text(prose(60_000, seed=1))
    full = load_corpus(f, cache_dir=tmp_path / "cache")
    ev = load_corpus(f, cache_dir=tmp_path / "cache", eval_only=True)
    assert ev.folder != full.folder and ev.fingerprint != full.fingerprint
    assert full.n_tokens("train") > 0 and ev.n_tokens("train") == 0
    with pytest.raises(ValueError, match="read for evaluation only"):
        ev.train_source(2, 16)
