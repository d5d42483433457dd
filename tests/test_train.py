"""train(): schedule, determinism, accumulation, clipping, progress, callbacks, the CLI."""

from __future__ import annotations

import math

import pytest
import torch

from relpos import cli
from relpos.data import IGNORE_INDEX, ByteLMSource, stdlib_corpus
from relpos.model import ModelConfig
from relpos.training.loop import StepInfo, TrainConfig, Trainer, lr_at, train

CORPUS_BYTES = 60_000


@pytest.fixture(scope="module")
def corpus() -> bytes:
    return stdlib_corpus("train", max_bytes=CORPUS_BYTES)


def mcfg(scheme="alibi", **kw) -> ModelConfig:
    base = dict(d_model=16, n_layers=2, n_heads=2, max_len=64, scheme=scheme)
    base.update(kw)
    return ModelConfig(**base)


def tcfg(**kw) -> TrainConfig:
    base = dict(steps=4, batch_size=4, seq_len=16, warmup=2, progress=False, lr=1e-2)
    base.update(kw)
    return TrainConfig(**base)


class MaskedSource:
    """Byte windows with an uneven number of counted targets per row and micro-batch."""

    def __init__(self, corpus: bytes, rows: int, seq_len: int):
        self.src = ByteLMSource(corpus, rows, seq_len, seed=3)

    def batch(self, step: int, micro: int = 0):
        x, y = self.src.batch(step, micro)
        y = y.clone()
        for r in range(y.shape[0]):
            keep = 2 + (3 * r + 5 * micro + step) % (y.shape[1] - 2)
            y[r, keep:] = IGNORE_INDEX
        return x, y


class ConcatSource:
    """One micro-batch holding what ``inner`` splits into ``k`` micro-batches."""

    def __init__(self, inner, k: int):
        self.inner, self.k = inner, k

    def batch(self, step: int, micro: int = 0):
        parts = [self.inner.batch(step, m) for m in range(self.k)]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def test_lr_schedule_warmup_then_cosine():
    c = TrainConfig(steps=100, warmup=10, lr=1.0, min_lr_ratio=0.1)
    lrs = [lr_at(s, c) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a < b for a, b in zip(lrs[:10], lrs[1:10]))
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
    assert lr_at(55, c) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lr_at(100, c) == pytest.approx(0.1)


def test_same_seed_same_curve_and_learning(corpus):
    a = train(mcfg(), tcfg(steps=25, batch_size=8, seq_len=32, warmup=3), corpus)
    b = train(mcfg(), tcfg(steps=25, batch_size=8, seq_len=32, warmup=3), corpus)
    assert a.losses == b.losses and len(a.losses) == 25 == a.steps
    assert a.losses[-1] < a.losses[0] - 0.8  # it learns
    assert a.tokens_per_s > 0 and a.seconds > 0 and not a.model.training
    c = train(mcfg(), tcfg(steps=3, seed=1), corpus)
    assert c.losses != a.losses[:3]


def test_gradient_accumulation_equals_the_big_batch(corpus):
    src = MaskedSource(corpus, rows=3, seq_len=12)
    acc = train(mcfg(), tcfg(steps=3, accum_steps=2), src)
    big = train(mcfg(), tcfg(steps=3, accum_steps=1), ConcatSource(src, 2))
    torch.testing.assert_close(torch.tensor(acc.losses), torch.tensor(big.losses), atol=1e-5, rtol=1e-5)
    for (n, p), (_, q) in zip(acc.model.named_parameters(), big.model.named_parameters()):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-4, msg=n)
    # the loss is the mean over counted tokens, not the mean of micro-batch means
    x, y = src.batch(0, 0)
    assert (y == IGNORE_INDEX).any()


def test_dropout_and_random_positions_are_reproducible(corpus):
    m = mcfg("rope", dropout=0.1, random_positions=64)
    a = train(m, tcfg(steps=3), corpus)
    b = train(m, tcfg(steps=3), corpus)
    assert a.losses == b.losses


def test_gradient_clipping_is_applied(corpus, monkeypatch):
    seen = []
    orig = torch.nn.utils.clip_grad_norm_

    def spy(params, max_norm, *a, **k):
        seen.append(max_norm)
        return orig(params, max_norm, *a, **k)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    train(mcfg(), tcfg(steps=2, grad_clip=0.25), corpus)
    assert seen == [0.25, 0.25]
    seen.clear()
    train(mcfg(), tcfg(steps=2, grad_clip=0.0), corpus)
    assert seen == []


