"""Messages that named the wrong thing (issue 47, minor): ``--task-len`` was reported as ``train_len``; the
corpus summary's "removed N tokens from test" came right after "test: M tokens" with N > M, counting the
split before deduplication without saying so."""

from __future__ import annotations

import pytest

from relpos.cli import main
from relpos.corpus.summary import corpus_lines


@pytest.mark.parametrize("value", ["0", "-5", "1000000000"])
def test_task_len_errors_name_the_flag(tmp_path, capsys, value):
    rc = main(["compare", "--task-len", value, "--dry-run", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "--task-len must be an integer in [1, 65536]" in err and "train_len" not in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_the_removed_count_says_what_it_is_out_of():
    rep = {"path": "c", "kind": "file", "fingerprint": "ab", "tokenizer": "t.json",
           "splits": {"train": {"docs": 9, "bytes": 9000, "tokens": 4_660_000},
                      "test": {"docs": 3, "bytes": 300, "tokens": 59_135}},
           "identity": {"sha256": "abc", "leak_window": 32,
                        "splits": {"test": {"removed_tokens": 1_011_475}, "val": {"removed_tokens": 0}}}}
    lines = corpus_lines(rep)
    assert "  test: 3 documents, 300 bytes, 59,135 tokens" in lines
    last = lines[-1]
    assert "1,011,475 of test's 1,070,610 tokens before deduplication (59,135 left)" in last, last
    assert "val" not in last
    rep["identity"]["splits"]["test"]["removed_tokens"] = 0
    assert corpus_lines(rep)[-1].endswith(": nothing removed")
