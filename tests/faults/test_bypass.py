"""Fault class "bypassed checks and silent wrong results": a check that can be walked around, or a run
that reports a number it should have refused.

Issue 29 items 9 (a checkpoint's edit check bypassed with ``"version": 1`` and no ``config_sha256``)
and 13 (``--corpus-glob`` reading outside the corpus folder; a tokenizer that maps the corpus to
``[UNK]``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.data_helpers import prose, write_folder


# ------------------------------------------------------------ item 13: --corpus-glob outside the folder


@pytest.mark.parametrize("glob", ["../../../../etc/host*", "../*", "sub/../../x*", "/etc/*", "~/x"])
def test_corpus_glob_outside_the_folder_is_refused(tmp_path, glob):
    from relpos.corpus import load_corpus

    root = write_folder(tmp_path / "a" / "b" / "corpus", n_files=40)
    (tmp_path / "a" / "secret.txt").write_text("secret " * 2000)
    with pytest.raises(ValueError, match="--corpus-glob"):
        load_corpus(root, glob=glob, cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("glob", ["/etc/*", "../../../../etc/host*"])
def test_corpus_glob_outside_the_folder_exits_2(tmp_path, glob, capsys):
    from relpos.cli import main

    root = write_folder(tmp_path / "corpus", n_files=40)
    rc = main(["train", "--corpus", str(root), "--corpus-glob", glob, "--steps", "1", "--out", str(tmp_path / "r"),
               "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "--corpus-glob" in err and "outside the corpus folder" in err and "Traceback" not in err


def test_relative_globs_still_work(tmp_path):
    from relpos.corpus import load_corpus

    root = write_folder(tmp_path / "corpus", n_files=60)
    c = load_corpus(root, glob="**/*.txt", cache_dir=tmp_path / "cache")
    assert c.n_tokens("train") > 0


# ------------------------------------------------------------ item 13: a tokenizer that maps text to [UNK]


def _word_level(path: Path, vocab: dict) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    t = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    t.save(str(path))
    return path


def test_two_token_tokenizer_is_refused_with_the_fraction(tmp_path):
    from relpos.corpus import load_corpus

    f = tmp_path / "c.txt"
    f.write_text(prose(60_000))
    tok = _word_level(tmp_path / "tok.json", {"[UNK]": 0, "the": 1})
    with pytest.raises(ValueError, match=r"--tokenizer .*: \d+\.\d% of the corpus's [\d,]+ tokens are its unknown"):
        load_corpus(f, tokenizer=tok, cache_dir=tmp_path / "cache")
    assert not any((tmp_path / "cache").glob("*/meta.json"))


def test_a_tokenizer_that_covers_the_text_is_accepted(tmp_path):
    from tokenizers import Tokenizer

    from relpos.corpus import load_corpus
    from relpos.corpus.unknown import check_unknown_fraction
    from tests.data_helpers import WORDS

    f = tmp_path / "c.txt"
    f.write_text(prose(60_000))
    vocab = {"[UNK]": 0, ".": 1, **{w: i + 2 for i, w in enumerate(sorted(set(WORDS)))}}
    tok = _word_level(tmp_path / "tok.json", vocab)
    c = load_corpus(f, tokenizer=tok, cache_dir=tmp_path / "cache")
    assert c.n_tokens("train") > 0
    frac = check_unknown_fraction(Tokenizer.from_file(str(tok)), [c.folder / "train.bin"], c.meta["dtype"], what="t")
    assert frac == 0.0


# ------------------------------------------------------------ item 9: the checkpoint edit check


def test_version_1_without_a_hash_is_refused(tmp_path, capsys):
    import torch

    from relpos.training import checkpoint
    from relpos.cli import main
    from relpos.model import ModelConfig, TransformerLM

    torch.manual_seed(0)
    ck = checkpoint.save(tmp_path / "ck", TransformerLM(ModelConfig.preset("tiny", scheme="alibi", max_len=32)))
    meta = json.loads((ck / "config.json").read_text())
    meta["version"] = 1
    del meta["config_sha256"]
    meta["model_config"]["scheme"] = "rope"  # the edit the hash exists to catch
    (ck / "config.json").write_text(json.dumps(meta))
    with pytest.raises(checkpoint.CheckpointError, match="version 1 carries no config_sha256"):
        checkpoint.load(ck)
    rc = main(["generate", "--checkpoint", str(ck), "--prompt", "def ", "--tokens", "4"])
    err = capsys.readouterr().err
    assert rc == 2 and "version 1" in err and "Traceback" not in err


@pytest.mark.parametrize("version", [0, 3, "2", True, None])
def test_unknown_versions_are_refused(tmp_path, version):
    import torch

    from relpos.training import checkpoint
    from relpos.model import ModelConfig, TransformerLM

    torch.manual_seed(0)
    ck = checkpoint.save(tmp_path / "ck", TransformerLM(ModelConfig.preset("tiny", scheme="alibi", max_len=32)))
    meta = json.loads((ck / "config.json").read_text())
    meta["version"] = version
    meta["config_sha256"] = checkpoint._config_hash(meta)
    (ck / "config.json").write_text(json.dumps(meta))
    with pytest.raises(checkpoint.CheckpointError, match="checkpoint version"):
        checkpoint.load(ck)
