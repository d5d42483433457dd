"""Fault class "hangs": an input that would block or loop for ever is refused at once.

Issue 29 items 5 (``--task-len 1000000000`` looped before the cap check) and 8 (named pipes where
relpos reads a file: ``results.sqlite`` in its own folder, ``--corpus``, ``--tokenizer``, a FIFO
inside a folder corpus). Every case runs in a child process with a deadline, so a regression fails
the test instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.data_helpers import prose, write_folder

REPO = Path(__file__).resolve().parents[2]


def relpos(*args, cwd, timeout=120):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RELPOS_CORPUS_CACHE": str(Path(cwd) / "cache")}
    return subprocess.run([sys.executable, "-m", "relpos.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def one_line_error(r, *needles):
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr and lines, r.stderr
    assert all(n in lines[-1] for n in needles), lines[-1]


def test_task_len_of_a_billion_is_refused_at_once():
    from relpos.tasks.strings import Copy

    with pytest.raises(ValueError, match=r"train_len must be an int in \[1, 65536\], got 1000000000"):
        Copy(train_len=1_000_000_000)


def test_compare_task_len_of_a_billion_exits_2(tmp_path):
    r = relpos("compare", "--preset", "ci", "--task-len", "1000000000", "--out", "o", cwd=tmp_path, timeout=90)
    one_line_error(r, "--task-len", "65536")
    assert not (tmp_path / "o").exists()


def test_fifo_results_sqlite_in_relposs_own_folder(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"fingerprint": "x", "protocol": {}}))
    os.mkfifo(out / "results.sqlite")
    for extra in ([], ["--dry-run"], ["--report-only"]):
        schemes = [] if extra == ["--report-only"] else ["--schemes", "alibi"]  # report-only takes no config
        r = relpos("compare", "--preset", "ci", *schemes, "--tasks", "copy", "--out", "o", *extra,
                   cwd=tmp_path, timeout=90)
        one_line_error(r, "results.sqlite", "named pipe")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "results.sqlite"]


@pytest.mark.parametrize("name", ["config.json", "results.json"])
def test_fifo_beside_the_database_is_refused_before_it_is_read(tmp_path, name):
    from relpos.compare.sweep import prepare_output, rebuild_report
    from relpos.outdir import OutputDirError
    from tests.experiments.test_compare import tiny

    out = tmp_path / "o"
    out.mkdir()
    (out / "results.sqlite").write_bytes(b"")
    os.mkfifo(out / name)
    with pytest.raises(OutputDirError, match=f"{name} is a named pipe"):
        prepare_output(tiny(), out)
    with pytest.raises(OutputDirError, match=f"{name} is a named pipe"):
        rebuild_report(out, plots=False)


@pytest.mark.parametrize("flag", ["--corpus", "--tokenizer"])
def test_fifo_corpus_or_tokenizer_is_refused_and_nothing_is_cached(tmp_path, flag):
    (tmp_path / "c.txt").write_text(prose(30_000))
    os.mkfifo(tmp_path / "fifo")
    args = ["--corpus", "fifo"] if flag == "--corpus" else ["--corpus", "c.txt", "--tokenizer", "fifo"]
    r = relpos("train", *args, "--steps", "1", "--out", "run", "--no-progress", cwd=tmp_path, timeout=90)
    one_line_error(r, flag, "named pipe")
    assert not (tmp_path / "cache").exists() and not (tmp_path / "run").exists()


def unblock_later(fifo: Path, after: float = 20.0) -> threading.Thread:
    """Open and close the writing end of ``fifo`` after ``after`` seconds, so that an in-process
    reader that (wrongly) blocked on it wakes up and the test fails instead of hanging."""
    def run():
        time.sleep(after)
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        except OSError:
            pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_fifo_corpus_in_the_library_is_refused(tmp_path):
    from relpos.corpus import load_corpus

    os.mkfifo(tmp_path / "fifo.txt")
    unblock_later(tmp_path / "fifo.txt")
    with pytest.raises(ValueError, match="named pipe"):
        load_corpus(tmp_path / "fifo.txt", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_fifo_inside_a_folder_corpus_is_skipped(tmp_path):
    from relpos.corpus import load_corpus

    root = write_folder(tmp_path / "d", n_files=40)
    os.mkfifo(root / "zz-pipe.txt")
    unblock_later(root / "zz-pipe.txt")
    c = load_corpus(root, cache_dir=tmp_path / "cache")
    assert c.n_tokens("train") > 0