def test_weight_decay_groups(corpus):
    tr = Trainer(mcfg("t5"), tcfg(), corpus)
    decay, no_decay = tr.opt.param_groups
    ids = lambda g: {id(p) for p in g["params"]}  # noqa: E731
    assert id(tr.model.pos[0].table) in ids(no_decay)
    assert id(tr.model.blocks[0].ln1.weight) in ids(no_decay)
    assert id(tr.model.blocks[0].attn.qkv.weight) in ids(decay) and decay["weight_decay"] == 0.1
    assert no_decay["weight_decay"] == 0.0
    every = Trainer(mcfg("t5"), tcfg(decay="all"), corpus)
    decay, no_decay = every.opt.param_groups
    assert ids(no_decay) == {id(p) for p in every.model.pos.parameters()}  # only the position scheme is spared
    assert id(every.model.blocks[0].ln1.weight) in ids(decay) and id(every.model.blocks[0].attn.qkv.bias) in ids(decay)
    with pytest.raises(ValueError, match="decay must be one of 'matrices', 'all'"):
        tcfg(decay="biases")


def test_callback_and_early_stop(corpus):
    infos = []

    def cb(info: StepInfo):
        infos.append(info)
        return info.step == 2

    r = train(mcfg(), tcfg(steps=5), corpus, callback=cb)
    assert [i.step for i in infos] == [1, 2] and r.steps == 2 and len(r.losses) == 2
    assert infos[0].loss == r.losses[0] and infos[0].lr > 0


def test_progress_bar_quiet_unless_terminal(corpus, capfd):
    train(mcfg(), tcfg(steps=2, progress=None), corpus)  # stderr is captured: not a TTY
    assert capfd.readouterr().err == ""
    train(mcfg(), tcfg(steps=2, progress=True, log_every=1), corpus)
    err = capfd.readouterr().err
    assert "loss=" in err and "tok_s=" in err


def test_train_leaves_the_global_rng_alone(corpus):
    torch.manual_seed(123)
    want = torch.rand(3)
    torch.manual_seed(123)
    train(mcfg(), tcfg(steps=1), corpus)
    assert torch.equal(torch.rand(3), want)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"steps": -1}, "steps"),
        ({"lr": -1.0}, "lr"),
        ({"accum_steps": 0}, "accum_steps"),
        ({"min_lr_ratio": 2.0}, "min_lr_ratio"),
        ({"resume": True}, "ckpt_dir"),
        ({"device": "tpu"}, "device"),
    ],
)
def test_train_config_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        tcfg(**kw)


@pytest.mark.parametrize("kw, match", [
    ({"steps": "3"}, "steps must be an int"),
    ({"lr": "0.1"}, "lr must be a number"),
    ({"progress": "yes"}, "progress must be a bool"),
    ({"resume": 1}, "resume must be a bool"),
])
def test_train_config_wrong_types(kw, match):
    with pytest.raises(TypeError, match=match):
        tcfg(**kw)


def test_train_config_nan_and_huge():
    with pytest.raises(ValueError, match="lr must be a finite number"):
        tcfg(lr=float("nan"))
    with pytest.raises(ValueError, match="seq_len must be in"):
        tcfg(seq_len=10**12)


def test_bad_batches(corpus):
    class AllIgnored:
        def batch(self, step, micro=0):
            return torch.zeros(2, 4, dtype=torch.long), torch.full((2, 4), IGNORE_INDEX)

    with pytest.raises(ValueError, match="nothing to learn"):
        train(mcfg(), tcfg(steps=1), AllIgnored())
    with pytest.raises(TypeError, match="batch source"):
        train(mcfg(), tcfg(steps=1), [1, 2, 3])


