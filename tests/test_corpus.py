"""A user's corpus: every form, the split, the cache, the tokenizer path, and every bad input."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest
import torch

from relpos import data
from relpos.corpus import (Corpus, Requirement, TokenLMSource, cached_corpus, lm_requirement, load_corpus,
                           load_tokenizer)
from relpos.corpus.readers import chunk_size, detect_kind
from tests.data_helpers import prose, train_tokenizer, write_folder, write_jsonl


def _files_under(p):
    return sorted(str(q.relative_to(p)) for q in p.rglob("*")) if p.exists() else []


def _joined(c: Corpus, split: str) -> bytes:
    return c.array(split).tobytes()


def _tokens(c: Corpus) -> int:
    return sum(c.n_tokens(s) for s in ("train", "val", "test"))


def _removed(c: Corpus) -> int:
    return sum(c.meta["dedup"].get(s, {}).get("removed", 0) for s in ("val", "test"))


# ------------------------------------------------------------------ the forms


def test_text_file_round_trip_split_and_fingerprint(tmp_path):
    text = prose(200_000, seed=1)
    f = tmp_path / "a.txt"
    f.write_text(text)
    c = load_corpus(f, cache_dir=tmp_path / "cache")
    assert detect_kind(f) == "text" and c.vocab_size == 256 and not c.tokenized
    tr, va, te = _joined(c, "train"), _joined(c, "val"), _joined(c, "test")
    assert _removed(c) == 0  # random prose: no 64-byte window of it recurs
    assert len(tr) + len(va) + len(te) == len(text)  # chunks without separators: every byte once
    assert c.n_tokens("train") == len(tr) and c.n_bytes("val") == len(va) and c.n_bytes("test") == len(te)
    assert 0.01 < len(va) / len(text) < 0.12 and 0.03 < len(te) / len(text) < 0.25  # ~5% and ~10% by hash
    # chunks of ~1/256 of the file, cut after a line break, each split by its content hash
    assert chunk_size(len(text)) == 1024 and chunk_size(1 << 28) == 1 << 20 and chunk_size(1 << 22) == 1 << 14
    assert tr.endswith(b"\n") and va.endswith(b"\n") and te.endswith(b"\n")
    # the fingerprint depends on the data only, not on the path or the cache
    g = tmp_path / "copy.txt"
    g.write_text(text)
    c2 = load_corpus(g, cache_dir=tmp_path / "cache2")
    assert c2.fingerprint == c.fingerprint and c2.folder != c.folder
    g.write_text(text.replace("alpha", "omega", 1))
    assert load_corpus(g, cache_dir=tmp_path / "cache2").fingerprint != c.fingerprint


def test_split_rule_is_the_builtin_one(tmp_path):
    root = write_folder(tmp_path / "docs", n_files=80, size=300)
    c = load_corpus(root, glob="**/*.txt", cache_dir=tmp_path / "cache")
    rels = sorted((q.relative_to(root).as_posix() for q in root.rglob("*.txt")))
    assert _removed(c) == 0
    for s in ("train", "val", "test"):
        mine = [r for r in rels if data._split_of(r) == s]  # the stdlib corpus's hash of the relative path
        assert _joined(c, s) == b"".join((root / r).read_bytes() + b"\n\n" for r in mine)
        assert c.report()["splits"][s]["docs"] == len(mine)


def test_folder_skips_binary_and_undecodable_files_and_counts_them(tmp_path):
    root = write_folder(tmp_path / "docs", n_files=40, size=500)
    (root / "img.bin").write_bytes(b"\x89PNG\x00\x01\x02" * 100)
    (root / "latin1.txt").write_bytes("caf\xe9 ".encode("latin-1") * 50)
    big_bad = ("ok line\n" * 300_000).encode() + b"\xff\xfe"  # fails only after the first 1 MiB piece
    (root / "late_bad.txt").write_bytes(big_bad)
    c = load_corpus(root, cache_dir=tmp_path / "cache")
    rep = c.report()
    assert rep["skipped"] == {"binary": 1, "undecodable": 2, "unreadable": 0}
    assert set(rep["skipped_examples"]["undecodable"]) == {"latin1.txt", "late_bad.txt"}
    both = _joined(c, "train") + _joined(c, "val") + _joined(c, "test")
    assert b"PNG" not in both and b"caf" not in both and b"ok line" not in both  # rolled back whole
    # glob selects
    c2 = load_corpus(root, glob="doc*.txt", cache_dir=tmp_path / "cache")  # top level only
    assert sum(c2.report()["splits"][s]["docs"] for s in ("train", "val", "test")) == 26


def test_jsonl_documents_and_content_hash_split(tmp_path):
    f = write_jsonl(tmp_path / "d.jsonl", n=120, size=400, field="body")
    c = load_corpus(f, text_field="body", cache_dir=tmp_path / "cache")
    docs = [json.loads(line)["body"] for line in f.read_text().splitlines()]
    test = b"".join(d.encode() + b"\n\n" for d in docs if hashlib.sha1(d.encode()).digest()[0] < 26)
    assert _joined(c, "test") == test and _removed(c) == 0
    assert _tokens(c) == sum(len(d) + 2 for d in docs)


def test_hf_datasets_folder(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [prose(300, seed=s) for s in range(150)]
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"content": rows[:100], "n": list(range(100))}),
                               "test": datasets.Dataset.from_dict({"content": rows[100:], "n": list(range(50))})})
    dd.save_to_disk(str(tmp_path / "ds"))
    c = load_corpus(tmp_path / "ds", text_field="content", cache_dir=tmp_path / "cache")
    assert c.meta["kind"] == "hf"
    assert _tokens(c) == sum(len(r) + 2 for r in rows)
    # the same rows as JSONL give the same data, hence the same split bytes
    with open(tmp_path / "same.jsonl", "w") as f:
        for r in rows[100:] + rows[:100]:  # sorted split order: "test" before "train"
            f.write(json.dumps({"content": r}) + "\n")
    j = load_corpus(tmp_path / "same.jsonl", text_field="content", cache_dir=tmp_path / "cache")
    assert all(_joined(j, s) == _joined(c, s) for s in ("train", "val", "test"))
    with pytest.raises(ValueError, match="no text field 'text'.*content"):
        load_corpus(tmp_path / "ds", cache_dir=tmp_path / "cache")


# ------------------------------------------------------------- tokenizer path


def test_tokenizer_path_counts_tokens_and_bytes(tmp_path):
    tok_file = train_tokenizer(tmp_path / "tokenizer.json")
    f = tmp_path / "a.txt"
    text = prose(100_000, seed=3)
    f.write_text(text)
    c = load_corpus(f, tokenizer=tok_file, cache_dir=tmp_path / "cache")
    tok = load_tokenizer(tok_file)
    assert c.tokenized and c.vocab_size == tok.get_vocab_size() and c.unit == "tokens"
    ids = np.concatenate([c.array("train"), c.array("val"), c.array("test")])
    assert ids.dtype == np.int32 and int(ids.max()) < c.vocab_size
    assert _removed(c) == 0
    assert sum(c.n_bytes(s) for s in ("train", "val", "test")) == len(text)
    assert _tokens(c) < len(text) / 3  # subword: fewer tokens than bytes
    # the test split decodes back to its text
    assert tok.decode(c.array("test").tolist()) == _joined(load_corpus(f, cache_dir=tmp_path / "c2"), "test").decode()
    assert c.bits_per_byte(np.log(2)) == pytest.approx(c.n_tokens("test") / c.n_bytes("test"))
    assert c.fingerprint != load_corpus(f, cache_dir=tmp_path / "cache").fingerprint
    x, y = c.train_source(4, 32, seed=1).batch(3)
    assert x.shape == (4, 32) and torch.equal(x[:, 1:], y[:, :-1])


# ---------------------------------------------------------- sources and cache


def test_token_source_matches_byte_source(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text(prose(50_000))
    c = load_corpus(f, cache_dir=tmp_path / "cache")
    ours = c.train_source(5, 40, seed=7)
    ref = data.ByteLMSource(_joined(c, "train"), 5, 40, seed=7)
    for step, micro in ((0, 0), (3, 1), (10, 0)):
        for a, b in zip(ours.batch(step, micro), ref.batch(step, micro)):
            assert torch.equal(a, b)
    import pickle

    again = pickle.loads(pickle.dumps(ours))  # workers receive sources by pickle
    assert torch.equal(again.batch(3, 1)[0], ref.batch(3, 1)[0])
    t = c.tensor("val")
    assert t.dtype == torch.uint8 and t.numel() == c.n_tokens("val")
    with pytest.raises(ValueError, match="seq_len \\+ 1"):
        TokenLMSource(np.zeros(10, np.uint8), 2, 10)


def test_cache_is_reused_and_invalidated(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text(prose(30_000))
    c1 = load_corpus(f, cache_dir=tmp_path / "cache")
    mtime = (c1.folder / "train.bin").stat().st_mtime_ns
    c2 = load_corpus(f, cache_dir=tmp_path / "cache")
    assert c2.folder == c1.folder and (c2.folder / "train.bin").stat().st_mtime_ns == mtime
    f.write_text(prose(30_000, seed=9))
    c3 = load_corpus(f, cache_dir=tmp_path / "cache")
    assert c3.folder != c1.folder and c3.fingerprint != c1.fingerprint
    spec = {"path": str(f), "glob": None, "text_field": "text", "tokenizer": None}
    assert cached_corpus(spec, tmp_path / "cache").fingerprint == c3.fingerprint
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")]  # no temp folders left


def test_lm_requirement_and_size_error(tmp_path):
    need = lm_requirement(64, [64, 128, 256], 4096, blocks=32)
    assert need.test == 32 * 257 and need.val == 32 * 65 and need.train >= need.test
    f = tmp_path / "small.txt"
    f.write_text(prose(40_000))
    cache = tmp_path / "cache"
    with pytest.raises(ValueError, match=r"too small: its test split has [\d,]+ bytes and needs 8,224.*"
                                         r"about 82,240 bytes of text in all"):
        load_corpus(f, cache_dir=cache, require=need)
    assert not cache.exists()  # nothing written
    c = load_corpus(f, cache_dir=cache)  # without a requirement it loads
    with pytest.raises(ValueError, match="too small"):
        c.require(need)
    assert c.require(Requirement(10, 10)) is c
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("tiny text\n")  # one chunk: a split is empty, and the message still says what is needed
    with pytest.raises(ValueError, match="split has 0 bytes and needs 8,224"):
        load_corpus(tiny, cache_dir=tmp_path / "cache3", require=need)


# -------------------------------------------------------------- bad input


@pytest.mark.parametrize("case", ["empty_file", "empty_folder", "binary_folder", "whitespace_jsonl",
                                  "missing_field", "non_string_field", "bad_json", "bad_tokenizer",
                                  "missing_tokenizer", "binary_file", "not_utf8_file", "one_doc", "glob_on_file"])
def test_bad_input_raises_clearly_and_writes_nothing(tmp_path, case):
    cache = tmp_path / "cache"
    kw = {}
    if case == "empty_file":
        path, match = tmp_path / "e.txt", "is empty"
        path.write_text("")
    elif case == "empty_folder":
        path, match = tmp_path / "d", r"is empty.*0 binary, 0 not UTF-8"
        path.mkdir()
    elif case == "binary_folder":
        path, match = tmp_path / "d", r"no readable text: 2 binary, 1 not UTF-8"
        path.mkdir()
        (path / "a.bin").write_bytes(b"\x00\x01" * 10)
        (path / "b.bin").write_bytes(b"\x7fELF\x00")
        (path / "c.txt").write_bytes(b"\xff\xfe\xfa")
    elif case == "whitespace_jsonl":
        path, match = tmp_path / "d.jsonl", "is empty"
        path.write_text('{"text": ""}\n\n{"text": ""}\n')
    elif case == "missing_field":
        path, match = tmp_path / "d.jsonl", r"d.jsonl:2: no text field 'text' \(fields: body, id\)"
        path.write_text('{"text": "a"}\n{"id": 1, "body": "b"}\n')
    elif case == "non_string_field":
        path, match = tmp_path / "d.jsonl", "must be a string, got int"
        path.write_text('{"text": 5}\n')
    elif case == "bad_json":
        path, match = tmp_path / "d.jsonl", r"d.jsonl:1: not a JSON line"
        path.write_text("{not json\n")
    elif case in ("bad_tokenizer", "missing_tokenizer"):
        path = tmp_path / "a.txt"
        path.write_text(prose(5000))
        kw["tokenizer"] = tmp_path / "tok.json"
        if case == "bad_tokenizer":
            kw["tokenizer"].write_text('{"version": "1.0", "model": {"type": "Nope"}}')
            match = "does not load as a Hugging Face tokenizer"
        else:
            match = "does not exist"
    elif case == "binary_file":
        path, match = tmp_path / "a.txt", "binary file"
        path.write_bytes(b"abc\x00def")
    elif case == "not_utf8_file":
        path, match = tmp_path / "a.txt", "not UTF-8 text"
        path.write_bytes(b"abc\xffdef\n" * 10)
    elif case == "one_doc":  # one small document: the validation split is empty
        path, match = tmp_path / "a.jsonl", "(validation|training|test) split is empty"
        path.write_text('{"text": "just one document"}\n')
    else:
        path, match = tmp_path / "a.txt", "applies to a folder"
        path.write_text("hello")
        kw["glob"] = "*.txt"
    before = _files_under(tmp_path)
    with pytest.raises(ValueError, match=match):
        load_corpus(path, cache_dir=cache, **kw)
    assert not cache.exists() and _files_under(tmp_path) == before


def test_missing_path_and_bad_types(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_corpus(tmp_path / "nope.txt", cache_dir=tmp_path / "c")
    with pytest.raises(TypeError, match="text_field"):
        load_corpus(tmp_path, text_field="", cache_dir=tmp_path / "c")
    with pytest.raises(ValueError, match="split"):
        f = tmp_path / "a.txt"
        f.write_text(prose(30_000))
        load_corpus(f, cache_dir=tmp_path / "c").array("dev")


def test_default_cache_dir_follows_env(tmp_path, monkeypatch):
    from relpos.corpus import default_cache_dir

    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path / "corpora"
    monkeypatch.delenv("RELPOS_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert str(default_cache_dir()) == os.path.join(str(tmp_path), "home", ".cache", "relpos", "corpora")


def test_the_corpus_of_docs_your_data(tmp_path):
    """docs/your-data.md runs on this corpus; its fingerprint and sizes are the ones printed there."""
    root = write_folder(tmp_path / "docs", n_files=300, size=4000, pool=3)
    c = load_corpus(root, glob="**/*.txt", cache_dir=tmp_path / "cache")
    sizes = (c.n_bytes("train"), c.n_bytes("val"), c.n_bytes("test"))
    assert (c.fingerprint, sizes) == ("ba97f206b5b18659", (995292, 72536, 140838))


def test_command_line_options():
    import argparse

    from relpos.commands.corpus_flags import add_corpus_arguments, corpus_spec_from_args

    p = argparse.ArgumentParser()
    add_corpus_arguments(p)
    assert corpus_spec_from_args(p.parse_args([])) is None
    spec = corpus_spec_from_args(p.parse_args(["--corpus", "d", "--corpus-glob", "*.md", "--text-field", "body",
                                               "--tokenizer", "t.json"]))
    assert spec == {"path": "d", "glob": "*.md", "text_field": "body", "tokenizer": "t.json"}
    for argv, flag in ((["--corpus-glob", "*.md"], "--corpus-glob"), (["--text-field", "x"], "--text-field"),
                       (["--tokenizer", "t.json"], "--tokenizer")):
        with pytest.raises(ValueError, match=f"{flag} needs --corpus PATH"):
            corpus_spec_from_args(p.parse_args(argv))
    args = p.parse_args(["--tokenizer", "t.json"])
    args.hf_model = "m"  # with --hf-model, --tokenizer alone names the model's tokenizer
    assert corpus_spec_from_args(args) is None
