"""Fault class "writing through a link" (issue 47 items 2 and 4): every file relpos opens for writing in an output
folder is checked as a regular file inside the folder before any write -- per entry point: compare, its
evaluation-only additions, ``--hf-model``, train and the results page.

Each test plants a link (or a named pipe) where relpos writes, and checks: one line naming the file, the link's
target byte-for-byte unchanged, and the folder's own files unchanged (the old "Nothing was changed" after a write
was false).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from relpos.compare.store import NotAStoreError
from relpos.outdir import OutputDirError
from tests.experiments.test_additions import cfg, run
from tests.faults.conftest import copy_folder as _copy


def _digest(folder: Path) -> dict:
    """Every file below ``folder`` (links as their target text), for "nothing changed"."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(folder))] = "link:" + os.readlink(p)
        elif p.is_file() and not p.name.endswith(("-wal", "-shm")):
            out[str(p.relative_to(folder))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _link_store(folder: Path, elsewhere: Path) -> Path:
    """Move the folder's store to ``elsewhere`` and leave a link to it: what an attacker plants."""
    elsewhere.mkdir()
    target = elsewhere / "results.sqlite"
    shutil.move(str(folder / "results.sqlite"), target)
    (folder / "results.sqlite").symlink_to(target)
    return target


# ------------------------------------------------------------------ compare: its additions and a plain resume


def test_additions_never_write_through_a_linked_store(finished, tmp_path):
    out = _copy(finished, tmp_path / "run")
    target = _link_store(out, tmp_path / "elsewhere")
    before, before_target = _digest(out), _digest(target.parent)
    with pytest.raises((OutputDirError, NotAStoreError), match="results.sqlite is a symbolic link"):
        run(cfg(passkey={"n": 1}), out)  # --passkey 1: an evaluation-only addition
    assert _digest(out) == before, "config.json (or another file) was rewritten"
    assert _digest(target.parent) == before_target, "the link's target gained runs"


@pytest.mark.parametrize("name", ["results.sqlite-wal", "results.sqlite-shm", "results.json", "config.json",
                                  "report.md", "results.sqlite-journal"])
def test_compare_refuses_each_of_its_files_as_a_link(finished, tmp_path, name):
    out = _copy(finished, tmp_path / "run")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    if (out / name).exists():
        (out / name).unlink()
    (out / name).symlink_to(victim)
    before = _digest(out)
    with pytest.raises(OutputDirError, match=f"{name} is a symbolic link"):
        run(cfg(passkey={"n": 1}), out)
    with pytest.raises(OutputDirError, match=f"{name} is a symbolic link"):
        run(cfg(), out)  # a plain resume too
    assert victim.read_text() == "precious" and _digest(out) == before


@pytest.mark.parametrize("where", ["models", "models/lm", "models/lm/rope"])
def test_compare_refuses_a_link_in_its_models_folder(finished, tmp_path, where):
    out = _copy(finished, tmp_path / "run")
    outside = tmp_path / "outside"
    shutil.move(str(out / where), outside)
    (out / where).symlink_to(outside, target_is_directory=True)
    before, before_out = _digest(out), _digest(outside)
    with pytest.raises(OutputDirError, match=f"{where} is a symbolic link"):
        run(cfg(schemes=["alibi", "rope", "nope"]), out)  # would train nope and save its model
    assert _digest(out) == before and _digest(outside) == before_out


@pytest.mark.parametrize("where", ["inflight", "inflight/fp"])
def test_compare_refuses_a_link_in_its_inflight_folder(finished, tmp_path, where):
    """The jobs' checkpoints while they train (relpos.compare.inflight) are written under OUT/inflight: a link
    planted there is refused before anything is written through it."""
    out = _copy(finished, tmp_path / "run")
    outside = tmp_path / "outside"
    outside.mkdir()
    assert not (out / "inflight").exists()  # a finished sweep leaves no checkpoint folder behind
    (out / where).parent.mkdir(parents=True, exist_ok=True)
    (out / where).symlink_to(outside, target_is_directory=True)
    before = _digest(out)
    with pytest.raises(OutputDirError, match=f"{where} is a symbolic link"):
        run(cfg(schemes=["alibi", "rope", "nope"]), out)  # would train nope, checkpointing it there
    assert _digest(out) == before and list(outside.iterdir()) == []


def test_compare_cli_one_line_and_honest(finished, tmp_path, capsys):
    from relpos.compare.sweep import check_output_files

    out = _copy(finished, tmp_path / "run")
    _link_store(out, tmp_path / "elsewhere")
    with pytest.raises(OutputDirError) as e:
        check_output_files(out)
    msg = str(e.value)
    assert "\n" not in msg and "Nothing was changed" in msg and "results.sqlite" in msg


def test_write_json_atomic_never_replaces_a_link(tmp_path):
    from relpos.outdir import write_json_atomic, write_text_atomic

    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "results.json").symlink_to(victim)
    with pytest.raises(OutputDirError, match="symbolic link"):
        write_json_atomic(tmp_path / "results.json", {"runs": []})
    with pytest.raises(OutputDirError, match="symbolic link"):
        write_text_atomic(tmp_path / "results.json", "x")
    assert victim.read_text() == "precious" and (tmp_path / "results.json").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json", "victim"]  # no temporary file left


# ------------------------------------------------------------------ --hf-model


