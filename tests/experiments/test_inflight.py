"""An interrupted sweep resumes inside a job (:mod:`relpos.compare.inflight`): every try of a job checkpoints its
training with the fit monitor's state, and the next run goes on from there to the very result the uninterrupted
job gives."""

from __future__ import annotations

import json

import pytest
import torch

from relpos.compare import inflight
from relpos.compare.fitting import FitConfig
from relpos.compare.job import Job, run_job
from relpos.data import stdlib_corpus
from relpos.model import ModelConfig
from relpos.training import checkpoint
from relpos.training.loop import TrainConfig, train
from tests.experiments.test_fitting import _tiny

JOB = Job("copy", "alibi", 0)


class Interrupt(BaseException):
    """What Ctrl-C or a killed worker does to a job: it never returns."""


def _cfg(**kw):
    return _tiny("copy", task_train={"copy": {"steps": 24, "batch_size": 4, "warmup": 1}},
                 fit=FitConfig(val_every=3, confirm=1, lr_grid=[3e-3, 1e-2], early_stop=False, keep_best=True), **kw)


def _same(res: dict) -> dict:
    """A job's result without its timings (the one thing an interruption changes)."""
    out = json.loads(json.dumps(res))
    t = out["train"]
    for k in ("seconds", "seconds_all_tries", "ms_per_step", "tokens_per_s"):
        t.pop(k)
    for tr in t["fit"]["lr_tries"]:
        tr.pop("seconds")
    for k in ("eval_seconds", "cpu_seconds"):
        out.pop(k)
    return out


def test_an_interrupted_job_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch):
    ref = run_job(JOB.to_dict(), _cfg().to_dict())
    monkeypatch.setattr(inflight, "RESUME_EVERY", 4)
    root = tmp_path / "inflight"
    cfg = _cfg(resume_dir=str(root))
    calls = []

    def stop_in_the_second_try(key, step, steps):
        calls.append(step)
        if len(calls) == 24 + 11:  # the second try's step 11: its last checkpoint is at step 8
            raise Interrupt

    with pytest.raises(Interrupt):
        run_job(JOB.to_dict(), cfg.to_dict(), progress=stop_in_the_second_try)
    folder = inflight.job_folder(str(root), cfg.fingerprint(), JOB)
    saved = [json.loads((folder / f"try{i}" / "config.json").read_text())["extra"] for i in (0, 1)]
    assert [s["train"]["step"] for s in saved] == [24, 8]
    assert saved[1]["callback"]["history"][-1]["step"] == 6  # the monitor's checks up to the checkpoint
    calls.clear()
    res = run_job(JOB.to_dict(), cfg.to_dict(), progress=lambda key, step, steps: calls.append(step))
    # the first try is restored whole and the second goes on from step 8; each checkpoint was written before its
    # step's callback (which may change the model), so the resume asks the callback for that step first
    assert calls == [24, *range(8, 25)]
    assert _same(res) == _same(ref)
    assert res["cpu_seconds"] > 0 and res["train"]["fit"]["lr_tries"][1]["seconds"] > 0
    assert not folder.exists()  # the finished job's checkpoints are gone, and its folder


def test_without_a_resume_dir_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_job(JOB.to_dict(), _cfg().to_dict())
    assert list(tmp_path.iterdir()) == []


def test_only_relpos_files_are_removed_when_the_job_is_done(tmp_path, monkeypatch):
    monkeypatch.setattr(inflight, "RESUME_EVERY", 4)
    root = tmp_path / "inflight"
    cfg = _cfg(resume_dir=str(root))
    folder = inflight.job_folder(str(root), cfg.fingerprint(), JOB)
    (folder / "try0").mkdir(parents=True)
    (folder / "try0" / "notes.txt").write_text("mine")  # not a checkpoint's file: the try is refused, kept
    from relpos.outdir import OutputDirError

    with pytest.raises(OutputDirError, match="try0 is a folder that does not hold relpos output"):
        run_job(JOB.to_dict(), cfg.to_dict())
    assert (folder / "try0" / "notes.txt").read_text() == "mine"
    (folder / "try0" / "notes.txt").unlink()  # an empty try folder: nothing saved yet, a fresh start
    (folder / "keep.txt").write_text("mine")
    run_job(JOB.to_dict(), cfg.to_dict())
    assert (folder / "keep.txt").read_text() == "mine" and not (folder / "try0").exists()


class _Counter:
    """A callback with state: counts its calls, stops training at step ``stop``."""

    def __init__(self, stop=None):
        self.calls, self.stop = 0, stop

    def __call__(self, info):
        self.calls += 1
        return info.step == self.stop

    def state_dict(self):
        return {"calls": self.calls}, {"twice": torch.full((2,), float(self.calls))}

    def load_state_dict(self, meta, tensors):
        assert torch.equal(tensors["twice"], torch.full((2,), float(meta["calls"])))
        self.calls = meta["calls"]


def _train(tmp_path, cb, **kw):
    mc = ModelConfig(vocab_size=256, d_model=16, n_layers=1, n_heads=2, max_len=16, scheme="alibi")
    tc = TrainConfig(steps=8, batch_size=2, seq_len=8, lr=1e-2, warmup=1, progress=False,
                     ckpt_dir=str(tmp_path / "ck"), ckpt_every=2, **kw)
    return train(mc, tc, stdlib_corpus("train", max_bytes=20_000), callback=cb)


def test_a_callback_that_stopped_training_is_not_trained_past_on_resume(tmp_path):
    first = _train(tmp_path, _Counter(stop=5))
    assert first.steps == 5
    again = _Counter(stop=None)
    res = _train(tmp_path, again, resume=True)
    assert res.steps == 5 and res.losses == first.losses and again.calls == 5  # its state restored, no new call
    assert res.seconds_before > 0 and res.cpu_seconds_before > 0


