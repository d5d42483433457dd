"""Fit first: validation, early stopping, the fit gate and learning-rate selection."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from relpos.compare.presets import preset
from relpos.compare.fitting import FitConfig, FitMonitor
from relpos.compare.job import Job, run_job
from relpos.tasks import make_task
from tests.tasks.test_algorithmic import Oracle


def Perfect(task, wrong: bool = False):
    """A model that reads every answer off the prompt (``wrong``: always one symbol off)."""
    return Oracle(task, shift=1 if wrong else 0)


def _step(step, model):
    return SimpleNamespace(step=step, loss=1.0, model=model)


def test_a_fitted_model_stops_after_confirming_checks():
    task = make_task("copy", train_len=4, eval_lengths=[4, 8], n_val=16)
    mon = FitMonitor(task, FitConfig(val_every=10, confirm=3), steps=1000)
    model = Perfect(task)
    stops = [step for step in range(1, 1001) if mon(_step(step, model))]
    assert stops[0] == 30  # first check at 10 hits 1.0; the third consecutive one (30) stops
    assert mon.stopped_early and mon.fitted_by_validation()
    assert [h["step"] for h in mon.history][:3] == [10, 20, 30]
    assert mon.history[0]["val_exact"] == 1.0


def test_a_model_that_cannot_fit_never_stops_and_is_not_fitted():
    task = make_task("copy", train_len=4, eval_lengths=[4, 8], n_val=16)
    mon = FitMonitor(task, FitConfig(val_every=10), steps=50)
    model = Perfect(task, wrong=True)
    assert not any(mon(_step(step, model)) for step in range(1, 51))
    assert not mon.stopped_early and not mon.fitted_by_validation()
    assert mon.history[-1]["step"] == 50 and mon.history[-1]["val_exact"] == 0.0


def test_cooldown_at_starts_a_cooldown_once_learned_and_stops_at_its_end():
    """A constant-rate algorithmic run cools down when the exact match reaches cooldown_at."""
    from relpos.training.schedule import Cooldown

    task = make_task("copy", train_len=4, eval_lengths=[4], n_val=8)
    mon = FitMonitor(task, FitConfig(val_every=10, confirm=3), steps=1000, cooldown_at=0.8, cooldown=0.5)
    scores = iter([0.1, 0.2, 0.85, 0.9, 0.9, 0.9, 0.9] + [0.9] * 100)
    mon.score = lambda model: {"val_exact": next(scores)}
    answers = {s: a for s in range(1, 1001) if (a := mon(_step(s, None)))}
    assert answers == {30: Cooldown(15)}  # 0.85 at step 30: half of 30 steps
    assert mon.cooldown_from == 30 and mon.end == 45 and mon.history[2]["cooldown_steps"] == 15
    assert [h["step"] for h in mon.history][3:5] == [40, 45]  # the cooldown's last step is validated
    assert mon.stopped_early and mon.summary()["cooldown_from"] == 30
    # never below the threshold: no cooldown, the whole budget
    mon = FitMonitor(task, FitConfig(val_every=10), steps=50, cooldown_at=0.8)
    mon.score = lambda model: {"val_exact": 0.5}
    assert not any(mon(_step(s, None)) for s in range(1, 51)) and mon.cooldown_from is None


def test_early_stop_can_be_turned_off():
    task = make_task("copy", train_len=4, eval_lengths=[4], n_val=8)
    mon = FitMonitor(task, FitConfig(val_every=5, confirm=1, early_stop=False), steps=20)
    assert not any(mon(_step(s, Perfect(task))) for s in range(1, 21))
    assert mon.fitted_by_validation() and not mon.stopped_early


def test_lm_stops_when_the_validation_loss_flattens():
    task = make_task("lm", train_len=16, eval_lengths=[16], eval_tokens=64, n_val=4)
    mon = FitMonitor(task, FitConfig(val_every=1, lm_patience=2, lm_tol=0.01), steps=100)
    losses = iter([3.0, 2.5, 2.2, 2.0, 1.999, 1.998, 1.5])
    mon.score = lambda model: {"val_loss": next(losses)}
    stop = next(s for s in range(1, 8) if mon(_step(s, None)))
    # after 2.0: the last two checks (1.999, 1.998) improve on 2.0 by less than 1%
    assert stop == 6 and mon.flat and mon.fitted_by_validation() and mon.stopped_early


def _lm_monitor(losses, steps=100, **fit):
    task = make_task("lm", train_len=16, eval_lengths=[16], eval_tokens=64, n_val=4)
    mon = FitMonitor(task, FitConfig(val_every=10, lm_patience=2, lm_tol=0.01, lm_schedule="plateau", **fit),
                     steps=steps)
    it = iter(losses)
    mon.score = lambda model: {"val_loss": next(it)}
    return mon


def test_lm_plateau_cools_down_once_flat_then_stops_at_the_cooldown_end():
    from relpos.training.schedule import Cooldown

    mon = _lm_monitor([3.0, 2.5, 2.0, 1.999, 1.998] + [1.9] * 20, steps=1000, lm_cooldown=0.5)
    answers = {s: a for s in range(1, 200) if (a := mon(_step(s, None)))}
    # flat at the check of step 50 (1.999, 1.998 improve on 2.0 by < 1 %): a cooldown of 0.5 x 50 steps
    assert answers == {50: Cooldown(25)}
    assert mon.flat and mon.fitted_by_validation() and mon.cooldown_from == 50 and mon.end == 75
    # the cooldown's last step is validated too; further checks never restart or undo it
    assert [h["step"] for h in mon.history][5:8] == [60, 70, 75]
    assert mon.stopped_early and mon.summary()["cooldown_from"] == 50 and mon.history[4]["cooldown_steps"] == 25


def test_lm_plateau_that_never_flattens_cools_down_in_time_and_is_not_fitted():
    from relpos.training.schedule import Cooldown

    mon = _lm_monitor([3.0 - 0.1 * i for i in range(30)], steps=100, lm_cooldown=0.25)
    answers = {s: a for s in range(1, 101) if (a := mon(_step(s, None)))}
    assert answers == {80: Cooldown(20)}  # the last start from which 25 % of the steps so far fit: 100 / 1.25
    assert not mon.flat and not mon.fitted_by_validation() and not mon.stopped_early
    assert mon.history[-1]["step"] == 100


def test_lm_plateau_without_early_stop_uses_the_whole_budget_but_records_the_flattening():
    from relpos.training.schedule import Cooldown

    mon = _lm_monitor([3.0, 2.0, 1.999, 1.998] + [1.997] * 20, steps=100, lm_cooldown=0.25, early_stop=False)
    answers = {s: a for s in range(1, 101) if (a := mon(_step(s, None)))}
    assert answers == {80: Cooldown(20)} and mon.fitted_by_validation()


def test_plateau_cooldown_in_a_real_training_run():
    """train() honours the monitor's Cooldown: constant rate, then a linear decay, then it stops."""
    from relpos.model import ModelConfig
    from relpos.training.loop import TrainConfig, train

    task = make_task("lm", train_len=16, eval_lengths=[16], eval_tokens=64, n_val=4)
    mon = _lm_monitor([3.0, 2.0, 1.999, 1.998] + [1.9] * 20, steps=200, lm_cooldown=0.5)
    lrs = []
    inner = mon.__call__

    def callback(info):
        lrs.append(info.lr)
        return inner(info)

    cfg = TrainConfig(steps=200, batch_size=2, seq_len=16, lr=1e-3, warmup=0, min_lr_ratio=0.1, schedule="constant",
                      progress=False)
    res = train(ModelConfig.preset("tiny", scheme="nope"), cfg, task.train_source(2, 0), callback=callback)
    assert res.steps == 60  # flat at 40, cooldown 20
    assert lrs[:40] == [1e-3] * 40 and lrs[-1] == pytest.approx(1e-4)
    assert all(a > b for a, b in zip(lrs[40:], lrs[41:]))