def test_cli_train_then_generate(tmp_path, capsys):
    out = tmp_path / "run"
    rc = cli.main(["train", "--preset", "tiny", "--scheme", "t5", "-o", "num_buckets=8", "--steps", "3",
                   "--seq-len", "16", "--batch-size", "2", "--max-bytes", "20000", "--out", str(out),
                   "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "scheme=t5" in text and "val_loss=" in text
    assert (out / "model.safetensors").exists() and (out / "config.json").exists()
    rc = cli.main(["generate", "--checkpoint", str(out), "--prompt", "import ", "--tokens", "12", "--seed", "1"])
    assert rc == 0
    assert capsys.readouterr().out.startswith("import ")
    # resume: already at 3 steps, continue to 4
    rc = cli.main(["train", "--preset", "tiny", "--scheme", "t5", "-o", "num_buckets=8", "--steps", "4",
                   "--seq-len", "16", "--batch-size", "2", "--max-bytes", "20000", "--out", str(out),
                   "--resume", "--no-progress"])
    assert rc == 0 and "steps=4" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, match",
    [
        (["train", "--preset", "gigantic"], "unknown preset"),
        (["train", "--scheme", "wavelets"], "unknown scheme"),
        (["train", "--scheme", "alibi", "--seq-len", "5000"], "max_len"),
        (["generate", "--checkpoint", "/nonexistent/relpos-run"], "no checkpoint"),
    ],
)
def test_cli_bad_input_is_one_clear_line(argv, match, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("relpos ") and "Traceback" not in err
    assert __import__("re").search(match, err)


def test_cpu_steps_seed_only_the_cpu_generator_with_the_same_losses(corpus, monkeypatch):
    """Issue 52: ``torch.manual_seed`` per micro-batch also queued accelerator seeds, formatting a stack trace
    each step (about 0.4 ms); a CPU step seeds the CPU generator alone. Dropout and randomized positions read
    it, so the losses equal those of the old seeding exactly."""
    import relpos.training.loop as T

    m = mcfg("rope", dropout=0.1, random_positions=64)
    new = train(m, tcfg(steps=3, accum_steps=2), corpus).losses
    calls = []
    monkeypatch.setattr(torch, "manual_seed", lambda s: calls.append(s) or torch.default_generator.manual_seed(s))
    train(m, tcfg(steps=3, accum_steps=2), corpus)
    assert calls == [0], "a CPU step called torch.manual_seed (only the model's initialisation may)"
    monkeypatch.undo()
    real = torch.manual_seed
    monkeypatch.setattr(T, "_seed_micro", lambda device, seed: real(seed))  # the seeding before issue 52
    old = train(m, tcfg(steps=3, accum_steps=2), corpus).losses
    assert new == old


def test_steps_run_with_subnormals_flushed_and_the_callers_setting_comes_back():
    # a subnormal attention probability sends a CPU matmul down a slow path (DeBERTa and CoPE: about 4x at
    # 4 x 256): the trainer flushes them during its steps and restores the caller's setting afterwards
    from relpos.training.denormals import flushing

    seen = []

    class Recording:
        def __init__(self):
            self.src = ByteLMSource(stdlib_corpus("train", max_bytes=10_000), batch_size=2, seq_len=16, seed=0)

        def batch(self, step, micro=0):
            seen.append(flushing())
            return self.src.batch(step, micro)

    assert not flushing()
    train(ModelConfig.preset("tiny", scheme="alibi"), TrainConfig(steps=2, batch_size=2, seq_len=16, progress=False),
          Recording())
    assert seen == [True, True]
    assert not flushing()


def test_the_multi_tensor_optimizer_and_clipping_repeat_the_per_tensor_loop_bit_for_bit(corpus, monkeypatch):
    # the trainer asks for AdamW's and clip_grad_norm_'s foreach implementations on CPU (fewer calls per step);
    # they must give exactly the numbers of PyTorch's CPU default, the per-tensor loop
    import relpos.training.loop as loop

    assert loop._foreach("cpu") is True and loop._foreach("meta") is None
    seen = []
    orig = torch.optim.AdamW

    def spy(*a, **k):
        seen.append(k.get("foreach"))
        return orig(*a, **k)

    monkeypatch.setattr(torch.optim, "AdamW", spy)
    kw = dict(steps=6, grad_clip=0.25, weight_decay=0.1)
    fast = Trainer(mcfg("t5"), tcfg(**kw), corpus)
    monkeypatch.setattr(loop, "_foreach", lambda device: False)
    slow = Trainer(mcfg("t5"), tcfg(**kw), corpus)
    assert seen == [True, False]
    for _ in range(6):
        assert fast.step() == slow.step()
    for a, b in zip(fast.model.parameters(), slow.model.parameters()):
        assert torch.equal(a, b)
