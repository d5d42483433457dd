"""The relpos command line (relpos.cli): dispatch, and CLI errors -- one clear line, a non-zero exit, never a traceback.

The "CLI errors" tests failed before issue 10's fixes: ZeroDivisionError for
``--heads 0``, allocator errors for huge sizes, tracebacks for a missing GPU,
``--device nosuch``, OSError/sqlite3 errors and a closed pipe.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from relpos.cli import main

SRC = str(Path(__file__).resolve().parents[1] / "src")


def run_cli(*argv, **kw):
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "relpos.cli", *argv], capture_output=True, text=True, env=env,
                          timeout=120, **kw)


def test_console_script_runs():
    r = run_cli("schemes")
    assert r.returncode == 0, r.stderr


def test_no_command_prints_help(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


# ------------------------------------------------------------------ CLI errors


def one_clear_line(err: str, cmd: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"relpos {cmd}: error: ") and "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("argv, expect", [
    (["--heads", "0"], "--heads must be in [1, 1024], got 0"),
    (["--d-model", "-1"], "--d-model must be in [1, "),
    (["--max-len", "1000000000000"], "--max-len must be in [1, 16777216]"),
    (["--k", "1000000000"], "--k must be in [0, 1048576]"),
    (["--d-model", "1000000000", "--heads", "1"], "--d-model must be in [1, 1048576]"),
    (["--d-model", "100", "--heads", "8"], "must be divisible by --heads"),
])
def test_schemes_bad_sizes(capsys, argv, expect):
    t = time.perf_counter()
    assert main(["schemes", *argv]) == 2
    assert expect in one_clear_line(capsys.readouterr().err, "schemes")
    assert time.perf_counter() - t < 10


def test_schemes_large_but_valid_sizes_allocate_nothing(capsys):
    t = time.perf_counter()
    assert main(["schemes", "--json", "--max-len", str(1 << 20), "--d-model", "65536", "--heads", "64"]) == 0
    assert time.perf_counter() - t < 30
    assert '"learned"' in capsys.readouterr().out


def test_closed_pipe_is_quiet():
    env = dict(os.environ, PYTHONPATH=SRC)
    p = subprocess.Popen([sys.executable, "-m", "relpos.cli", "schemes", "--json"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    p.stdout.close()  # the reader is gone before anything is written (`| head -0`)
    err = p.stderr.read().decode()
    p.wait(timeout=120)
    assert p.returncode != 0 and "Traceback" not in err and "BrokenPipe" not in err, err


@pytest.mark.parametrize("cmd", [["generate", "-c", "nowhere"], ["train", "--steps", "1"]])
def test_unknown_device(capsys, cmd):
    assert main([*cmd, "--device", "nosuch"]) == 2
    assert "--device must be cpu, cuda or cuda:N, got 'nosuch'" in one_clear_line(capsys.readouterr().err, cmd[0])


@pytest.mark.parametrize("cmd", [["generate", "-c", "nowhere"], ["train", "--steps", "1"]])
def test_cuda_without_a_gpu(capsys, monkeypatch, cmd):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main([*cmd, "--device", "cuda"]) == 2
    assert "no usable CUDA GPU" in one_clear_line(capsys.readouterr().err, cmd[0])


@pytest.mark.parametrize("argv, expect", [
    (["--tokens", "-1"], "--tokens must be in [0, "),
    (["--tokens", str(10**12)], "--tokens must be in [0, "),
    (["--temperature", "0"], "--temperature must be > 0"),
    (["--top-k", "0"], "--top-k must be >= 1"),
])
def test_generate_bad_flags(capsys, argv, expect):
    assert main(["generate", "-c", "nowhere", *argv]) == 2
    assert expect in one_clear_line(capsys.readouterr().err, "generate")


def test_disk_full_while_writing_is_one_line(tmp_path, capsys, monkeypatch):
    from relpos.training import checkpoint
    def full(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(checkpoint, "_fsync_file", full)
    rc = main(["train", "--steps", "1", "--batch-size", "2", "--seq-len", "8", "--max-bytes", "4000",
               "--no-progress", "--device", "cpu", "--out", str(tmp_path / "run")])
    assert rc == 1
    line = one_clear_line(capsys.readouterr().err, "train")
    assert "No space left on device" in line
    assert list(tmp_path.iterdir()) == []  # the temporary folder is gone too


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores folder permissions")
def test_read_only_folder_is_one_line(tmp_path, capsys):  # pragma: no cover - CI runs as root
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        rc = main(["train", "--steps", "1", "--batch-size", "2", "--seq-len", "8", "--max-bytes", "4000",
                   "--no-progress", "--device", "cpu", "--out", str(ro / "run")])
        assert rc in (1, 2)
        one_clear_line(capsys.readouterr().err, "train")
    finally:
        ro.chmod(0o700)


@pytest.mark.parametrize("exc, rc, text", [
    (sqlite3.OperationalError("disk I/O error"), 1, "results database: disk I/O error"),
    (PermissionError(errno.EACCES, "Permission denied", "/x/results.sqlite"), 1, "Permission denied: /x/results"),
    (MemoryError(), 1, "out of memory"),
    (RuntimeError("CUDA out of memory\nmore"), 1, "RuntimeError: CUDA out of memory (set RELPOS_DEBUG=1"),
    (KeyError("x"), 1, "KeyError"),
])
def test_unexpected_errors_are_one_line(capsys, monkeypatch, exc, rc, text):
    from relpos.commands import schemes

    def boom(args):
        raise exc

    monkeypatch.setattr(schemes, "main", boom)
    monkeypatch.delenv("RELPOS_DEBUG", raising=False)
    assert main(["schemes"]) == rc
    assert text in one_clear_line(capsys.readouterr().err, "schemes")


def test_debug_shows_the_traceback(monkeypatch):
    from relpos.commands import schemes

    def boom(args):
        raise KeyError("x")

    monkeypatch.setattr(schemes, "main", boom)
    monkeypatch.setenv("RELPOS_DEBUG", "1")
    with pytest.raises(KeyError):
        main(["schemes"])


def test_interrupt_is_quiet(capsys, monkeypatch):
    from relpos.commands import schemes

    def stop(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(schemes, "main", stop)
    assert main(["schemes"]) == 130
    assert capsys.readouterr().err.strip() == "relpos schemes: interrupted"
