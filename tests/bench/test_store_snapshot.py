"""``benchmarks/store_snapshot.py``: a consistent copy of a live store that a rerun resumes from."""

from __future__ import annotations

import json

import pytest

from relpos.compare.store import Store
from tests.bench.scripts import load_script


def _job(name: str) -> dict:
    return {"job": name, "scheme": "alibi", "task": "lm", "seed": 0, "train": {"seconds": 1.0}, "runs": [
        {"scheme": "alibi", "task": "lm", "seed": 0, "train_len": 64,
         "measurements": [{"protocol": "lm", "eval_len": 64, "loss": 1.5, "count": 4}]}]}


def _live(folder, jobs):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"fingerprint": "abc"}))
    with Store(folder / "results.sqlite") as s:
        s.bind("abc", {"k": 1})
        for j in jobs:
            s.write_job("abc", _job(j))
    return load_script("store_snapshot")


def test_snapshot_copies_every_job_and_restores(tmp_path):
    mod = _live(tmp_path / "live", ["a", "b"])
    assert mod.snapshot(tmp_path / "live", tmp_path / "snap") == 2
    assert not (tmp_path / "snap" / "results.sqlite-wal").exists()  # one self-contained file
    assert mod.snapshot(tmp_path / "snap", tmp_path / "new") == 2
    with Store(tmp_path / "new" / "results.sqlite") as s:
        assert s.done_jobs("abc") == {"a", "b"}
        assert s.bind("abc", {"k": 1}) is False  # the same fingerprint: a rerun resumes
    assert json.loads((tmp_path / "new" / "config.json").read_text())["fingerprint"] == "abc"


def test_snapshot_refuses_to_shrink_and_foreign_files(tmp_path):
    mod = _live(tmp_path / "big", ["a", "b"])
    _live(tmp_path / "small", ["a"])
    mod.snapshot(tmp_path / "big", tmp_path / "snap")
    with pytest.raises(SystemExit, match="holds 2 finished jobs.*only 1"):
        mod.snapshot(tmp_path / "small", tmp_path / "snap")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match="notes.txt"):
        mod.snapshot(tmp_path / "big", tmp_path / "other")
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"
    with pytest.raises(SystemExit, match="holds no relpos compare results"):
        mod.snapshot(tmp_path / "other", tmp_path / "x")


def test_a_store_of_another_fingerprint_is_replaced_only_when_superseded(tmp_path):
    mod = _live(tmp_path / "old", ["a", "b", "c"])
    mod.snapshot(tmp_path / "old", tmp_path / "snap")
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "config.json").write_text(json.dumps({"fingerprint": "xyz"}))
    with Store(tmp_path / "new" / "results.sqlite") as s:
        s.bind("xyz", {"k": 2})
        s.write_job("xyz", _job("a"))
    with pytest.raises(SystemExit, match="fingerprint abc.*xyz.*--supersede"):
        mod.snapshot(tmp_path / "new", tmp_path / "snap")
    assert mod.snapshot(tmp_path / "new", tmp_path / "snap", supersede=True) == 1
    with Store(tmp_path / "snap" / "results.sqlite") as s:
        assert s.done_jobs("xyz") == {"a"}
    _live(tmp_path / "small", [])  # back to fingerprint abc: refused again without --supersede
    with pytest.raises(SystemExit, match="fingerprint xyz"):
        mod.snapshot(tmp_path / "small", tmp_path / "snap")


def test_superseding_never_shrinks_a_store_of_the_same_fingerprint(tmp_path):
    mod = _live(tmp_path / "big", ["a", "b"])
    _live(tmp_path / "small", ["a"])
    mod.snapshot(tmp_path / "big", tmp_path / "snap")
    with pytest.raises(SystemExit, match="holds 2 finished jobs.*only 1"):
        mod.snapshot(tmp_path / "small", tmp_path / "snap", supersede=True)


def test_snapshot_of_a_store_being_written(tmp_path):
    """Mid-run, the newest jobs sit in the write-ahead log: the copy still holds them."""
    mod = _live(tmp_path / "live", ["a"])
    with Store(tmp_path / "live" / "results.sqlite") as s:
        s.write_job("abc", _job("b"))
        assert (tmp_path / "live" / "results.sqlite-wal").stat().st_size > 0
        assert mod.snapshot(tmp_path / "live", tmp_path / "snap") == 2


def _ckpt(path, step):
    from relpos.model import ModelConfig, TransformerLM
    from relpos.training import checkpoint

    model = TransformerLM(ModelConfig(vocab_size=16, d_model=8, n_layers=1, n_heads=2, max_len=8, scheme="alibi"))
    checkpoint.save(path, model, extra={"train": {"step": step}})


def test_the_jobs_in_flight_travel_with_the_snapshot(tmp_path):
    mod = _live(tmp_path / "live", ["a"])
    tries = tmp_path / "live" / "inflight" / "abc" / "copy" / "alibi"
    _ckpt(tries / "seed0" / "try0", 500)
    _ckpt(tries / "seed1" / "try0", 1000)
    mod.main([str(tmp_path / "live"), str(tmp_path / "snap")])
    snap_tries = tmp_path / "snap" / "inflight" / "abc" / "copy" / "alibi"
    assert (snap_tries / "seed0" / "try0" / "model.safetensors").is_file()
    mod.main(["--restore", str(tmp_path / "snap"), str(tmp_path / "new")])
    assert (tmp_path / "new" / "inflight" / "abc" / "copy" / "alibi" / "seed1" / "try0" / "config.json").is_file()
    # seed 0 finished in the live folder: the next snapshot drops its checkpoint, keeps seed 1's
    from relpos.training import checkpoint

    checkpoint.remove(tries / "seed0" / "try0")
    mod.main([str(tmp_path / "live"), str(tmp_path / "snap")])
    assert not (snap_tries / "seed0").exists() and (snap_tries / "seed1" / "try0").is_dir()
    # a link in place of the live folder's inflight/ is refused by name
    (tmp_path / "live2").mkdir()
    _live(tmp_path / "live2", ["a"])
    (tmp_path / "live2" / "inflight").symlink_to(tmp_path / "live" / "inflight")
    with pytest.raises(SystemExit, match="inflight is a symbolic link"):
        mod.main([str(tmp_path / "live2"), str(tmp_path / "snap")])
    assert (snap_tries / "seed1" / "try0").is_dir()


def test_a_copy_to_read_leaves_the_jobs_in_flight_behind(tmp_path):
    mod = _live(tmp_path / "live", ["a"])
    _ckpt(tmp_path / "live" / "inflight" / "abc" / "copy" / "alibi" / "seed0" / "try0", 500)
    mod.main(["--no-inflight", str(tmp_path / "live"), str(tmp_path / "page")])
    assert (tmp_path / "page" / "results.sqlite").is_file() and not (tmp_path / "page" / "inflight").exists()
