"""relpos.training.replay.ReplaySource: a job's learning-rate tries draw each batch once (issue 52)."""

from __future__ import annotations

import pytest
import torch

from relpos.training.replay import ReplaySource


class Source:
    """Deterministic in (step, micro), counting its draws; values that need int16 (token 300) and -100."""

    def __init__(self, floating: bool = False):
        self.calls, self.floating, self.width = 0, floating, 5

    def batch(self, step, micro=0):
        self.calls += 1
        g = torch.Generator().manual_seed(1000 * step + micro)
        x = torch.randint(0, 301, (3, 5), generator=g)
        y = torch.where(x % 3 == 0, torch.full_like(x, -100), x)
        return (x.float(), y.float()) if self.floating else (x, y)


def test_each_batch_is_drawn_once_and_replayed_token_for_token():
    src = Source()
    rep = ReplaySource(src)
    first = [rep.batch(s, m) for s in range(4) for m in range(2)]
    again = [rep.batch(s, m) for s in range(4) for m in range(2)]
    assert src.calls == 8 and (rep.drawn, rep.replayed) == (8, 8)
    for (x0, y0), (x1, y1), (s, m) in zip(first, again, [(s, m) for s in range(4) for m in range(2)]):
        xr, yr = Source().batch(s, m)
        assert torch.equal(x1, xr) and torch.equal(y1, yr) and torch.equal(x0, x1)
        assert x1.dtype == y1.dtype == torch.int64
    # a replay is a fresh tensor: changing it changes no later replay
    x, _ = rep.batch(0, 0)
    x.zero_()
    assert torch.equal(rep.batch(0, 0)[0], Source().batch(0, 0)[0])
    assert rep.width == 5  # the wrapped source's attributes


def test_past_its_memory_bound_it_draws_again_and_keeps_nothing_more():
    src = Source()
    rep = ReplaySource(src, max_bytes=2 * 15 * 2)  # one batch: two 3 x 5 tensors in int16
    rep.batch(0), rep.batch(1), rep.batch(0), rep.batch(1)
    assert src.calls == 3 and rep.bytes == 60 and (rep.drawn, rep.replayed) == (3, 1)


def test_refuses_what_it_cannot_serve_by_name():
    with pytest.raises(TypeError, match="integer token batches"):
        ReplaySource(Source(floating=True)).batch(0)
    with pytest.raises(TypeError, match="batch source"):
        ReplaySource(object())
    with pytest.raises(ValueError, match="max_bytes"):
        ReplaySource(Source(), max_bytes=-1)


def test_a_jobs_second_try_replays_the_first_tries_batches(monkeypatch):
    """Every try of a job trains on the same batches: the second reads the first's instead of drawing them, and
    its result is the one it gets from drawing them afresh."""
    from relpos.compare import job as job_mod
    from relpos.compare.job import Job, run_job
    from relpos.compare.fitting import FitConfig
    from tests.experiments.test_fitting import _tiny

    made = []
    # the job looks ReplaySource up in its module at call time, so the spy below sees every source it makes
    assert "ReplaySource" not in job_mod.__dict__, "compare/job.py must not bind ReplaySource at import"
    import relpos.training.replay as replay

    class Spy(replay.ReplaySource):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            made.append(self)

    monkeypatch.setattr(replay, "ReplaySource", Spy)
    cfg = _tiny("copy", task_train={"copy": {"steps": 6, "batch_size": 4, "warmup": 1}},
                fit=FitConfig(val_every=3, confirm=1, lr_grid=[3e-3, 1e-2]))
    res = run_job(Job("copy", "alibi", 0).to_dict(), cfg.to_dict())
    assert len(made) == 1  # one source for both tries
    assert (made[0].drawn, made[0].replayed) == (6, 6)
    tries = res["train"]["fit"]["lr_tries"]
    assert [t["lr"] for t in tries] == [3e-3, 1e-2]

    # the same job with every try drawing its own batches gives the same tries, number for number
    monkeypatch.setattr(replay, "ReplaySource", lambda source, **k: source)
    fresh = run_job(Job("copy", "alibi", 0).to_dict(), cfg.to_dict())["train"]["fit"]["lr_tries"]
    keys = ("lr", "steps", "score", "token", "fitted", "first_pass_step")
    assert [{k: t[k] for k in keys} for t in tries] == [{k: t[k] for k in keys} for t in fresh]