def test_fit_config_validation():
    with pytest.raises(ValueError, match="fit.target"):
        FitConfig(target=1.5)
    with pytest.raises(ValueError, match="fit.lr_grid"):
        FitConfig(lr_grid=[1e-3, 0.0])
    with pytest.raises(TypeError, match="fit.early_stop"):
        FitConfig(early_stop="yes")
    with pytest.raises(ValueError, match="fit.lm_schedule must be one of 'cosine', 'plateau'"):
        FitConfig(lm_schedule="wsd")
    with pytest.raises(ValueError, match="fit.lm_cooldown"):
        FitConfig(lm_cooldown=0.0)
    cfg = preset("ci").replace(fit={"val_every": 7})
    assert cfg.fit.val_every == 7 and cfg.validate().fingerprint() != preset("ci").validate().fingerprint()


def _tiny(task, **kw):
    cfg = preset("ci")
    cfg.schemes, cfg.tasks = ["alibi"], [task]
    cfg.d_model, cfg.n_heads, cfg.n_layers = 16, 2, 1
    cfg.algorithmic = {"train_len": 1, "eval_lengths": [1, 2], "n_eval": 16, "n_val": 16, "min_len": 1}
    cfg.task_options = {"copy": {"alphabet": 2}}
    cfg.lm = {"train_len": 8, "eval_factors": [1, 2], "eval_tokens": 64, "train_bytes": 20_000, "n_val": 4}
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg.validate()


