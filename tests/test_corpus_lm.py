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
    from relpos.train import TrainConfig, train

    c = load_corpus(corpus_file, cache_dir=tmp_path)
    t = CorpusLanguageModelling(c, train_len=32, eval_lengths=[32, 64], eval_tokens=1024, blocks=16)
    res = train(ModelConfig(vocab_size=t.vocab_size, d_model=32, n_layers=1, n_heads=2, max_len=65, scheme="rope"),
                TrainConfig(steps=30, batch_size=8, seq_len=32, lr=3e-3, warmup=3, progress=False),
                t.train_source(8, seed=0))
    assert res.losses[-1] < res.losses[0]
    ms = t.evaluate(lambda n: res.model.eval())
    assert all(math.isfinite(m.loss) for m in ms)
