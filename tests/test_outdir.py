"""--out safety: relpos never deletes or overwrites what it did not create (issue 10).

Every test here failed before :mod:`relpos.outdir` existed: ``relpos train --out``
renamed whatever was at the path aside and then deleted it.
"""

from __future__ import annotations

import os

import pytest
import torch

from relpos.training import checkpoint
from relpos.training import loop as train_mod
from relpos.cli import main as cli
from relpos.model import ModelConfig, TransformerLM
from relpos.outdir import OutputDirError, check_output_dir, prepare_output_dir
from relpos.training.loop import TrainConfig, train

TRAIN = ["train", "--steps", "1", "--batch-size", "2", "--seq-len", "8", "--max-bytes", "4000",
         "--no-progress", "--device", "cpu"]


@pytest.fixture
def no_training(monkeypatch):
    """Fail loudly if a model is built: the refusal must come before any work."""
    def boom(*a, **k):
        raise AssertionError("training started although --out was refused")
    monkeypatch.setattr(train_mod, "Trainer", boom)


def snapshot(root):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            out[os.path.relpath(p, root)] = None if os.path.isdir(p) else open(p, "rb").read()
    return out


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return TransformerLM(ModelConfig.preset("tiny", scheme="alibi", max_len=32))


# ---------------------------------------------------------------- the CLI


def test_train_out_file_is_refused_and_untouched(tmp_path, capsys, no_training):
    f = tmp_path / "passwd"
    f.write_text("root:x:0:0\n")
    before = snapshot(tmp_path)
    assert cli(TRAIN + ["--out", str(f)]) == 2
    err = capsys.readouterr().err
    assert str(f) in err and "is a file" in err and "Traceback" not in err
    assert snapshot(tmp_path) == before  # no hidden .passwd.old-* either


def test_train_out_foreign_folder_is_refused_and_untouched(tmp_path, capsys, no_training):
    d = tmp_path / "photos"
    (d / "2024").mkdir(parents=True)
    (d / "2024" / "a.jpg").write_bytes(b"\xff\xd8jpeg")
    (d / "notes.txt").write_text("keep me")
    before = snapshot(tmp_path)
    assert cli(TRAIN + ["--out", str(d)]) == 2
    assert str(d) in capsys.readouterr().err
    assert snapshot(tmp_path) == before


def test_train_out_dot_is_refused(tmp_path, monkeypatch, capsys, no_training):
    monkeypatch.chdir(tmp_path)
    assert cli(TRAIN + ["--out", "."]) == 2
    assert "current folder" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    assert cli(TRAIN + ["--out", ".."]) == 2  # an ancestor of the working folder


def test_train_out_symlink_to_file_is_refused(tmp_path, capsys, no_training):
    target = tmp_path / "system.conf"
    target.write_text("precious")
    link = tmp_path / "link"
    link.symlink_to(target)
    assert cli(TRAIN + ["--out", str(link)]) == 2
    assert link.is_symlink() and target.read_text() == "precious"


def test_train_into_new_then_own_folder_works(tmp_path, capsys):
    out = tmp_path / "runs" / "a"
    assert cli(TRAIN + ["--out", str(out)]) == 0
    first = (out / "model.safetensors").read_bytes()
    assert cli(TRAIN + ["--out", str(out), "--seed", "1"]) == 0  # its own earlier checkpoint: replaced
    assert (out / "model.safetensors").read_bytes() != first
    assert sorted(p.name for p in out.parent.iterdir()) == ["a"]


def test_train_into_empty_folder_works(tmp_path, capsys):
    out = tmp_path / "empty"
    out.mkdir()
    assert cli(TRAIN + ["--out", str(out)]) == 0
    assert checkpoint.is_checkpoint_dir(out)


# ---------------------------------------------------------------- the library


def test_train_api_refuses_before_building_the_model(tmp_path, no_training):
    f = tmp_path / "file"
    f.write_text("x")
    cfg = TrainConfig(steps=1, batch_size=2, seq_len=8, ckpt_dir=str(f), progress=False)
    with pytest.raises(OutputDirError, match="is a file"):
        train(ModelConfig.preset("tiny", scheme="alibi"), cfg, b"abc" * 100)
    assert f.read_text() == "x"


def test_save_refuses_a_checkpoint_folder_with_user_files(tmp_path):
    ck = tmp_path / "ck"
    checkpoint.save(ck, tiny_model())
    (ck / "README.txt").write_text("my notes about this run")
    before = snapshot(tmp_path)
    with pytest.raises(OutputDirError, match="README|does not hold relpos output"):
        checkpoint.save(ck, tiny_model(1))
    assert snapshot(tmp_path) == before


def test_save_never_deletes_foreign_leftover_lookalikes(tmp_path):
    ck = tmp_path / "ck"
    stale = tmp_path / ".ck.old-123-abc"
    (stale / "sub").mkdir(parents=True)
    (stale / "sub" / "data.csv").write_text("1,2,3")
    (stale / "mine.txt").write_text("user file")
    checkpoint.save(ck, tiny_model())
    assert (stale / "sub" / "data.csv").read_text() == "1,2,3"
    assert (stale / "mine.txt").read_text() == "user file"