@pytest.mark.slow
def test_run_job_stops_early_once_fitted_and_records_the_fit():
    # copying one of two symbols is learned in a few dozen steps: the budget is an upper bound
    cfg = _tiny("copy", task_train={"copy": {"steps": 2000, "batch_size": 32, "lr": 1e-2, "warmup": 5}},
                fit=FitConfig(val_every=10, confirm=2))
    res = run_job(Job("copy", "alibi", 0).to_dict(), cfg.to_dict())
    fit = res["train"]["fit"]
    assert fit["stopped_early"] and res["train"]["steps"] < 2000
    assert fit["fitted"] and fit["score"] >= 0.95 and fit["lr"] == 1e-2
    assert "validation exact match at L" in fit["score_kind"]


@pytest.mark.slow
def test_every_rate_of_the_grid_is_tried_and_the_best_validation_score_is_kept():
    # 1e-2 fits within 60 steps, 1e-6 does not; the fitted rate comes first and the grid still runs on
    cfg = _tiny("copy", task_train={"copy": {"steps": 60, "batch_size": 16, "warmup": 1, "lr": 1e-2}},
                fit=FitConfig(val_every=10, confirm=1, lr_grid=[1e-2, 1e-6]))
    res = run_job(Job("copy", "alibi", 0).to_dict(), cfg.to_dict())
    fit = res["train"]["fit"]
    tries = fit["lr_tries"]
    assert [t["lr"] for t in tries] == [1e-2, 1e-6]  # no stop at the first rate that passes
    assert tries[0]["fitted"] and not tries[1]["fitted"]
    assert [t["chosen"] for t in tries] == [True, False] and fit["lr"] == 1e-2 and fit["fitted"]
    assert fit["score"] == tries[0]["score"]  # the gate reads the score the rate was chosen by
    assert res["train"]["seconds_all_tries"] >= res["train"]["seconds"]


@pytest.mark.slow
def test_equal_tries_for_every_scheme_on_every_task_language_modelling_included():
    """Every scheme trains at every rate of the task's grid (issue 30: unequal tuning gave schemes 1 to 3
    tries and language models one rate)."""
    for task, steps in (("copy", 3), ("lm", 3)):
        cfg = _tiny(task, task_train={task: {"steps": steps, "batch_size": 4, "warmup": 1}},
                    fit=FitConfig(val_every=1, confirm=1, lr_grid=[3e-3, 1e-2]))
        counts = {}
        for scheme in ("nope", "alibi", "rope"):
            res = run_job(Job(task, scheme, 0).to_dict(), cfg.to_dict())
            counts[scheme] = sorted(t["lr"] for t in res["train"]["fit"]["lr_tries"])
            assert sum(t["chosen"] for t in res["train"]["fit"]["lr_tries"]) == 1
        assert all(c == [3e-3, 1e-2] for c in counts.values()), (task, counts)


