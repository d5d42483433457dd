"""``--hf-model`` tokenized the whole training split of the corpus (4.66M tokens, about 190 s) for a zero-shot
evaluation that never reads it (issue 47, wasted work). Now the training split is read and hashed, not
tokenized; the corpus is a cache entry of its own, and its summary says so."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from tests.data_helpers import prose, tiny_llama  # noqa: E402


def test_hf_evaluation_does_not_tokenize_the_training_split(tmp_path):
    from relpos.corpus.summary import corpus_lines
    from relpos.pretrained.evaluate import corpus_report, hf_fingerprint

    model = tiny_llama(tmp_path / "m", max_pos=64)
    corpus = tmp_path / "c.txt"
    corpus.write_text(prose(100_000, seed=4))
    spec = {"model": str(model), "corpus": {"path": str(corpus)}, "factors": [1], "eval_tokens": 256,
            "scalings": ["native"], "passkey_n": 0, "device": "cpu", "cache_dir": str(tmp_path / "cache")}
    _, protocol, c = hf_fingerprint(spec)
    meta = json.loads((c.folder / "meta.json").read_text())
    assert meta["eval_only"] is True and meta["splits"]["train"]["bytes"] > 60_000
    assert (c.folder / "train.bin").stat().st_size == 0 and meta["splits"]["train"]["tokens"] == 0
    assert meta["splits"]["test"]["tokens"] > 0 and (c.folder / "test.bin").stat().st_size > 0
    text = "\n".join(corpus_lines(corpus_report(c)))
    assert "not tokenized (an evaluation never reads it)" in text
    assert "not applied (the training split is not tokenized)" in text


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
