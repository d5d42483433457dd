"""Language modelling on a user's corpus: training batches, the LM protocols, units, the fingerprint."""

from __future__ import annotations

import math

import pytest
import torch

from relpos.corpus import load_corpus
from relpos.corpus.lm import CorpusLanguageModelling
from relpos.tasks import LanguageModelling
from tests.data_helpers import prose, train_tokenizer


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    f = tmp_path_factory.mktemp("c") / "corpus.txt"
    f.write_text(prose(300_000, seed=5))
    return f


def _tiny_model(vocab):
    from relpos.model import ModelConfig, TransformerLM

    torch.manual_seed(0)
    return TransformerLM(ModelConfig(vocab_size=vocab, d_model=32, n_layers=1, n_heads=2, max_len=256,
                                     scheme="alibi")).eval()


def test_bytes_corpus_task_reads_the_corpus(corpus_file, tmp_path):
    c = load_corpus(corpus_file, cache_dir=tmp_path)
    t = CorpusLanguageModelling(c, train_len=32, eval_lengths=[32, 64], eval_tokens=2048, blocks=16)
    assert t.vocab_size == 256
    test, val = c.array("test").tobytes(), c.array("val").tobytes()
    chunks = t._chunks(4, 64)
    for row in chunks:  # evaluation text comes from the corpus's test split
        assert bytes(row.to(torch.uint8).tolist()) in test
    vx, vy = t.validation_batch()  # early stopping reads the validation split
    assert vx.shape == (32, 32) and all(bytes(r.to(torch.uint8).tolist()) in val for r in vx)
    x, y = t.train_source(4, seed=1).batch(0)
    train = c.array("train").tobytes()
    assert x.shape == (4, 32) and all(bytes(r.to(torch.uint8).tolist()) in train for r in x)
    ms = t.evaluate(lambda n: _tiny_model(256))
    w = [m for m in ms if m.protocol == "window"]
    assert [m.eval_len for m in w] == [32, 64]
    assert all(m.bpb == pytest.approx(m.loss / math.log(2)) for m in ms)  # bytes: bits per byte = bits per token
    # the corpus enters the options (hence compare's configuration fingerprint)
    opts = t.options()
    assert opts["corpus"]["fingerprint"] == c.fingerprint and opts["corpus"]["sha256"] == c.meta["sha256"]
    base = LanguageModelling(train_len=32, eval_lengths=[32, 64], eval_tokens=2048, blocks=16).options()
    assert {k: v for k, v in opts.items() if k != "corpus"} == {k: v for k, v in base.items() if k != "corpus"}
    assert base["corpus"]["name"] == "python-stdlib" and base["corpus"]["sha256"] != opts["corpus"]["sha256"]
    ident = t.corpus_identity()  # recorded with every result
    assert ident["sha256"] == c.meta["sha256"] and ident["leak_window"] == 64
    assert {s: ident["splits"][s]["tokens"] for s in ("train", "val", "test")} == \
        {s: c.n_tokens(s) for s in ("train", "val", "test")}


def test_tokenized_corpus_reports_loss_per_token_and_bits_per_byte(corpus_file, tmp_path):
    tok = train_tokenizer(tmp_path / "tok.json")
    c = load_corpus(corpus_file, tokenizer=tok, cache_dir=tmp_path / "cache")
    t = CorpusLanguageModelling(c, train_len=32, eval_lengths=[32, 64], eval_tokens=2048, blocks=16)
    from relpos.corpus import load_tokenizer

    assert t.vocab_size == c.vocab_size == load_tokenizer(tok).get_vocab_size() > 256
    ms = t.evaluate(lambda n: _tiny_model(c.vocab_size))
    ratio = c.n_bytes("test") / c.n_tokens("test")
    assert ratio > 2
    for m in ms:
        assert m.ppl == pytest.approx(math.exp(m.loss))  # per token
        assert m.bpb == pytest.approx(m.loss / math.log(2) / ratio)  # per byte


def test_too_small_for_the_evaluation(corpus_file, tmp_path):
    c = load_corpus(corpus_file, cache_dir=tmp_path)
    with pytest.raises(ValueError, match=r"test split has [\d,]+ bytes and needs [\d,]+ for 64 evaluation "
                                         r"blocks of 4097 bytes"):
        CorpusLanguageModelling(c, train_len=256, eval_lengths=[256, 4096], eval_tokens=262144)
    with pytest.raises(TypeError, match="Corpus"):
        CorpusLanguageModelling("corpus.txt", train_len=32)


def test_train_a_relpos_model_on_a_corpus(corpus_file, tmp_path):
    from relpos.model import ModelConfig
    from relpos.training.loop import TrainConfig, train

    c = load_corpus(corpus_file, cache_dir=tmp_path)
    t = CorpusLanguageModelling(c, train_len=32, eval_lengths=[32, 64], eval_tokens=1024, blocks=16)
    res = train(ModelConfig(vocab_size=t.vocab_size, d_model=32, n_layers=1, n_heads=2, max_len=65, scheme="rope"),
                TrainConfig(steps=30, batch_size=8, seq_len=32, lr=3e-3, warmup=3, progress=False),
                t.train_source(8, seed=0))
    assert res.losses[-1] < res.losses[0]
    ms = t.evaluate(lambda n: res.model.eval())
    assert all(math.isfinite(m.loss) for m in ms)


def test_a_results_folder_from_another_corpus_is_refused_in_one_line(tmp_path):
    """The corpus hash is in the fingerprint; a folder made from other text is refused naming both hashes."""
    from relpos.compare.sweep import compare
    from relpos.compare.presets import preset
    from relpos.compare.runner import SerialRunner
    from relpos.compare.store import ConfigMismatchError
    from relpos.tasks.lm import corpus_mismatch

    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text(prose(60_000, seed=1))
    b.write_text(prose(60_000, seed=2))

    def cfg(path):
        c = preset("ci")
        c.schemes, c.tasks, c.steps, c.workers = ["alibi"], ["copy"], 2, 1
        c.d_model, c.n_heads, c.n_layers = 16, 2, 1
        c.lm = {"train_len": 8, "eval_factors": [1, 2], "eval_tokens": 64,
                "corpus": {"path": str(path), "glob": None, "text_field": "text", "tokenizer": None}}
        c.algorithmic = {"train_len": 3, "eval_factors": [1, 2], "n_eval": 4}
        return c

    ca, cb = cfg(a), cfg(b)
    ha = ca.protocol()["tasks"]["lm"]["corpus"]["sha256"]
    hb = cb.protocol()["tasks"]["lm"]["corpus"]["sha256"]
    assert ha != hb and ca.fingerprint() != cb.fingerprint()
    why = corpus_mismatch(ca.protocol(), cb.protocol())
    assert ha[:16] in why and hb[:16] in why and corpus_mismatch(ca.protocol(), ca.protocol()) is None
    out = tmp_path / "out"
    compare(ca, out, runner=SerialRunner(), progress=False, log=lambda m: None, plots=False)
    with pytest.raises(ConfigMismatchError) as e:
        compare(cb, out, runner=SerialRunner(), progress=False, log=lambda m: None, plots=False)
    msg = str(e.value)
    assert msg.startswith(f"output folder {out} holds results made from corpus sha256 {ha[:16]}")
    assert hb[:16] in msg and "\n" not in msg