@pytest.mark.slow
def test_a_task_grid_replaces_the_preset_grid():
    cfg = _tiny("copy", task_train={"copy": {"steps": 3, "batch_size": 4, "warmup": 1, "lr": 1e-5,
                                             "lr_grid": [1e-6, 1e-5]}},
                fit=FitConfig(val_every=1, lr_grid=[1e-2]))
    res = run_job(Job("copy", "alibi", 0).to_dict(), cfg.to_dict())
    tries = res["train"]["fit"]["lr_tries"]
    assert [t["lr"] for t in tries] == [1e-5, 1e-6]  # the task's grid, its own rate first; never 1e-2
    assert not any(t["fitted"] for t in tries) and res["train"]["fit"]["fitted"] is False


def test_a_run_that_cannot_fit_is_marked():
    cfg = _tiny("copy", task_train={"copy": {"steps": 2, "batch_size": 4, "lr": 1e-6, "warmup": 1}},
                fit=FitConfig(val_every=1))
    cfg.task_options = {"copy": {"alphabet": 8}}
    res = run_job(Job("copy", "alibi", 0).to_dict(), cfg.to_dict())
    fit = res["train"]["fit"]
    assert fit["fitted"] is False and fit["score"] < 0.95 and not fit["stopped_early"]


def test_randomized_position_models_are_validated_at_sampled_positions():
    """A model trained with randomized positions is validated as it was trained, not at 0..N-1."""
    import torch

    from relpos.model import ModelConfig, TransformerLM

    task = make_task("copy", train_len=4, eval_lengths=[4, 8], n_val=8)
    cfg = ModelConfig(vocab_size=task.vocab_size, d_model=16, n_layers=1, n_heads=2, scheme="rope",
                      max_len=64, random_positions=64)
    model = TransformerLM(cfg)
    seen = []
    forward = model.forward

    def spy(idx, *a, positions=None, **kw):
        seen.append(positions)
        return forward(idx, *a, positions=positions, **kw)

    model.forward = spy
    FitMonitor(task, FitConfig(val_every=1), steps=1)(_step(1, model))
    assert seen and all(p is not None for p in seen)
    pos = seen[0].reshape(-1)
    assert pos.shape[0] == task.train_seq_len() and bool((pos[1:] > pos[:-1]).all()) and int(pos.max()) < 64
    assert not torch.equal(pos, torch.arange(pos.shape[0]))  # sampled, not 0..N-1

    plain = TransformerLM(ModelConfig(vocab_size=task.vocab_size, d_model=16, n_layers=1, n_heads=2, scheme="rope",
                                      max_len=64))
    seen.clear()
    fwd2 = plain.forward
    plain.forward = lambda idx, *a, positions=None, **kw: (seen.append(positions), fwd2(idx, *a, **kw))[1]
    FitMonitor(task, FitConfig(val_every=1), steps=1)(_step(1, plain))
    assert seen and all(p is None for p in seen)


def test_the_fit_gate_reads_validation_never_the_test_set():
    """Issue 30: the gate once read the held-out test score at L while retries followed validation."""
    from relpos.compare.job import _fit_record

    task = make_task("copy", train_len=4, eval_lengths=[4, 8], n_val=8)
    good, bad = FitMonitor(task, FitConfig(val_every=1), steps=1), FitMonitor(task, FitConfig(val_every=1), steps=1)
    good(_step(1, Perfect(task)))
    bad(_step(1, Perfect(task, wrong=True)))
    test_says_perfect = [{"variant": None, "measurements": [{"eval_len": 4, "accuracy": 1.0}]}]
    test_says_zero = [{"variant": None, "measurements": [{"eval_len": 4, "accuracy": 0.0}]}]
    assert _fit_record(task, good, test_says_zero, 1e-3, [], 0.95)["fitted"] is True
    assert _fit_record(task, bad, test_says_perfect, 1e-3, [], 0.95)["fitted"] is False


def test_a_view_is_gated_on_its_own_validation_score():
    from relpos.compare.fitting import view_fitted

    row = {"task": "copy", "train_len": 4, "train": {"fit": {"fitted": True, "target": 0.95}},
           "metrics": [{"eval_len": 4, "accuracy": 1.0}]}
    assert view_fitted({**row, "validation": {"score": 0.5}}) is False  # the test score does not rescue it
    assert view_fitted({**row, "metrics": [{"eval_len": 4, "accuracy": 0.0}], "validation": {"score": 0.99}})