def _hf_argv(hf, out):
    model, corpus = hf
    return ["compare", "--hf-model", str(model), "--corpus", str(corpus), "--eval-tokens", "512", "--device", "cpu",
            "--hf-factors", "1", "--passkey", "0", "--scalings", "native", "--no-progress", "--out", str(out)]


@pytest.mark.parametrize("name", ["results.sqlite", "results.sqlite-wal", "hf_report.md", "passkey_x_none.png"])
def test_hf_model_refuses_a_linked_file(hf, tmp_path, monkeypatch, capsys, name):
    from relpos.cli import main

    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "o"
    assert main(_hf_argv(hf, out)) == 0
    capsys.readouterr()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / name
    if (out / name).exists():
        shutil.move(str(out / name), target)
    else:
        target.write_text("precious")
    (out / name).symlink_to(target)
    before, before_target = _digest(out), target.read_bytes()
    argv = _hf_argv(hf, out)
    argv[argv.index("native")] = "native,linear"  # a new scaling: would be written into the store
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and f"{name} is a symbolic link" in err and len(err.strip().splitlines()) == 1, err
    assert _digest(out) == before and target.read_bytes() == before_target


def test_hf_dry_run_creates_nothing_beside_a_store(hf, tmp_path, monkeypatch, capsys):
    """The dry run read the folder's fingerprint by opening the store for writing (it created its tables)."""
    from relpos.cli import main
    from relpos.pretrained.out import _stored_fingerprint

    monkeypatch.setenv("RELPOS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "o"
    out.mkdir()
    import sqlite3

    sqlite3.connect(out / "results.sqlite").close()  # an empty SQLite file (being created by another process)
    assert _stored_fingerprint(out) is None
    assert sorted(os.listdir(out)) == ["results.sqlite"] and (out / "results.sqlite").stat().st_size == 0


# ------------------------------------------------------------------ train


def test_train_never_writes_through_a_link_in_its_checkpoint(tmp_path, capsys):
    from relpos.cli import main

    out = tmp_path / "ckpt"
    argv = ["train", "--preset", "tiny", "--steps", "1", "--out", str(out), "--no-progress"]
    if main(argv) != 0:
        pytest.skip("train --preset tiny is not available: " + capsys.readouterr().err)
    capsys.readouterr()
    victim = tmp_path / "victim.safetensors"
    victim.write_bytes(b"precious")
    (out / "model.safetensors").unlink()
    (out / "model.safetensors").symlink_to(victim)
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and "--out" in err and len(err.strip().splitlines()) == 1
    assert victim.read_bytes() == b"precious" and (out / "model.safetensors").is_symlink()


# ------------------------------------------------------------------ the results page (item 4)


def _page_argv(tmp_path, out):
    import json

    from tests.experiments.results_support import lm_results

    d = tmp_path / "default"
    d.mkdir(exist_ok=True)
    (d / "results.json").write_text(json.dumps(lm_results()))
    return ["--default", str(d), "--out", str(out), "--json-dir", str(tmp_path / "docs" / "json")]


def test_results_page_refuses_a_fifo_out_at_once(tmp_path, capsys):
    import threading

    from relpos.report.results_page import main

    out = tmp_path / "docs" / "results.md"
    out.parent.mkdir()
    os.mkfifo(out)
    got = []
    t = threading.Thread(target=lambda: got.append(main(_page_argv(tmp_path, out))), daemon=True)
    t.start()
    t.join(30)  # it blocked forever opening the pipe before
    assert got == [2], "the results page hung on a named pipe as --out"
    err = capsys.readouterr().err
    assert "named pipe" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "docs" / "json").exists()


@pytest.mark.parametrize("force", [False, True])
def test_results_page_never_follows_a_planted_tmp_link(tmp_path, force):
    from relpos.report.results_page import main

    out = tmp_path / "docs" / "results.md"
    out.parent.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (out.parent / "results.md.tmp").symlink_to(victim)
    assert main(_page_argv(tmp_path, out) + (["--force"] if force else [])) == 0
    assert victim.read_text() == "precious" and (out.parent / "results.md.tmp").is_symlink()
    assert out.read_text().startswith("<!--") and not out.is_symlink()


@pytest.mark.parametrize("which", ["out", "json"])
def test_results_page_refuses_a_linked_out_or_json_file(tmp_path, capsys, which):
    from relpos.report.results_page import main

    out = tmp_path / "docs" / "results.md"
    argv = _page_argv(tmp_path, out)
    assert main(argv) == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    path = out if which == "out" else next((tmp_path / "docs" / "json").glob("*.json"))
    path.unlink()
    path.symlink_to(victim)
    capsys.readouterr()
    assert main(argv + ["--force"]) == 2
    err = capsys.readouterr().err
    assert "symbolic link" in err and len(err.strip().splitlines()) == 1
    assert victim.read_text() == "precious" and path.is_symlink()


def test_the_report_never_follows_a_planted_tmp_link(finished, tmp_path):
    """report.md was written through ``report.md.tmp`` opened with a plain write: a planted link was followed."""
    import json

    from relpos.report.tables import write_report

    out = _copy(finished, tmp_path / "run")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (out / "report.md.tmp").symlink_to(victim)
    write_report(json.loads((out / "results.json").read_text()), out, [])
    assert victim.read_text() == "precious" and (out / "report.md").read_text().startswith("#")
    assert not (out / "report.md").is_symlink()
