"""Issue 47, the items left after round 3: ``compare --dry-run --corpus`` built the whole corpus cache (tokenized
everything) to state a plan; refused runs left empty ``results.sqlite`` files behind; Ray's processes outlived a
killed driver."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _tree(root: Path) -> list[tuple[str, int]]:
    """Every path under ``root`` with its size (files) or -1 (folders): what a command must leave unchanged."""
    if not root.exists():
        return []
    return sorted((str(p.relative_to(root)), p.stat().st_size if p.is_file() else -1) for p in root.rglob("*"))


# ------------------------------------------------------------------ a dry run reads no corpus it has not cached


def _compare_argv(corpus, out, *extra):
    return ["compare", "--corpus", str(corpus), "--tasks", "lm", "--schemes", "alibi,rope", "--seeds", "0",
            "--train-len", "16", "--eval-lengths", "16,32", "--eval-tokens", "512", "--out", str(out), *extra]


@pytest.fixture
def small_corpus(tmp_path, monkeypatch):
    from tests.data_helpers import prose

    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "c.txt"
    corpus.write_text(prose(60_000, seed=5))
    return corpus


def test_a_dry_run_does_not_build_the_corpus_cache(small_corpus, tmp_path, capsys):
    """It tokenized the whole corpus into the cache (the fingerprint hashes the tokenized text) just to print a
    plan; now the plan says the fingerprint is computed at run time, and nothing is written."""
    from relpos.cli import main

    out = tmp_path / "out"
    assert main(_compare_argv(small_corpus, out, "--dry-run")) == 0
    text = capsys.readouterr().out
    assert not (tmp_path / "cache").exists(), f"a dry run wrote the corpus cache: {_tree(tmp_path / 'cache')}"
    assert not out.exists()
    assert "fingerprint computed at run time" in text and "2 training runs" in text
    assert "is not read yet (60," in text and "lm/alibi/seed0  to run" in text and "lm/rope/seed0   to run" in text


def test_a_dry_run_of_a_cached_corpus_states_the_run_fingerprint(small_corpus, tmp_path, capsys):
    """Once the corpus is in the cache, the dry run reads only its meta.json and prints the exact fingerprint a
    run uses (the real run's fingerprint is unchanged); still nothing is written."""
    from relpos.cli import build_parser, main
    from relpos.commands.compare import build_config
    from relpos.corpus import load_corpus

    load_corpus(small_corpus)  # the cache a run builds
    before = _tree(tmp_path / "cache")
    out = tmp_path / "out"
    argv = _compare_argv(small_corpus, out, "--dry-run")
    assert main(argv) == 0
    fp = build_config(build_parser().parse_args(argv)).fingerprint()  # as a run computes it
    assert f"fingerprint {fp}," in capsys.readouterr().out
    assert _tree(tmp_path / "cache") == before and not out.exists()


def test_a_dry_run_beside_a_store_of_an_unread_corpus_changes_nothing(small_corpus, tmp_path, capsys):
    """A folder with results, and a corpus not read yet (changed since): the plan says the match is settled at run
    time, and the folder is left as it was."""
    from relpos.cli import main
    from relpos.compare.store import Store

    out = tmp_path / "out"
    out.mkdir()
    with Store(out / "results.sqlite") as st:
        st.bind("0123456789abcdef", {"protocol_version": 0})
    before = _tree(out)
    assert main(_compare_argv(small_corpus, out, "--dry-run")) == 0
    text = capsys.readouterr().out
    assert _tree(out) == before and not (tmp_path / "cache").exists()
    assert "holds results (fingerprint 0123456789abcdef)" in text and "known once the corpus is read" in text