def test_choose_try_prefers_fitted_then_score_then_token_then_order():
    from relpos.compare.fitting import choose_try

    assert choose_try([{"fitted": False, "score": 0.94}, {"fitted": True, "score": 0.95}]) == 1
    assert choose_try([{"fitted": True, "score": 0.97, "token": 0.99}, {"fitted": True, "score": 0.97,
                                                                          "token": 1.0}]) == 1
    assert choose_try([{"fitted": True, "score": 1.0}, {"fitted": True, "score": 1.0}]) == 0
    assert choose_try([{"fitted": False, "score": None}, {"fitted": False, "score": 0.0}]) == 1
    with pytest.raises(ValueError):
        choose_try([])


def test_greedy_decoding_at_sampled_positions_runs_at_the_draw_not_at_0_to_n():
    """The sampled-position evaluation decodes greedily through the wrapper's forward pass (regression:
    the wrapper once forwarded ``generate`` to the model, whose cached decoding runs at 0..N-1, so the
    "sampled" numbers and the fit gate of randomized reverse runs were the 0..N-1 numbers)."""
    import torch

    from relpos.compare.fitting import SampledPositions
    from relpos.compare.job import sampled_positions_model_for
    from relpos.model import ModelConfig, TransformerLM
    from relpos.tasks import greedy_decode

    torch.manual_seed(0)
    task = make_task("reverse", train_len=4, eval_lengths=[4], n_eval=16)
    model = TransformerLM(ModelConfig(vocab_size=task.vocab_size, d_model=16, n_layers=1, n_heads=2,
                                      scheme="rope", max_len=64, random_positions=64)).eval()
    wrapped = sampled_positions_model_for(model, 64, draw=0, seed=0)(task.seq_len(4))
    assert isinstance(wrapped, SampledPositions)
    for name in ("generate", "step", "init_cache"):
        assert not hasattr(wrapped, name)
    prompts, answers = task.examples(4)
    n_new = answers.shape[1]
    with torch.no_grad():
        got = greedy_decode(wrapped, prompts, n_new)
        seq = prompts
        for _ in range(n_new):  # the oracle: full forward passes at a prefix of the draw
            logits = model(seq, positions=wrapped.pos[: seq.shape[1]])
            seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(got, seq[:, prompts.shape[1]:])
    # every forward pass of the wrapped greedy decoding ran at a prefix of the draw (not at 0..N-1)
    seen, forward = [], model.forward
    model.forward = lambda idx, *a, positions=None, **kw: (seen.append((idx.shape[1], positions)),
                                                           forward(idx, *a, positions=positions, **kw))[1]
    with torch.no_grad():
        greedy_decode(wrapped, prompts, n_new)
    assert len(seen) == n_new
    for n, pos in seen:
        assert pos is not None and torch.equal(pos, wrapped.pos[:n])
    assert not torch.equal(wrapped.pos[: seen[-1][0]], torch.arange(seen[-1][0]))


def test_lr_tries_put_the_task_rate_first_only_when_the_grid_holds_it():
    from relpos.compare.fitting import lr_tries

    assert lr_tries([2e-3, 1e-3, 3e-3], 3e-3) == [3e-3, 2e-3, 1e-3]
    assert lr_tries([2e-3, 1e-3, 3e-3], 2e-3) == [2e-3, 1e-3, 3e-3]
    assert lr_tries([2e-3, 1e-3], 5e-3) == [2e-3, 1e-3]  # never a rate outside the grid
    assert lr_tries([], 5e-3) == [5e-3]


class _Weights:
    """A stand-in model: one parameter tensor, scored by a table of validation results keyed by its value."""

    def __init__(self):
        import torch

        self.w = torch.zeros(1)

    def state_dict(self):
        return {"w": self.w}

    def load_state_dict(self, sd):
        self.w = sd["w"].clone()