def test_save_cleans_its_own_leftovers(tmp_path):
    ck = tmp_path / "ck"
    checkpoint.save(ck, tiny_model())
    os.rename(ck, tmp_path / ".ck.old-1-deadbeef")  # as if a save died between its renames
    checkpoint.save(ck, tiny_model(1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_check_output_dir_rules(tmp_path, monkeypatch):
    never = lambda p: False  # noqa: E731
    assert check_output_dir(tmp_path / "new", owns=never, what="thing") == (tmp_path / "new").resolve()
    assert not (tmp_path / "new").exists()  # checking creates nothing
    (tmp_path / "empty").mkdir()
    check_output_dir(tmp_path / "empty", owns=never, what="thing")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(OutputDirError, match="full"):
        check_output_dir(tmp_path / "full", owns=never, what="thing")
    check_output_dir(tmp_path / "full", owns=lambda p: p.name == "full", what="thing")
    monkeypatch.chdir(tmp_path / "full")
    with pytest.raises(OutputDirError, match="current folder"):
        check_output_dir(".", owns=lambda p: True, what="thing")
    with pytest.raises(OutputDirError, match="current folder"):
        check_output_dir("/", owns=lambda p: True, what="thing")
    with pytest.raises(TypeError):
        check_output_dir(3, owns=never, what="thing")


def test_prepare_output_dir_creates_and_reports_unwritable_parents(tmp_path):
    d = prepare_output_dir(tmp_path / "a" / "b", owns=lambda p: False, what="thing")
    assert d.is_dir()
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputDirError, match="cannot create"):
        prepare_output_dir(tmp_path / "f" / "sub", owns=lambda p: False, what="thing")
    assert (tmp_path / "f").read_text() == "x"


# ---------------------------------------------------------------- relpos compare --out


def _compare(out):
    from relpos.compare.sweep import compare
    from relpos.compare.runner import SerialRunner
    from tests.experiments.test_compare import quiet, tiny

    return compare(tiny(schemes=["alibi"], tasks=["copy"], rope_variants=[]), out, runner=SerialRunner(),
                   progress=False, log=quiet, plots=False)


def test_compare_refuses_a_foreign_folder_with_a_config_json(tmp_path, monkeypatch):
    from relpos.compare import sweep as compare_mod

    d = tmp_path / "project"
    d.mkdir()
    (d / "config.json").write_text('{"my": "settings"}')
    (d / "notes.md").write_text("keep")
    before = snapshot(tmp_path)
    monkeypatch.setattr(compare_mod, "plan", lambda cfg: (_ for _ in ()).throw(AssertionError("planned")))
    with pytest.raises(OutputDirError, match="project"):
        _compare(d)
    assert snapshot(tmp_path) == before


def test_compare_refuses_a_file_and_the_current_folder(tmp_path, monkeypatch):
    f = tmp_path / "results"
    f.write_text("x")
    with pytest.raises(OutputDirError, match="is a file"):
        _compare(f)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OutputDirError, match="current folder"):
        _compare(".")
    assert f.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["results"]


def test_compare_reopens_its_own_folder(tmp_path):
    from relpos.compare.store import is_results_store

    out = tmp_path / "run"
    s1 = _compare(out)
    assert is_results_store(out / "results.sqlite") and s1.finished == 1
    s2 = _compare(out)  # its own earlier run: resumed, nothing retrained
    assert s2.skipped == 1 and s2.finished == 0


# ------------------------------------------------------------ writing inside the folder only (issue 47)


def test_check_under_refuses_every_link_on_the_way(tmp_path):
    from relpos.outdir import check_under

    root = tmp_path / "out"
    (root / "models" / "lm").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    assert check_under(root, root / "models" / "lm" / "rope" / "seed0", folder=True) == root / "models/lm/rope/seed0"
    (root / "models" / "lm" / "rope").symlink_to(outside)
    with pytest.raises(OutputDirError, match="models/lm/rope is a symbolic link"):
        check_under(root, root / "models" / "lm" / "rope" / "seed0", folder=True)
    with pytest.raises(OutputDirError, match="outside the folder"):
        check_under(root, tmp_path / "elsewhere.txt")
    (root / "f.txt").write_text("x")
    check_under(root, root / "f.txt")
    with pytest.raises(OutputDirError, match="is a regular file, not a folder"):
        check_under(root, root / "f.txt", folder=True)


def test_refuse_links_below_finds_a_link_at_any_depth(tmp_path):
    from relpos.outdir import refuse_links_below

    (tmp_path / "models" / "a" / "b").mkdir(parents=True)
    (tmp_path / "models" / "a" / "b" / "config.json").write_text("{}")
    refuse_links_below(tmp_path / "models")
    (tmp_path / "models" / "a" / "b" / "model.safetensors").symlink_to(tmp_path / "x")
    with pytest.raises(OutputDirError, match="model.safetensors is a symbolic link"):
        refuse_links_below(tmp_path / "models")


def test_create_exclusive_never_opens_a_planted_link_or_pipe(tmp_path):
    from relpos.outdir import create_exclusive

    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "t.tmp").symlink_to(victim)
    (tmp_path / "dangling.tmp").symlink_to(tmp_path / "nowhere")
    os.mkfifo(tmp_path / "p.tmp")
    for name in ("t.tmp", "dangling.tmp", "p.tmp"):
        with pytest.raises(OutputDirError, match="already exists"):
            create_exclusive(tmp_path / name)
    assert victim.read_text() == "precious" and not (tmp_path / "nowhere").exists()
    os.close(create_exclusive(tmp_path / "new.tmp"))
    assert (tmp_path / "new.tmp").is_file()


def test_write_bytes_atomic_refuses_a_pipe_and_replaces_a_regular_file(tmp_path):
    from relpos.outdir import write_bytes_atomic

    os.mkfifo(tmp_path / "report.md")
    with pytest.raises(OutputDirError, match="named pipe"):
        write_bytes_atomic(tmp_path / "report.md", b"x")
    (tmp_path / "report.md").unlink()
    (tmp_path / "report.md").write_text("old")
    write_bytes_atomic(tmp_path / "report.md", b"new")
    assert (tmp_path / "report.md").read_bytes() == b"new" and sorted(os.listdir(tmp_path)) == ["report.md"]