def test_a_checkpoint_without_the_callbacks_state_is_refused_by_name(tmp_path):
    _train(tmp_path, None)
    with pytest.raises(checkpoint.CheckpointError, match="no state of the training callback"):
        _train(tmp_path, _Counter(), resume=True)


def test_the_rerun_of_a_killed_sweep_says_which_runs_go_on(tmp_path):
    """A sweep whose job left a checkpoint says so when it is run again (the jobs' own resume is tested above)."""
    from relpos.compare.sweep import compare

    cfg = _cfg()
    out = tmp_path / "run"
    compare(_cfg(seeds=[1]), out, plots=False, progress=False, log=lambda s: None)  # the folder's first run
    folder = inflight.job_folder(str(out.resolve() / "inflight"), cfg.fingerprint(), JOB)
    (folder / "try0").mkdir(parents=True)  # what a killed sweep leaves (here an empty try: a fresh start)
    logged = []
    compare(cfg, out, plots=False, progress=False, log=logged.append)
    assert f"1 run(s) go on from their last checkpoint in {out / 'inflight'}: copy/alibi/seed0" in logged
    assert not (out / "inflight").exists()


def _interrupt(root, at: int) -> None:
    """Run JOB with checkpoints under ``root`` and kill it at its ``at``-th step callback."""
    n = []

    def stop(key, step, steps):
        n.append(step)
        if len(n) == at:
            raise Interrupt

    with pytest.raises(Interrupt):
        run_job(JOB.to_dict(), _cfg(resume_dir=str(root)).to_dict(), progress=stop)


def test_checkpoints_copied_away_and_back_resume_to_the_uninterrupted_result(tmp_path, monkeypatch):
    """What a machine that keeps nothing between sessions needs: the jobs in flight travel in a copy
    (``benchmarks/store_snapshot.py``) and the job goes on from it elsewhere, to the same result."""
    ref = run_job(JOB.to_dict(), _cfg().to_dict())
    monkeypatch.setattr(inflight, "RESUME_EVERY", 4)
    live, snap, fresh = tmp_path / "live", tmp_path / "snap", tmp_path / "fresh"
    _interrupt(live, 24 + 11)
    assert inflight.copy_checkpoints(live, snap) == {"copied": 2, "kept": 0, "dropped": 0}
    assert inflight.copy_checkpoints(live, snap) == {"copied": 0, "kept": 2, "dropped": 0}  # nothing newer
    assert inflight.copy_checkpoints(snap, fresh) == {"copied": 2, "kept": 0, "dropped": 0}
    calls = []
    res = run_job(JOB.to_dict(), _cfg(resume_dir=str(fresh)).to_dict(),
                  progress=lambda key, step, steps: calls.append(step))
    assert calls == [24, *range(8, 25)]  # the copied try 0 is whole, try 1 goes on from step 8
    assert _same(res) == _same(ref)
    # the job is done where it ran; the copy drops its checkpoints only when asked (live -> snapshot)
    assert inflight.copy_checkpoints(fresh, snap) == {"copied": 0, "kept": 0, "dropped": 0}
    assert snap.exists()
    assert inflight.copy_checkpoints(fresh, snap, drop_missing=True) == {"copied": 0, "kept": 0, "dropped": 2}
    assert not snap.exists()


def test_a_checkpoint_copy_never_goes_back_nor_through_a_link(tmp_path, monkeypatch):
    monkeypatch.setattr(inflight, "RESUME_EVERY", 4)
    early, late, snap = tmp_path / "early", tmp_path / "late", tmp_path / "snap"
    for root, at in ((early, 24 + 5), (late, 24 + 11)):
        _interrupt(root, at)
    inflight.copy_checkpoints(late, snap)
    assert inflight.copy_checkpoints(early, snap) == {"copied": 0, "kept": 2, "dropped": 0}
    steps = sorted(json.loads(p.read_text())["extra"]["train"]["step"] for p in snap.rglob("config.json"))
    assert steps == [8, 24]  # the later step stays
    # a link planted in the destination is refused, and nothing is written through it
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / _cfg().fingerprint()).symlink_to(elsewhere)
    from relpos.outdir import OutputDirError

    with pytest.raises(OutputDirError, match="symbolic link|not a folder of its own"):
        inflight.copy_checkpoints(late, tmp_path / "dest")
    assert list(elsewhere.iterdir()) == []


def test_a_checkpoint_that_does_not_verify_is_refused_and_one_that_finishes_meanwhile_is_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(inflight, "RESUME_EVERY", 4)
    live, snap = tmp_path / "live", tmp_path / "snap"
    _interrupt(live, 24 + 11)
    inflight.copy_checkpoints(live, snap)
    job = inflight.job_folder(str(live), _cfg().fingerprint(), JOB)
    model = job / "try1" / "model.safetensors"
    data = bytearray(model.read_bytes())
    data[-1] ^= 1
    model.write_bytes(bytes(data))  # a damaged file: never copied over the good copy
    with pytest.raises(ValueError, match="try1: the checkpoint did not verify"):
        inflight.copy_checkpoints(live, snap)
    assert inflight._step(inflight.job_folder(str(snap), _cfg().fingerprint(), JOB) / "try1") == 8
    # the job finishes while it is being copied: its checkpoints go from the copy, nothing is refused
    real = inflight._step

    def finishing(folder):
        checkpoint.remove(job / "try0")
        checkpoint.remove(job / "try1")
        return None

    monkeypatch.setattr(inflight, "_step", lambda f: finishing(f) if str(f).startswith(str(live)) else real(f))
    assert inflight.copy_checkpoints(live, snap, drop_missing=True) == {"copied": 0, "kept": 0, "dropped": 2}
    assert not snap.exists()