def test_keep_best_keeps_the_best_checks_model_and_the_gate_reads_it():
    """Issue 49: Shaw's copy peaked at 1.000 and ended at 0.938: the final check alone failed the gate."""
    task = make_task("copy", train_len=4, eval_lengths=[4], n_val=8)
    scores = {0.0: 0.2, 1.0: 1.0, 2.0: 0.938}
    for keep in (False, True):
        model = _Weights()
        mon = FitMonitor(task, FitConfig(val_every=10, keep_best=keep, early_stop=False), steps=30)
        mon.score = lambda m: {"val_exact": scores[float(m.w)], "val_exact_at_L": scores[float(m.w)],
                               "val_token_accuracy_at_L": scores[float(m.w)]}
        for step in (10, 20, 30):
            mon(_step(step, model))
            model.w = model.w + 1  # training moves on after each check
        model.w = model.w * 0 + 2  # the final model is the one checked at 30
        assert mon.restore_best(model) is keep
        assert float(model.w) == (1.0 if keep else 2.0)
        assert mon.best_score() == (1.0 if keep else 0.938)
        assert mon.fitted_by_validation() is keep
        assert mon.first_pass == 20 and mon.summary()["first_pass_step"] == 20  # recorded either way
        assert mon.summary().get("kept_step") == (20 if keep else None)


def test_keep_best_stays_out_of_old_fingerprints():
    from relpos.compare.config import ExperimentConfig

    cfg = ExperimentConfig()
    before = cfg.fingerprint()
    assert "keep_best" not in cfg.protocol()["fit"]
    cfg.fit.keep_best = True
    assert cfg.fingerprint() != before and cfg.protocol()["fit"]["keep_best"] is True


def test_the_full_preset_validates_on_512_examples_at_L_and_32_kb_of_text():
    cfg = preset("full").validate()
    assert make_task("copy", **cfg.task_kwargs("copy")).n_val_at_l >= 512
    assert make_task("parity", **cfg.task_kwargs("parity")).n_val_at_l >= 512
    lm = cfg.task_kwargs("lm")
    assert lm["n_val"] * lm["train_len"] >= 32 * 1024
    assert cfg.fit.keep_best
    assert all(cfg.train_settings(t)["steps"] >= 6000 for t in ("copy", "copy-distinct", "reverse", "mqar"))
    assert cfg.model_settings("mqar")["n_heads"] == cfg.n_heads  # the probe sets MQAR's heads, not this change


@pytest.mark.parametrize("scheme", ["nope", "t5", "shaw", "transformer-xl", "rope"])
def test_validation_in_chunks_reads_as_one_pass(scheme):
    """The in-training validation runs in chunks of VALIDATION_TOKENS (cache-sized activations): the language
    models' loss equals one pass over every window (float32 rounding), ignored targets included, and the
    algorithmic scores are the same numbers, also when the last chunk is short."""
    import torch
    import torch.nn.functional as F

    from relpos.compare.fitting import lm_validation_loss
    from relpos.model import ModelConfig, TransformerLM
    from relpos.tasks.algorithmic import validation_score

    torch.manual_seed(0)
    model = TransformerLM(ModelConfig(vocab_size=11, d_model=16, n_layers=1, n_heads=2, scheme=scheme))
    x = torch.randint(0, 11, (37, 12))
    y = torch.randint(0, 11, (37, 12))
    y[::3, :4] = -100
    with torch.no_grad():
        logits = model.eval()(x)
        want = float(F.cross_entropy(logits.reshape(-1, 11).double(), y.reshape(-1)))
    model.train()
    for tokens in (12 * 5, 12 * 37, 10**6):  # 5 rows a chunk (the last has 2), one chunk, the default
        got = lm_validation_loss(model, x, y, max_tokens=tokens) if tokens < 10**6 else lm_validation_loss(model, x, y)
        assert got == pytest.approx(want, rel=1e-6)
    assert model.training
    with pytest.raises(ValueError, match="no target"):
        lm_validation_loss(model, x, torch.full_like(y, -100))
    # the algorithmic score: answer tokens where y is a target; chunking never changes a prediction
    target = logits.argmax(-1).masked_fill(torch.rand(37, 12, generator=torch.Generator().manual_seed(1)) < 0.3, 3)
    scored = torch.full_like(target, -100)
    scored[:, 6:] = target[:, 6:]
    one = validation_score(model, x, scored, max_tokens=10**6)
    assert 0 < one[1] < 1
    for tokens in (12, 12 * 5, None):
        assert (validation_score(model, x, scored) if tokens is None
                else validation_score(model, x, scored, max_tokens=tokens)) == one
