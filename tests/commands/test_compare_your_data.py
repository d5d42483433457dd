"""`relpos compare --corpus PATH` and `relpos compare --hf-model DIR --corpus PATH` from the command line."""

from __future__ import annotations

import json

import pytest

from relpos.cli import main
from tests.data_helpers import prose, tiny_llama, write_folder


@pytest.mark.slow
def test_compare_on_a_users_corpus(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    docs = write_folder(tmp_path / "docs", n_files=80, size=3000)
    out = tmp_path / "out"
    argv = ["compare", "--preset", "ci", "--corpus", str(docs), "--corpus-glob", "**/*.txt", "--tasks", "lm",
            "--schemes", "alibi,nope", "--steps", "5", "--rope-variants", "none", "--workers", "1",
            "--out", str(out), "--no-progress", "--no-plots"]
    assert main(argv) == 0, capsys.readouterr().err
    d = json.loads((out / "results.json").read_text())
    assert {r["scheme"] for r in d["runs"]} == {"alibi", "nope"}
    corpus_opts = d["config"]["lm"]["corpus"]
    assert corpus_opts["path"].endswith("docs")
    # another corpus is another configuration: results from different data never mix in one folder
    other = write_folder(tmp_path / "other", n_files=80, size=3000, pool=5)
    argv2 = list(argv)
    argv2[argv2.index(str(docs))] = str(other)
    assert main(argv2) == 2
    err = capsys.readouterr().err
    assert "holds results made from corpus sha256" in err and "this configuration reads corpus sha256" in err


def test_compare_refuses_an_empty_corpus_before_writing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    out = tmp_path / "out"
    assert main(["compare", "--preset", "ci", "--corpus", str(empty), "--out", str(out)]) == 2
    assert "empty" in capsys.readouterr().err and not out.exists()


@pytest.mark.slow
def test_compare_hf_model(tmp_path, monkeypatch, capsys):
    pytest.importorskip("transformers")
    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    model = tiny_llama(tmp_path / "tiny-llama", max_pos=64)
    corpus = tmp_path / "c.txt"
    corpus.write_text(prose(400_000, seed=1))
    out = tmp_path / "hf"
    assert main(["compare", "--hf-model", str(model), "--corpus", str(corpus), "--hf-factors", "1,2",
                 "--eval-tokens", "512", "--passkey", "1", "--device", "cpu", "--out", str(out),
                 "--no-progress"]) == 0, capsys.readouterr().err
    text = (out / "hf_report.md").read_text()
    assert "hf:tiny-llama" in text and "yarn" in text
